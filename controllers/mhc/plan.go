package mhc

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/budget"
	"github.com/metalheal/metalheal/internal/conditions"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/template"
)

// defaultNodeStartupTimeout applies when spec.nodeStartupTimeout is not set (the API server defaults it).
const defaultNodeStartupTimeout = 10 * time.Minute

// blocker says why an unhealthy Machine is not remediated now. Its values are also the reason label of
// the remediations-skipped metric.
type blocker string

const (
	// notBlocked: the Machine is remediated.
	notBlocked blocker = ""
	// blockedPaused: the check or its Cluster is paused, or the Cluster is being deleted.
	blockedPaused blocker = "Paused"
	// blockedShortCircuit: the unhealthy budget (maxUnhealthy or unhealthyRange) is exceeded.
	blockedShortCircuit blocker = "ShortCircuit"
	// blockedNotControlled: the Machine is not controlled by a MachineSet or a control plane, so nothing
	// would replace it.
	blockedNotControlled blocker = "NotControlled"
	// blockedDeleting: the Machine is already being deleted.
	blockedDeleting blocker = "Deleting"
	// blockedExcluded: the Machine's Node is labelled remediation.medik8s.io/exclude-from-remediation=true.
	blockedExcluded blocker = engine.SkipExcluded
	// blockedDisabled: the check is disabled (a template missing or unusable); the NodeHealthCheck's
	// check-wide reason.
	blockedDisabled blocker = "Disabled"
)

// stepsFor returns the check's remediation steps in the order they are tried; none for condition-based
// remediation.
func stepsFor(mhc *v1alpha1.MachineHealthCheck) ([]engine.Step, error) {
	var steps []engine.Step
	for _, r := range engine.StepRefs(mhc.Spec.RemediationTemplate, mhc.Spec.EscalatingRemediations) {
		if r.Ref.Namespace != "" && r.Ref.Namespace != mhc.Namespace {
			return nil, &InvalidSpecError{Field: "remediationTemplate.namespace", Reason: fmt.Sprintf(
				"the template must be in the check's namespace %q, not %q: remediation requests live beside their Machines", mhc.Namespace, r.Ref.Namespace)}
		}
		gv, err := schema.ParseGroupVersion(r.Ref.APIVersion)
		if err != nil {
			return nil, &InvalidSpecError{Field: "remediationTemplate.apiVersion", Reason: err.Error()}
		}
		gvk, err := template.RemediationGVK(gv.WithKind(r.Ref.Kind))
		if err != nil {
			return nil, &InvalidSpecError{Field: "remediationTemplate.kind", Reason: err.Error()}
		}
		steps = append(steps, engine.Step{GVK: gvk, Namespace: mhc.Namespace, Template: r.Ref.Name, Timeout: r.Timeout})
	}
	return steps, nil
}

// checkSpecFor turns the check's spec into what checkTarget needs.
func checkSpecFor(mhc *v1alpha1.MachineHealthCheck) checkSpec {
	s := checkSpec{NodeStartupTimeout: defaultNodeStartupTimeout}
	if t := mhc.Spec.NodeStartupTimeout; t != nil {
		s.NodeStartupTimeout = t.Duration
	}
	for _, c := range mhc.Spec.UnhealthyConditions {
		s.Criteria = append(s.Criteria, conditions.Criterion{Type: c.Type, Status: string(c.Status), Duration: c.Timeout.Duration})
	}
	for _, c := range mhc.Spec.UnhealthyMachineConditions {
		s.MachineCriteria = append(s.MachineCriteria, conditions.Criterion{Type: c.Type, Status: string(c.Status), Duration: c.Timeout.Duration})
	}
	return s
}

// observedTarget is a Machine the selector matched, with what was read about it.
type observedTarget struct {
	Machine *clusterv1.Machine
	// Node is the Machine's Node, nil when it has none or it was not found.
	Node *corev1.Node
	// NodeMissing: the Machine has a nodeRef but the Node does not exist.
	NodeMissing bool
	// Requests are this check's remediation requests for the Machine (named after it).
	Requests []engine.Request
}

// planInput is everything plan decides from.
type planInput struct {
	Check *v1alpha1.MachineHealthCheck
	Spec  checkSpec
	Steps []engine.Step
	// Paused, when not empty, says why nothing may be changed (the check or its Cluster is paused).
	Paused string
	// Disabled says why no remediation may start (a template missing or unusable), as a NodeHealthCheck's
	// Disabled: the check still reads and reports its Machines and ends the steps under way. DisabledUntil
	// is when to look again (a template kind not installed, which no watch reports).
	Disabled      *engine.Cause
	DisabledUntil time.Time
	Cluster       *clusterv1.Cluster
	// Machines are all the Machines the check selects, skipped ones included.
	Machines []observedTarget
	// Orphans are requests the check owns whose Machine no longer exists.
	Orphans []orphan
	Now     time.Time
	// Safety is what the safety gates shared with the NodeHealthCheck decide from (safety.go).
	Safety safetyInput
}

// targetPlan is what to do about one Machine.
type targetPlan struct {
	Machine *clusterv1.Machine
	Verdict verdict
	// ControlPlane: a control-plane Machine, or one whose Node has a control-plane role.
	ControlPlane bool
	Blocked      blocker
	// Skip is the safety gate's refusal that set Blocked (safety.go), for status and the event.
	Skip *engine.Skip
	// Lease takes, renews or takes over the Machine's node lease for the check (before Create).
	Lease *leaseAction
	// NewlyUnhealthy: the Machine was not in status.unhealthyMachines before.
	NewlyUnhealthy bool
	// Conditions is the Machine's new status.conditions when they change; nil when they do not.
	Conditions []metav1.Condition
	// MarkedForOwner: OwnerRemediated becomes False, asking the owner to replace the Machine (once its
	// Node's lease is taken: see keepFromOwner).
	MarkedForOwner bool
	// Out is the engine's decision about the Machine's requests (engine.Pass), nil when none was made: its
	// walk's time-outs and deletions and the request to create, or the deletion of those of a Machine
	// healthy again.
	Out *engine.Outcome
	// Unconfirm: the Machine's remediation is over; its Node's confirmation annotation
	// (v1alpha1.AnnotationConfirmedHealthy) is removed.
	Unconfirm bool
	// Was is the Machine's status entry before the plan (empty: none), whose skip a new skip is said
	// against (engine.Skip.Event).
	Was v1alpha1.RemediationProgress
}

// checkEvent is an event to record about the check or a Machine.
type checkEvent struct {
	Regarding client.Object
	Related   client.Object
	Type      string
	Reason    string
	Note      string
}

// plan is the outcome of planChecks: the check's new status and what to do.
type plan struct {
	Status    v1alpha1.MachineHealthCheckStatus
	Decision  budget.Decision
	Unhealthy int
	Targets   []targetPlan
	Steps     []engine.Step
	// Orphans are requests to delete because their Machine is gone (deleted by a remediation's
	// escalation, by its owner, or by anyone): nothing else would delete them while the check exists.
	Orphans []orphan
	// NextCheck is the earliest instant at which a decision can change by the passage of time alone.
	NextCheck time.Time
	Events    []checkEvent
	// Release are the Nodes whose lease the check holds and no longer needs.
	Release []string
	// Site is the cluster of the check's Nodes, where Release and the targets' Lease are carried out.
	Site nodeSite
	// Backoff is the repeat-remediation back-off's memory (see backoff.go), Holds the holds the plan began.
	Backoff *backoff.Memory
	Holds   int
}

// planChecks is the MachineHealthCheck's decision, a pure function of what was observed and now: which
// Machines are targets, which are unhealthy, whether the budget allows remediation, and for each Machine
// what to write. One Machine's state never stops the decisions about another.
func planChecks(in planInput) (plan, error) {
	mhc, now := in.Check, in.Now
	p := plan{Site: in.Safety.Site, Steps: in.Steps, Backoff: backoff.NewMemory(backoff.PolicyOf(mhc.Spec.RemediationBackoff), mhc.Status.RecentRemediations, now)}
	observed, healthy := p.evaluate(in)
	decision, err := budget.Evaluate(budget.Policy{MaxUnhealthy: mhc.Spec.MaxUnhealthy, UnhealthyRange: mhc.Spec.UnhealthyRange},
		len(p.Targets), len(p.Targets)-healthy)
	if err != nil {
		return plan{}, &InvalidSpecError{Field: "maxUnhealthy/unhealthyRange", Reason: err.Error()}
	}
	p.Decision = decision
	if in.Paused == "" {
		p.Orphans = in.Orphans
	}
	cw := checkWide(&p, mhc, in.Paused, in.Disabled, decision, now)
	p.NextCheck = engine.Earliest(p.NextCheck, in.DisabledUntil)

	pl := &planner{in: in, p: &p, storm: cw.Storm.Active(), gate: newSafety(in, p.Backoff),
		prev: make(map[string]*v1alpha1.UnhealthyMachine, len(mhc.Status.UnhealthyMachines)),
		status: v1alpha1.MachineHealthCheckStatus{
			ExpectedMachines:    ptr.To(int32(len(p.Targets))),
			CurrentHealthy:      ptr.To(int32(healthy)),
			RemediationsAllowed: ptr.To(decision.RemediationsAllowed),
			ObservedGeneration:  mhc.Generation,
			Conditions:          cw.Conditions,
		}}
	for i := range mhc.Status.UnhealthyMachines {
		pl.prev[mhc.Status.UnhealthyMachines[i].Name] = &mhc.Status.UnhealthyMachines[i]
	}
	// Machines are decided in the order their criteria expired (then by name), as a NodeHealthCheck takes
	// its Nodes: where only one may start (control-plane Machines), the first to fail goes first.
	order := make([]int, len(p.Targets))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ta, tb := p.Targets[a], p.Targets[b]
		return cmp.Or(ta.Verdict.ExpiredAt.Compare(tb.Verdict.ExpiredAt), strings.Compare(ta.Machine.Name, tb.Machine.Name))
	})
	for _, i := range order {
		pl.decideMachine(i, observed[i])
	}
	// The template remediations' starts go through the gates, in the order their criteria expired.
	pl.gate.pass.Admit()
	for _, w := range pl.walks {
		t := &p.Targets[w.target]
		pl.gate.admitted(t, observed[w.target], &pl.status.UnhealthyMachines[w.entry], w.out)
		p.Events = append(p.Events, machineEvents(mhc, t.Machine, w.out.Events)...)
	}
	p.NextCheck, p.Holds = engine.Earliest(p.NextCheck, pl.gate.pass.Next), pl.gate.pass.Holds
	slices.Sort(pl.status.Targets)
	slices.SortFunc(pl.status.UnhealthyMachines, func(a, b v1alpha1.UnhealthyMachine) int { return strings.Compare(a.Name, b.Name) })

	if in.Paused == "" {
		p.Release = pl.gate.releaseLeases(&p)
	}
	p.Status = pl.status
	return p, nil
}

// evaluate judges the Machines the check selects (those without a skip annotation: observed, in the order
// of p.Targets) and counts the healthy ones, as the budget counts them, and the unhealthy ones.
func (p *plan) evaluate(in planInput) (observed []observedTarget, healthy int) {
	for _, o := range in.Machines {
		if skipped, _ := skipRemediation(o.Machine); skipped {
			continue
		}
		observed = append(observed, o)
		v := checkTarget(in.Spec, targetInput{Machine: o.Machine, Node: o.Node, NodeMissing: o.NodeMissing, Cluster: in.Cluster}, in.Now)
		p.NextCheck = engine.Earliest(p.NextCheck, v.NextCheck)
		switch {
		case v.State == stateHealthy && v.NextCheck.IsZero() && o.Node != nil && o.Machine.DeletionTimestamp.IsZero():
			// Healthy, as Cluster API counts it: a Machine failing a criterion that has not expired yet
			// ("likely to go unhealthy"), one without a Node and one being deleted are not, and count
			// against the budget (the rule the NodeHealthCheck applies to its Nodes).
			healthy++
		case v.State == stateUnhealthy:
			p.Unhealthy++
		}
		p.Targets = append(p.Targets, targetPlan{Machine: o.Machine, Verdict: v, ControlPlane: isControlPlaneTarget(o)})
	}
	return observed, healthy
}

// planner is one planChecks pass over the Machines: the plan, the new status, the gates, and the template
// remediations walked (engine.Pass.Unhealthy) whose starts Admit decides.
type planner struct {
	in     planInput
	p      *plan
	status v1alpha1.MachineHealthCheckStatus
	gate   *safety
	// storm: a storm or its cooldown holds every new remediation back.
	storm bool
	prev  map[string]*v1alpha1.UnhealthyMachine
	walks []walked
}

// walked is a Machine whose template remediation was walked: its target, its status entry, the outcome.
type walked struct {
	target, entry int
	out           *engine.Outcome
}

// decideMachine decides for Machine i of the plan, observed as o: what blocks it, and what its health
// calls for.
func (pl *planner) decideMachine(i int, o observedTarget) {
	t, in := &pl.p.Targets[i], pl.in
	pl.status.Targets = append(pl.status.Targets, t.Machine.Name)
	prev := pl.prev[t.Machine.Name]
	if prev != nil {
		t.Was = prev.RemediationProgress
	}
	was := t.Was
	t.Blocked = blockerFor(o, in.Paused, pl.p.Decision.Allowed)
	switch {
	case t.Blocked != notBlocked:
	case in.Disabled != nil:
		t.Blocked = blockedDisabled
	case pl.storm:
		t.Blocked = blockedStormCooldown
	}
	switch t.Verdict.State {
	case stateUnhealthy:
		pl.unhealthy(i, t, o, prev, was)
	case stateHealthy:
		pl.healthy(t, o, prev, was)
	case statePending:
		// Not judged yet: keep what was started (its escalation memory) and touch nothing.
		if records := engine.Adopted(was, o.Requests, in.Now); prev != nil && len(records) > 0 {
			pl.status.UnhealthyMachines = append(pl.status.UnhealthyMachines, v1alpha1.UnhealthyMachine{Name: t.Machine.Name,
				Reason: prev.Reason, RemediationProgress: v1alpha1.RemediationProgress{Remediations: records}})
			pl.gate.keepLease(t, o)
		}
	}
}

// unhealthy decides for an unhealthy Machine: reported on its conditions and in status, handed to its
// owner (condition-based remediation, through the gates) or its template remediation walked, and the
// skip said.
func (pl *planner) unhealthy(i int, t *targetPlan, o observedTarget, prev *v1alpha1.UnhealthyMachine, was v1alpha1.RemediationProgress) {
	in, p, mhc := pl.in, pl.p, pl.in.Check
	t.NewlyUnhealthy = prev == nil
	entry := v1alpha1.UnhealthyMachine{Name: t.Machine.Name, Reason: t.Verdict.Reason}
	entry.Remediations = engine.Adopted(was, o.Requests, in.Now)
	if t.Blocked == blockedExcluded {
		entry.SkipReason, entry.SkipMessage = string(blockedExcluded), gates.ExcludedMessage()
	}
	if len(in.Steps) == 0 && t.Blocked == notBlocked && !remediating(o) {
		// Condition-based: the gates apply before the owner is asked to replace the Machine.
		p.NextCheck = engine.Earliest(p.NextCheck, applyGate(pl.gate, t, &entry, o, in.Now))
	}
	if planUnhealthy(t, in.Steps, in.Now) {
		pl.walks = append(pl.walks, walked{target: i, entry: len(pl.status.UnhealthyMachines),
			out: pl.gate.pass.Unhealthy(pl.gate.target(t, o, was))})
	} else {
		pl.gate.keepLease(t, o)
	}
	p.Events = append(p.Events, skipEvents(mhc, t, &entry, prev)...)
	pl.status.UnhealthyMachines = append(pl.status.UnhealthyMachines, entry)
	if t.NewlyUnhealthy && t.Blocked == blockedNotControlled {
		p.Events = append(p.Events, checkEvent{Regarding: t.Machine, Related: mhc, Type: corev1.EventTypeWarning,
			Reason: EventMachineNotRemediable,
			Note:   fmt.Sprintf("Machine is unhealthy (%s) but is not controlled by a MachineSet or a control plane: it is reported, not remediated", t.Verdict.Reason)})
	}
}

// healthy decides for a healthy Machine: reported on its conditions; its requests kept for healthyDelay
// (or until a person confirms it), then deleted, and a person's confirmation with them
// (engine.Pass.Healthy).
func (pl *planner) healthy(t *targetPlan, o observedTarget, prev *v1alpha1.UnhealthyMachine, was v1alpha1.RemediationProgress) {
	planHealthy(t, pl.in.Now)
	switch {
	case t.Blocked == blockedPaused:
		// Hands off: its entry stays as it was while its requests do.
		if prev != nil && len(o.Requests) > 0 {
			pl.status.UnhealthyMachines = append(pl.status.UnhealthyMachines, *prev)
		}
		return
	case len(o.Requests) == 0:
		// A confirmation confirms one remediation: removed once its requests are found gone.
		t.Unconfirm = engine.Confirmed(o.Node) && prev != nil
		return
	}
	out := pl.gate.pass.Healthy(pl.gate.target(t, o, was), healthySince(prev), engine.DurationOf(pl.in.Check.Spec.HealthyDelay),
		engine.Confirmed(o.Node))
	// Its entry stays as long as its requests do, being deleted too, as a Node's: a later pass neither
	// begins the delay (and a wait for a confirmation) again nor counts the remediation a second time.
	entry := v1alpha1.UnhealthyMachine{Name: t.Machine.Name, Reason: clusterv1.MachineHealthCheckUnhealthyNodeReason,
		RemediationProgress: out.Entry}
	if prev != nil {
		entry.Reason = prev.Reason
	}
	pl.status.UnhealthyMachines = append(pl.status.UnhealthyMachines, entry)
	if out.Lease {
		t.Lease = &leaseAction{Node: o.Node, From: out.From}
	}
	t.Out, t.Unconfirm = out, out.Unconfirm
	pl.p.Events = append(pl.p.Events, machineEvents(pl.in.Check, t.Machine, out.Events)...)
}

// skipRemediation reports whether a Machine is left out of the check altogether (the user guide's
// "Skipping Remediation": the cluster.x-k8s.io/skip-remediation or cluster.x-k8s.io/paused annotation).
func skipRemediation(m *clusterv1.Machine) (bool, string) {
	if _, ok := m.Annotations[clusterv1.MachineSkipRemediationAnnotation]; ok {
		return true, clusterv1.MachineSkipRemediationAnnotation
	}
	if _, ok := m.Annotations[clusterv1.PausedAnnotation]; ok {
		return true, clusterv1.PausedAnnotation
	}
	return false, ""
}

// blockerFor says why the Machine may not be remediated now, whatever its health.
func blockerFor(o observedTarget, paused string, allowed bool) blocker {
	switch {
	case paused != "":
		return blockedPaused
	case !o.Machine.DeletionTimestamp.IsZero():
		return blockedDeleting
	case !controlledByReplacer(o.Machine):
		return blockedNotControlled
	case o.Node != nil && o.Node.Labels[v1alpha1.LabelExcludeFromRemediation] == "true":
		return blockedExcluded
	case !allowed:
		return blockedShortCircuit
	}
	return notBlocked
}

// controlledByReplacer reports whether the Machine's controller is a MachineSet or a control plane
// (KubeadmControlPlane or any kind in a controlplane.cluster.x-k8s.io group): something that replaces a
// Machine marked for remediation.
func controlledByReplacer(m *clusterv1.Machine) bool {
	ref := metav1.GetControllerOfNoCopy(m)
	if ref == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false
	}
	if gv.Group == clusterv1.GroupVersion.Group && ref.Kind == "MachineSet" {
		return true
	}
	return gv.Group == "controlplane.cluster.x-k8s.io" || strings.HasSuffix(gv.Group, ".controlplane.cluster.x-k8s.io") ||
		strings.HasSuffix(ref.Kind, "ControlPlane")
}

// planUnhealthy reports an unhealthy Machine on its conditions and, for condition-based remediation, asks
// its owner to replace it. It reports whether its template remediation is walked (engine.Pass.Unhealthy):
// a Machine held back (a storm, its cooldown, the exclusion label) still ends the steps under way, as a
// NodeHealthCheck's do, but starts nothing new.
func planUnhealthy(t *targetPlan, steps []engine.Step, now time.Time) bool {
	switch t.Blocked {
	case blockedPaused, blockedDeleting, blockedNotControlled:
		// Left alone: paused means hands off, a deleting Machine is already going, and nothing would
		// replace a Machine without a controller.
		return false
	}
	conds, changed := withCondition(t.Machine.Status.Conditions, metav1.Condition{
		Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionFalse,
		Reason: t.Verdict.Reason, Message: t.Verdict.Message, LastTransitionTime: metav1.NewTime(now)})
	if len(steps) == 0 && t.Blocked == notBlocked {
		// Cluster API's default: the owner replaces a Machine whose OwnerRemediated is False. Once the
		// owner has taken it over (OwnerRemediated False) it is the owner's; a True one (a remediation
		// that completed) asks again.
		if c := meta.FindStatusCondition(conds, clusterv1.MachineOwnerRemediatedCondition); c == nil || c.Status == metav1.ConditionTrue {
			conds, _ = withCondition(conds, metav1.Condition{
				Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse,
				Reason: clusterv1.MachineOwnerRemediatedWaitingForRemediationReason, Message: "Waiting for remediation",
				LastTransitionTime: metav1.NewTime(now)})
			changed, t.MarkedForOwner = true, true
		}
	}
	if changed {
		t.Conditions = conds
	}
	return len(steps) > 0
}

// planHealthy reports a healthy Machine on its conditions.
func planHealthy(t *targetPlan, now time.Time) {
	switch t.Blocked {
	case blockedPaused, blockedDeleting, blockedNotControlled:
		return
	}
	if conds, changed := withCondition(t.Machine.Status.Conditions, metav1.Condition{
		Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionTrue,
		Reason: clusterv1.MachineHealthCheckSucceededReason, LastTransitionTime: metav1.NewTime(now)}); changed {
		t.Conditions = conds
	}
}

// healthySince is since when a Machine's status says it is healthy again (zero: it does not).
func healthySince(prev *v1alpha1.UnhealthyMachine) time.Time {
	if prev == nil || prev.ConditionsHealthyTimestamp == nil {
		return time.Time{}
	}
	return prev.ConditionsHealthyTimestamp.Time
}

// create is the request the Machine's outcome asks for (nil: none).
func (t *targetPlan) create() *engine.Create {
	if t.Out == nil {
		return nil
	}
	return t.Out.Create
}

// withCondition returns conds with c set (the transition time kept when the status does not change),
// and whether anything changed. conds is not modified.
func withCondition(conds []metav1.Condition, c metav1.Condition) ([]metav1.Condition, bool) {
	out := slices.Clone(conds)
	changed := meta.SetStatusCondition(&out, c)
	return out, changed
}

// keepFromOwner takes back the plan to hand the Machine to its owner: its Node's lease could not be
// taken. The Machine's OwnerRemediated condition stays as it was.
func (t *targetPlan) keepFromOwner() {
	if !t.MarkedForOwner {
		return
	}
	t.MarkedForOwner = false
	if was := meta.FindStatusCondition(t.Machine.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition); was != nil {
		meta.SetStatusCondition(&t.Conditions, *was)
	} else {
		meta.RemoveStatusCondition(&t.Conditions, clusterv1.MachineOwnerRemediatedCondition)
	}
}
