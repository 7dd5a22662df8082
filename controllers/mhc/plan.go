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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/budget"
	"github.com/metalheal/metalheal/internal/conditions"
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
	blockedExcluded blocker = "Excluded"
)

// step is one remediation step: a template, the kind of request it makes and how long it may take.
type step struct {
	// Template names the template; its namespace is always the check's.
	Template v1alpha1.TemplateReference
	// GVK is the kind of the remediation request the template makes.
	GVK schema.GroupVersionKind
	// Timeout ends the step when it passes; 0 means never (a single remediationTemplate).
	Timeout time.Duration
}

func (s step) matches(r v1alpha1.MachineRemediationRequest) bool {
	return r.APIVersion == s.GVK.GroupVersion().String() && r.Kind == s.GVK.Kind && r.TemplateName == s.Template.Name
}

// stepsFor returns the check's remediation steps in the order they are tried; none for condition-based
// remediation.
func stepsFor(mhc *v1alpha1.MachineHealthCheck) ([]step, error) {
	type ordered struct {
		ref     v1alpha1.TemplateReference
		order   int32
		timeout time.Duration
	}
	var refs []ordered
	if t := mhc.Spec.RemediationTemplate; t != nil {
		refs = append(refs, ordered{ref: *t})
	}
	for _, e := range mhc.Spec.EscalatingRemediations {
		refs = append(refs, ordered{ref: e.RemediationTemplate, order: e.Order, timeout: e.Timeout.Duration})
	}
	slices.SortStableFunc(refs, func(a, b ordered) int { return cmp.Compare(a.order, b.order) })
	steps := make([]step, 0, len(refs))
	for _, r := range refs {
		if r.ref.Namespace != "" && r.ref.Namespace != mhc.Namespace {
			return nil, &InvalidSpecError{Field: "remediationTemplate.namespace", Reason: fmt.Sprintf(
				"the template must be in the check's namespace %q, not %q: remediation requests live beside their Machines", mhc.Namespace, r.ref.Namespace)}
		}
		gv, err := schema.ParseGroupVersion(r.ref.APIVersion)
		if err != nil {
			return nil, &InvalidSpecError{Field: "remediationTemplate.apiVersion", Reason: err.Error()}
		}
		gvk, err := template.RemediationGVK(gv.WithKind(r.ref.Kind))
		if err != nil {
			return nil, &InvalidSpecError{Field: "remediationTemplate.kind", Reason: err.Error()}
		}
		ref := r.ref
		ref.Namespace = mhc.Namespace
		steps = append(steps, step{Template: ref, GVK: gvk, Timeout: r.timeout})
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
	Requests []*unstructured.Unstructured
}

// planInput is everything plan decides from.
type planInput struct {
	Check *v1alpha1.MachineHealthCheck
	Spec  checkSpec
	Steps []step
	// Paused, when not empty, says why nothing may be changed (the check or its Cluster is paused).
	Paused  string
	Cluster *clusterv1.Cluster
	// Machines are all the Machines the check selects, skipped ones included.
	Machines []observedTarget
	// Orphans are requests the check owns whose Machine no longer exists.
	Orphans []*unstructured.Unstructured
	Now     time.Time
	// Safety is what the safety gates shared with the NodeHealthCheck decide from (safety.go).
	Safety safetyInput
}

// createRequest asks for a remediation request from a step's template.
type createRequest struct {
	Step step
	// Name is the request's name: the Machine's, or a later step's own (template.RequestName).
	Name string
	// First is true for the first request of a remediation (not an escalation nor a re-creation).
	First bool
}

// targetPlan is what to do about one Machine.
type targetPlan struct {
	Machine *clusterv1.Machine
	Verdict verdict
	Blocked blocker
	// SkipMessage explains a Blocked set by a safety gate (safety.go), for status and the event.
	SkipMessage string
	// Lease takes, renews or takes over the Machine's node lease for the check (before Create).
	Lease *leaseAction
	// NewlyUnhealthy: the Machine was not in status.unhealthyMachines before.
	NewlyUnhealthy bool
	// Conditions is the Machine's new status.conditions when they change; nil when they do not.
	Conditions []metav1.Condition
	// MarkedForOwner: OwnerRemediated becomes False, asking the owner to replace the Machine (once its
	// Node's lease is taken: see keepFromOwner).
	MarkedForOwner bool
	// Create asks for a remediation request.
	Create *createRequest
	// TimeOut are requests to mark timed out (their step ended); Delete are requests to delete.
	TimeOut []*unstructured.Unstructured
	Delete  []*unstructured.Unstructured
	// Exhausted: the last remediation step just ended without the Machine recovering.
	Exhausted bool
	// HandOverCheck is when a wait for an ended step's request to be finished with the host runs out,
	// HandOverUntil when the next step starts at the latest (zero: nothing is waited for).
	HandOverCheck, HandOverUntil time.Time
	// Overdue are ended steps' requests that did not hand the host over within template.HandOverBound:
	// Create starts the next step without them.
	Overdue []*unstructured.Unstructured
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
	// Orphans are requests to delete because their Machine is gone (deleted by a remediation's
	// escalation, by its owner, or by anyone): nothing else would delete them while the check exists.
	Orphans []*unstructured.Unstructured
	// NextCheck is the earliest instant at which a decision can change by the passage of time alone.
	NextCheck time.Time
	Events    []checkEvent
	// Release are the Nodes whose lease the check holds and no longer needs.
	Release []string
	// Backoff is the repeat-remediation back-off's memory (see backoff.go).
	Backoff *backoff.Memory
}

// planChecks is the MachineHealthCheck's decision, a pure function of what was observed and now: which
// Machines are targets, which are unhealthy, whether the budget allows remediation, and for each Machine
// what to write. One Machine's state never stops the decisions about another.
func planChecks(in planInput) (plan, error) {
	mhc, now := in.Check, in.Now
	prev := make(map[string]*v1alpha1.UnhealthyMachine, len(mhc.Status.UnhealthyMachines))
	for i := range mhc.Status.UnhealthyMachines {
		prev[mhc.Status.UnhealthyMachines[i].Name] = &mhc.Status.UnhealthyMachines[i]
	}

	p := plan{Backoff: backoff.NewMemory(backoff.PolicyOf(mhc.Spec.RemediationBackoff), mhc.Status.RecentRemediations, now)}
	var observed []observedTarget
	healthy := 0
	for _, o := range in.Machines {
		if skipped, _ := skipRemediation(o.Machine); skipped {
			continue
		}
		observed = append(observed, o)
		v := checkTarget(in.Spec, targetInput{Machine: o.Machine, Node: o.Node, NodeMissing: o.NodeMissing, Cluster: in.Cluster}, now)
		p.NextCheck = earliest(p.NextCheck, v.NextCheck)
		switch v.State {
		case stateHealthy:
			healthy++
		case stateUnhealthy:
			p.Unhealthy++
		}
		p.Targets = append(p.Targets, targetPlan{Machine: o.Machine, Verdict: v})
	}

	decision, err := budget.Evaluate(budget.Policy{MaxUnhealthy: mhc.Spec.MaxUnhealthy, UnhealthyRange: mhc.Spec.UnhealthyRange},
		len(p.Targets), p.Unhealthy)
	if err != nil {
		return plan{}, &InvalidSpecError{Field: "maxUnhealthy/unhealthyRange", Reason: err.Error()}
	}
	p.Decision = decision
	if in.Paused == "" {
		p.Orphans = in.Orphans
	}

	storm := planStorm(&p, mhc, decision, now)
	gate := newSafety(in)

	status := v1alpha1.MachineHealthCheckStatus{
		ExpectedMachines:    ptr.To(int32(len(p.Targets))),
		CurrentHealthy:      ptr.To(int32(healthy)),
		RemediationsAllowed: ptr.To(decision.RemediationsAllowed),
		ObservedGeneration:  mhc.Generation,
		Conditions:          slices.Clone(mhc.Status.Conditions),
	}
	for i := range p.Targets {
		t := &p.Targets[i]
		o := observed[i]
		status.Targets = append(status.Targets, t.Machine.Name)
		prevEntry := prev[t.Machine.Name]
		records := mergeRecords(prevEntry, o.Requests)
		t.Blocked = blockerFor(o, in.Paused, decision.Allowed)
		if t.Blocked == notBlocked && storm.Active() {
			t.Blocked = blockedStormCooldown
		}
		switch t.Verdict.State {
		case stateUnhealthy:
			t.NewlyUnhealthy = prevEntry == nil
			entry := v1alpha1.UnhealthyMachine{Name: t.Machine.Name, Reason: t.Verdict.Reason, Remediations: records}
			if len(in.Steps) == 0 && t.Blocked == notBlocked && !remediating(o) {
				// Condition-based: the gates apply before the owner is asked to replace the Machine.
				p.NextCheck = earliest(p.NextCheck, applyGate(gate, t, &entry, o, now))
			}
			planUnhealthy(t, in.Steps, &entry, o.Requests, now)
			p.backingOff(mhc, t, &entry)
			if len(in.Steps) > 0 && t.Create != nil {
				p.NextCheck = earliest(p.NextCheck, gateCreate(gate, t, &entry, o, len(records), now))
			}
			if t.Create == nil {
				p.NextCheck = earliest(p.NextCheck, gate.keepLease(t, o, now))
			}
			p.Events = append(p.Events, skipEvents(mhc, t, &entry, prevEntry)...)
			p.NextCheck = earliest(p.NextCheck, nextEscalation(in.Steps, entry.Remediations, t.Blocked))
			p.NextCheck = earliest(p.NextCheck, t.HandOverCheck)
			p.Events = append(p.Events, handOverEvents(mhc, t, &entry, prevEntry)...)
			status.UnhealthyMachines = append(status.UnhealthyMachines, entry)
			if t.NewlyUnhealthy && t.Blocked == blockedNotControlled {
				p.Events = append(p.Events, checkEvent{Regarding: t.Machine, Related: mhc, Type: corev1.EventTypeWarning,
					Reason: EventMachineNotRemediable,
					Note:   fmt.Sprintf("Machine is unhealthy (%s) but is not controlled by a MachineSet or a control plane: it is reported, not remediated", t.Verdict.Reason)})
			}
		case stateHealthy:
			planHealthy(t, o.Requests, now)
			if entry, until := holdHealthy(t, prevEntry, records, mhc.Spec.HealthyDelay, now); entry != nil {
				status.UnhealthyMachines = append(status.UnhealthyMachines, *entry)
				p.NextCheck = earliest(p.NextCheck, until)
				p.NextCheck = earliest(p.NextCheck, gate.keepLease(t, o, now))
			}
		case statePending:
			// Not judged yet: keep what was started (its escalation memory) and touch nothing.
			if prevEntry != nil && len(records) > 0 {
				status.UnhealthyMachines = append(status.UnhealthyMachines, v1alpha1.UnhealthyMachine{
					Name: t.Machine.Name, Reason: prevEntry.Reason, Remediations: records})
				p.NextCheck = earliest(p.NextCheck, gate.keepLease(t, o, now))
			}
		}
	}
	slices.Sort(status.Targets)
	slices.SortFunc(status.UnhealthyMachines, func(a, b v1alpha1.UnhealthyMachine) int { return strings.Compare(a.Name, b.Name) })

	p.Events = append(p.Events, setCheckConditions(&status, mhc, in.Paused, decision, p.Unhealthy, now)...)
	meta.SetStatusCondition(&status.Conditions, storm.Condition(mhc.Generation, now))
	if in.Paused == "" {
		p.Release = gate.releaseLeases(&p)
	}
	p.Status = status
	return p, nil
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

// planUnhealthy decides what to do about an unhealthy Machine. entry.Remediations is updated with the
// requests created or timed out.
func planUnhealthy(t *targetPlan, steps []step, entry *v1alpha1.UnhealthyMachine, requests []*unstructured.Unstructured, now time.Time) {
	switch t.Blocked {
	case blockedPaused, blockedDeleting, blockedNotControlled:
		// Left alone: paused means hands off, a deleting Machine is already going, and nothing would
		// replace a Machine without a controller.
		return
	}
	conds, changed := withCondition(t.Machine.Status.Conditions, metav1.Condition{
		Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionFalse,
		Reason: t.Verdict.Reason, Message: t.Verdict.Message, LastTransitionTime: metav1.NewTime(now)})
	if t.Blocked != notBlocked {
		// Reported on the Machine, not remediated (short-circuited or excluded).
		if changed {
			t.Conditions = conds
		}
		return
	}
	if len(steps) == 0 {
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
		if changed {
			t.Conditions = conds
		}
		return
	}
	if changed {
		t.Conditions = conds
	}
	esc := escalate(steps, t.Machine.Name, entry.Remediations, requests, now)
	entry.Remediations, entry.WaitingFor = esc.Records, esc.WaitingFor
	t.Create, t.TimeOut, t.Delete, t.Exhausted = esc.Create, esc.TimeOut, esc.Delete, esc.Exhausted
	t.HandOverCheck, t.HandOverUntil, t.Overdue = esc.WaitCheck, esc.WaitUntil, esc.Overdue
}

// handOverEvents are the events of a Machine's wait for an ended step's request to hand the host over:
// once when the wait for a request begins, and a warning for each request that did not hand over within
// the bound when the next step starts without it.
func handOverEvents(mhc *v1alpha1.MachineHealthCheck, t *targetPlan, entry, prev *v1alpha1.UnhealthyMachine) []checkEvent {
	var out []checkEvent
	if entry.WaitingFor != "" && (prev == nil || prev.WaitingFor != entry.WaitingFor) {
		out = append(out, checkEvent{Regarding: t.Machine, Related: mhc, Type: corev1.EventTypeNormal,
			Reason: EventWaitingForHandOver, Note: fmt.Sprintf("The next escalation step waits until %s is finished "+
				"with the host (deleted, or Processing=False); it starts at %s at the latest",
				entry.WaitingFor, t.HandOverUntil.UTC().Format(time.RFC3339))})
	}
	if t.Create == nil {
		return out
	}
	for _, r := range t.Overdue {
		out = append(out, checkEvent{Regarding: t.Machine, Related: mhc, Type: corev1.EventTypeWarning,
			Reason: EventHandOverTimedOut, Note: fmt.Sprintf("%s did not report that it is finished with the host "+
				"(Processing=False) within %s of its timed-out mark: starting %s %s anyway",
				requestRef(r), template.HandOverBound, t.Create.Step.GVK.Kind, t.Create.Name)})
	}
	return out
}

// planHealthy decides what to do about a healthy Machine: report it, and withdraw its remediation
// requests.
func planHealthy(t *targetPlan, requests []*unstructured.Unstructured, now time.Time) {
	if t.Blocked == blockedPaused {
		return
	}
	for _, r := range requests {
		if r.GetDeletionTimestamp() == nil {
			t.Delete = append(t.Delete, r)
		}
	}
	if t.Blocked == blockedDeleting || t.Blocked == blockedNotControlled {
		return
	}
	if conds, changed := withCondition(t.Machine.Status.Conditions, metav1.Condition{
		Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionTrue,
		Reason: clusterv1.MachineHealthCheckSucceededReason, LastTransitionTime: metav1.NewTime(now)}); changed {
		t.Conditions = conds
	}
}

// escalation is what escalate decides for one Machine.
type escalation struct {
	Records   []v1alpha1.MachineRemediationRequest
	Create    *createRequest
	TimeOut   []*unstructured.Unstructured
	Delete    []*unstructured.Unstructured
	Exhausted bool
	// WaitingFor names ("Kind namespace/name") the ended step's request the next step waits for;
	// WaitCheck is the earliest instant a wait for such a request runs out, WaitUntil the latest (when the
	// next step starts at the latest).
	WaitingFor string
	WaitCheck  time.Time
	WaitUntil  time.Time
	// Overdue are ended steps' requests the next step no longer waits for: the bound ran out.
	Overdue []*unstructured.Unstructured
}

// escalate walks the remediation steps for the unhealthy Machine named machine. records are the requests
// created so far (oldest first), requests the ones that exist. The current step is the last record; it
// ends when its timeout passes or its request reports Succeeded=False, and the next step without a record
// starts once the ended steps' requests are finished with the host (waitForHandOver): one hand per host.
// A later step whose request would have the same name as an earlier one's (same kind) gets a name of its
// own (template.RequestName); the earlier request is not deleted, it may still hold the host.
func escalate(steps []step, machine string, records []v1alpha1.MachineRemediationRequest, requests []*unstructured.Unstructured,
	now time.Time) escalation {
	out := escalation{Records: slices.Clone(records)}
	ended := false
	if n := len(out.Records); n > 0 && out.Records[n-1].TimedOut == nil {
		rec := &out.Records[n-1]
		i := slices.IndexFunc(steps, func(s step) bool { return s.matches(*rec) })
		req := findRequest(requests, *rec)
		timedOut := i < 0 // its step was removed from the spec: give up on it
		if i >= 0 && steps[i].Timeout > 0 && !now.Before(rec.Started.Add(steps[i].Timeout)) {
			timedOut = true
		}
		if req != nil && requestFailed(req) {
			timedOut = true
		}
		switch {
		case timedOut:
			rec.TimedOut = ptr.To(metav1.NewTime(now))
			if req != nil && req.GetDeletionTimestamp() == nil {
				out.TimeOut = append(out.TimeOut, req)
			}
			ended = true
		case req == nil:
			// Gone (deleted by someone else) or not in the cache yet: ask again; AlreadyExists is fine.
			out.Create = &createRequest{Step: steps[i], Name: requestName(steps, i, machine)}
			return out
		default:
			return out // in progress; a deleting request is waited for
		}
	}
	next := slices.IndexFunc(steps, func(s step) bool {
		return !slices.ContainsFunc(out.Records, func(r v1alpha1.MachineRemediationRequest) bool { return s.matches(r) })
	})
	if next < 0 {
		out.Exhausted = ended
		return out
	}
	if out.waitForHandOver(requests, now) {
		return out
	}
	name := requestName(steps, next, machine)
	for _, r := range requests {
		if r.GroupVersionKind().GroupKind() == steps[next].GVK.GroupKind() && r.GetName() == name {
			// Only a spec change leads here (a later step's name depends on the steps before it): an ended
			// step's request holds the name the next step wants. It is finished with the host (above), so
			// it goes first, and the next step starts once it is gone (its deletion brings the check back).
			if r.GetDeletionTimestamp() == nil {
				out.Delete = append(out.Delete, r)
			}
			out.Overdue = nil
			return out
		}
	}
	out.Create = &createRequest{Step: steps[next], Name: name, First: len(out.Records) == 0}
	out.Records = append(out.Records, v1alpha1.MachineRemediationRequest{
		APIVersion: steps[next].GVK.GroupVersion().String(), Kind: steps[next].GVK.Kind,
		TemplateName: steps[next].Template.Name, Started: metav1.NewTime(now)})
	return out
}

// waitForHandOver holds the next step back while the request of an ended step is still acting on the
// host: it is finished with the host once it is gone, reports Processing=False, or has no Processing
// condition at all; one that does neither is waited for template.HandOverBound after its timed-out mark,
// then reported overdue. It reports whether the next step waits.
func (out *escalation) waitForHandOver(requests []*unstructured.Unstructured, now time.Time) bool {
	for _, r := range requests {
		markedAt, ended := endedAt(out.Records, r)
		if !ended {
			continue
		}
		switch state, deadline := template.HandOver(template.ProcessingStatus(r), markedAt, now); state {
		case template.Holding:
			if out.WaitingFor == "" {
				out.WaitingFor = requestRef(r)
			}
			out.WaitCheck = earliest(out.WaitCheck, deadline)
			if deadline.After(out.WaitUntil) {
				out.WaitUntil = deadline
			}
		case template.Overdue:
			out.Overdue = append(out.Overdue, r)
		}
	}
	if out.WaitingFor == "" {
		return false
	}
	out.Overdue = nil
	return true
}

// endedAt tells whether request r has ended (its step timed out or failed: its record says so, or it
// carries the timed-out mark) and when: the record's time, else the mark's, else the request's creation
// (a malformed mark: the wait for it is bounded all the same).
func endedAt(records []v1alpha1.MachineRemediationRequest, r *unstructured.Unstructured) (time.Time, bool) {
	for _, rec := range records {
		if rec.TimedOut != nil && findRequest([]*unstructured.Unstructured{r}, rec) != nil {
			return rec.TimedOut.Time, true
		}
	}
	at, timedOut, _ := template.TimedOut(r)
	switch {
	case !timedOut:
		return time.Time{}, false
	case at.IsZero():
		return r.GetCreationTimestamp().Time, true
	}
	return at, true
}

// requestName is the name of the request step i creates for machine (template.RequestName).
func requestName(steps []step, i int, machine string) string {
	keys := make([]template.StepKey, len(steps))
	for j, s := range steps {
		keys[j] = template.StepKey{Kind: s.GVK.GroupKind(), Namespace: s.Template.Namespace, Template: s.Template.Name}
	}
	return template.RequestName(machine, keys, i)
}

// requestRef names a request as "Kind namespace/name".
func requestRef(r *unstructured.Unstructured) string {
	return r.GetKind() + " " + r.GetNamespace() + "/" + r.GetName()
}

// nextEscalation is when the current step of an unhealthy Machine times out; zero if never or if the
// Machine is not being remediated.
func nextEscalation(steps []step, records []v1alpha1.MachineRemediationRequest, b blocker) time.Time {
	n := len(records)
	if b != notBlocked || n == 0 || records[n-1].TimedOut != nil {
		return time.Time{}
	}
	i := slices.IndexFunc(steps, func(s step) bool { return s.matches(records[n-1]) })
	if i < 0 || steps[i].Timeout <= 0 {
		return time.Time{}
	}
	return records[n-1].Started.Add(steps[i].Timeout)
}

// mergeRecords returns the Machine's remediation records: those in status, completed with the requests
// that exist but are not recorded (status lost, e.g. a conflict after the create), oldest first.
func mergeRecords(prev *v1alpha1.UnhealthyMachine, requests []*unstructured.Unstructured) []v1alpha1.MachineRemediationRequest {
	var out []v1alpha1.MachineRemediationRequest
	if prev != nil {
		out = slices.Clone(prev.Remediations)
		for i := range out {
			out[i] = *out[i].DeepCopy()
		}
	}
	sorted := slices.Clone(requests)
	slices.SortFunc(sorted, func(a, b *unstructured.Unstructured) int {
		return a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time)
	})
	for _, r := range sorted {
		rec := recordOf(r)
		i := slices.IndexFunc(out, func(o v1alpha1.MachineRemediationRequest) bool {
			return o.APIVersion == rec.APIVersion && o.Kind == rec.Kind && o.TemplateName == rec.TemplateName
		})
		if i < 0 {
			out = append(out, rec)
			continue
		}
		if out[i].TimedOut == nil && rec.TimedOut != nil {
			out[i].TimedOut = rec.TimedOut
		}
	}
	return out
}

// recordOf describes an existing request as a status record.
func recordOf(r *unstructured.Unstructured) v1alpha1.MachineRemediationRequest {
	rec := v1alpha1.MachineRemediationRequest{
		APIVersion: r.GetAPIVersion(), Kind: r.GetKind(),
		TemplateName: r.GetAnnotations()[template.AnnotationTemplateName],
		Started:      r.GetCreationTimestamp(),
	}
	if at, timedOut, _ := template.TimedOut(r); timedOut {
		if at.IsZero() {
			at = r.GetCreationTimestamp().Time
		}
		rec.TimedOut = ptr.To(metav1.NewTime(at))
	}
	return rec
}

// findRequest returns the existing request a record describes, or nil.
func findRequest(requests []*unstructured.Unstructured, rec v1alpha1.MachineRemediationRequest) *unstructured.Unstructured {
	for _, r := range requests {
		if r.GetAPIVersion() == rec.APIVersion && r.GetKind() == rec.Kind {
			if name, ok := r.GetAnnotations()[template.AnnotationTemplateName]; !ok || name == rec.TemplateName {
				return r
			}
		}
	}
	return nil
}

// requestFailed reports whether the remediator gave up on a request (Succeeded=False).
func requestFailed(r *unstructured.Unstructured) bool {
	c, err := template.FindCondition(r, template.ConditionSucceeded)
	return err == nil && c != nil && c.Status == metav1.ConditionFalse
}

// setCheckConditions sets the check's RemediationAllowed and Paused conditions and returns the events
// their transitions call for.
func setCheckConditions(status *v1alpha1.MachineHealthCheckStatus, mhc *v1alpha1.MachineHealthCheck, paused string,
	d budget.Decision, unhealthy int, now time.Time) []checkEvent {
	var events []checkEvent
	wasRestricted := meta.IsStatusConditionFalse(mhc.Status.Conditions, v1alpha1.ConditionRemediationAllowed) && len(mhc.Status.UnhealthyMachines) > 0
	if d.Allowed {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionRemediationAllowed,
			Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonWithinBudget, Message: d.Message,
			ObservedGeneration: mhc.Generation, LastTransitionTime: metav1.NewTime(now)})
	} else {
		msg := "Remediation is not allowed: " + d.Message
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionRemediationAllowed,
			Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonTooManyUnhealthy, Message: msg,
			ObservedGeneration: mhc.Generation, LastTransitionTime: metav1.NewTime(now)})
		if unhealthy > 0 && !wasRestricted {
			events = append(events, checkEvent{Regarding: mhc, Type: corev1.EventTypeWarning, Reason: EventRemediationRestricted, Note: msg})
		}
	}
	if paused != "" {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPaused,
			Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPauseRequested, Message: paused,
			ObservedGeneration: mhc.Generation, LastTransitionTime: metav1.NewTime(now)})
	} else {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPaused,
			Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAsExpected,
			ObservedGeneration: mhc.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	return events
}

// withCondition returns conds with c set (the transition time kept when the status does not change),
// and whether anything changed. conds is not modified.
func withCondition(conds []metav1.Condition, c metav1.Condition) ([]metav1.Condition, bool) {
	out := slices.Clone(conds)
	changed := meta.SetStatusCondition(&out, c)
	return out, changed
}

// earliest returns the earlier of two instants, ignoring zero ones.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
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
