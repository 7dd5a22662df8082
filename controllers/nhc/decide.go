package nhc

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/budget"
	"github.com/metalheal/metalheal/internal/conditions"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
)

// Per-node skip reasons: status.unhealthyNodes[].skipReason and the reason label of
// metalheal_remediations_skipped_total.
const (
	SkipExcluded          = engine.SkipExcluded
	SkipOwnedByOtherCheck = engine.SkipOwnedByOtherCheck
	SkipControlPlaneBusy  = gates.SkipControlPlaneBusy
	SkipLeaseHeldByOther  = gates.SkipLeaseHeldByOther
	SkipRemediationExists = engine.SkipRemediationExists
)

// Check-wide skip reasons, for the skipped metric only (the conditions say so in status).
const (
	SkipShortCircuit = "ShortCircuit"
	SkipPaused       = "Paused"
	SkipDisabled     = "Disabled"
)

// Disabled condition reasons besides the API's TemplateNotFound and TemplateInvalid.
const (
	// ReasonInvalidBudget: maxUnhealthy or minHealthy cannot be used.
	ReasonInvalidBudget = v1alpha1.ReasonInvalidBudget
	// ReasonInvalidSelector: the selector cannot be parsed.
	ReasonInvalidSelector = v1alpha1.ReasonInvalidSelector
)

// defaultMaxUnhealthy applies when neither maxUnhealthy nor minHealthy is set (the API's documented default).
var defaultMaxUnhealthy = intstr.FromString("49%")

// defaultCriteria apply when unhealthyConditions is empty (the API defaults it; this guards old objects).
var defaultCriteria = []conditions.Criterion{
	{Type: string(corev1.NodeReady), Status: string(corev1.ConditionFalse), Duration: 300 * time.Second},
	{Type: string(corev1.NodeReady), Status: string(corev1.ConditionUnknown), Duration: 300 * time.Second},
}

// plan is what decide wants done, and the status it leads to.
type plan struct {
	// Outcomes are the engine's decisions about the Nodes (engine.Pass; a Node gone: the deletion of its
	// requests), which execute writes: the requests to create, mark timed out and delete, and the leases
	// kept while a remediation lives.
	Outcomes []*engine.Outcome
	// Release are Nodes whose lease we hold but no longer need.
	Release []string
	// Unconfirm are Nodes whose remediation is over and whose confirmation annotation
	// (v1alpha1.AnnotationConfirmedHealthy) is removed once their requests are deleted (execute), so that
	// it confirms only that remediation.
	Unconfirm []string
	// Events to emit.
	Events []event
	// Skipped are the reasons of new decisions not to remediate, for the skipped counter.
	Skipped []string
	// Next is when to look again (zero: nothing pending).
	Next time.Time

	// Observed, Unhealthy count the selected Nodes and the unhealthy ones among them. Failing counts the
	// selected Nodes failing an unhealthy condition now, whether or not it has held for its duration yet:
	// the budget counts them (see evaluateNodes).
	Observed, Unhealthy, Failing int
	// Entries are status.unhealthyNodes by Node name; execute adds what it creates.
	Entries map[string]*v1alpha1.UnhealthyNode
	// Conditions are the status conditions.
	Conditions []metav1.Condition
	// Disabled, Paused and Hold (a storm message) explain the phase.
	Disabled *cause
	Paused   []string
	Hold     string
	// Backoff is the repeat-remediation back-off's memory (see backoff.go), Holds the holds this decision
	// began.
	Backoff *backoff.Memory
	Holds   int
}

// at makes sure the plan looks again no later than t.
func (p *plan) at(t time.Time) {
	if !t.IsZero() && (p.Next.IsZero() || t.Before(p.Next)) {
		p.Next = t
	}
}

// decider holds the state of one decide call.
type decider struct {
	in   observed
	now  time.Time
	p    *plan
	old  map[string]*v1alpha1.UnhealthyNode
	work map[string]*nodeWork
	hold bool
	pass *engine.Pass
	// outs are the unhealthy Nodes' outcomes, in order of name.
	outs    []*engine.Outcome
	creates map[string]bool
}

// nodeWork is a Node decide has to think about: unhealthy, or remediated by the check.
type nodeWork struct {
	node     *corev1.Node // nil: the Node is gone
	res      conditions.Result
	selected bool
}

// decide is the NodeHealthCheck's whole decision: from what the cache shows and now, which remediation
// requests to create, time out and delete, which leases to take and release, the status and the events,
// and when to look again. It performs no I/O.
func decide(in observed, now time.Time) plan {
	p := &plan{Entries: map[string]*v1alpha1.UnhealthyNode{}, Disabled: in.Disabled, Paused: in.Check.Spec.PauseRequests}
	d := &decider{in: in, now: now, p: p, old: map[string]*v1alpha1.UnhealthyNode{}, work: map[string]*nodeWork{},
		creates: map[string]bool{}}
	d.pass = &engine.Pass{Steps: in.Steps, Now: now, Holder: in.Holder, Leases: in.Leases, LeaseDuration: in.LeaseDuration,
		Gate: engine.Gate{Admission: gates.NewAdmission(in.Holder, in.Leases, in.BusyControlPlane, now), DryRun: in.Check.Spec.DryRun}}
	for i := range in.Check.Status.UnhealthyNodes {
		u := &in.Check.Status.UnhealthyNodes[i]
		d.old[u.Name] = u
	}

	p.Backoff = backoff.NewMemory(backoff.PolicyOf(in.Check.Spec.RemediationBackoff), in.Check.Status.RecentRemediations, now)
	d.pass.Gate.Backoff = p.Backoff
	d.evaluateNodes()
	d.checkWide()

	names := make([]string, 0, len(d.work))
	for name := range d.work {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		d.decideNode(name)
	}
	d.admit()
	d.releaseLeases()
	p.Holds = d.pass.Holds
	return *p
}

// evaluateNodes matches every selected Node's conditions, counts the unhealthy ones, and keeps the Nodes
// that need a decision (unhealthy, or remediated by the check) in d.work. Healthy Nodes only contribute
// the next instant one of their conditions may expire.
func (d *decider) evaluateNodes() {
	criteria := criteriaOf(d.in.Check.Spec.UnhealthyConditions)
	for _, n := range d.in.Nodes {
		res := evaluate(n, criteria, d.now)
		d.p.at(res.NextCheck)
		if res.Unhealthy {
			d.p.Unhealthy++
		}
		// A Node counts against the budget from the moment one of its unhealthy conditions matches, before
		// the condition has held for its duration, as in Cluster API (a target "likely to go unhealthy" is
		// not healthy). Nodes that fail together are noticed a few seconds apart (heartbeat jitter, the
		// node lifecycle controller's period): counting only expired conditions would remediate the first
		// few within the budget before the others make it a storm.
		if res.Unhealthy || !res.NextCheck.IsZero() {
			d.p.Failing++
		}
		if res.Unhealthy || d.old[n.Name] != nil || len(d.in.Ours[n.Name]) > 0 {
			d.work[n.Name] = &nodeWork{node: n, res: res, selected: true}
		}
	}
	d.p.Observed = len(d.in.Nodes)
	for name, n := range d.in.Tracked {
		if d.work[name] != nil {
			continue
		}
		w := &nodeWork{node: n}
		if n != nil {
			w.res = evaluate(n, criteria, d.now)
			d.p.at(w.res.NextCheck)
		}
		d.work[name] = w
	}
	// Anything else we remember or own without a Node is gone.
	for name := range d.old {
		if d.work[name] == nil {
			d.work[name] = &nodeWork{}
		}
	}
	for name := range d.in.Ours {
		if d.work[name] == nil {
			d.work[name] = &nodeWork{}
		}
	}
}

// evaluate matches a Node's conditions. Most Nodes of a large pool match no criterion at all (Ready=True
// against Ready=False/Unknown): they are answered without converting their conditions.
func evaluate(n *corev1.Node, criteria []conditions.Criterion, now time.Time) conditions.Result {
	for _, c := range n.Status.Conditions {
		for _, crit := range criteria {
			if string(c.Type) == crit.Type && string(c.Status) == crit.Status {
				return conditions.Evaluate(conditions.NodeConditions(n.Status.Conditions), criteria, now)
			}
		}
	}
	return conditions.Result{}
}

// checkWide sets the conditions (Disabled, Paused, RemediationAllowed, StormActive) and the events of
// their transitions (engine.DecideCheckWide), and whether new remediations are held back for every Node.
func (d *decider) checkWide() {
	check, p := d.in.Check, d.p
	dec, err := budget.Evaluate(policyOf(check.Spec), len(d.in.Nodes), p.Failing)
	cw := engine.DecideCheckWide(engine.CheckWideInput{Conditions: check.Status.Conditions, Generation: check.Generation,
		Paused: p.Paused, Budget: dec, BudgetErr: err, Cooldown: engine.DurationOf(check.Spec.StormCooldownDuration),
		Disabled: p.Disabled, Works: "the remediation templates are usable", Now: d.now})
	for _, ev := range cw.Events {
		if skip, ok := checkSkips[ev.Reason]; ok {
			p.Skipped = append(p.Skipped, skip)
		}
		p.Events = append(p.Events, nodeEvent("", "", ev))
	}
	p.at(cw.Storm.Until)
	if cw.Storm.Active() {
		p.Hold = cw.Storm.Message
	}
	p.Conditions, p.Disabled = cw.Conditions, cw.Disabled
	d.hold = p.Disabled != nil || len(p.Paused) > 0 || cw.Storm.Active()
}

// checkSkips are the check-wide events that begin holding every Node back, and their skipped metric's
// reason.
var checkSkips = map[string]string{engine.EventDisabled: SkipDisabled, engine.EventPaused: SkipPaused,
	engine.EventRemediationShortCircuited: SkipShortCircuit}

// decideNode decides for one Node that is unhealthy, gone, or remediated by the check.
func (d *decider) decideNode(name string) {
	w, prev, ours := d.work[name], d.old[name], d.in.Ours[name]
	e := &v1alpha1.UnhealthyNode{Name: name}
	if prev != nil {
		e.RemediationProgress = prev.RemediationProgress
	}
	if d.in.Unread[name] && prev != nil {
		d.unread(w, e)
		return
	}
	switch {
	case w.node == nil:
		d.nodeGone(e, ours)
	case !w.res.Unhealthy:
		d.nodeHealthy(w.node, e, ours)
	default:
		d.nodeUnhealthy(w, e, ours)
	}
}

// unread keeps a Node whose requests cannot be read (observed.Unread) as its status says: its entry, and
// its lease renewed, as for requests the check sees. It decides nothing else for it until it can read them.
func (d *decider) unread(w *nodeWork, e *v1alpha1.UnhealthyNode) {
	d.p.Entries[e.Name] = e
	if w.node == nil {
		return
	}
	if o := d.pass.KeepLease(engine.Target{Name: e.Name, Node: w.node, NodeName: e.Name}); o.Lease {
		d.p.Outcomes = append(d.p.Outcomes, o)
	}
	d.p.at(d.pass.Next)
}

// nodeGone deletes the requests of a Node that no longer exists (the garbage collector would too, through
// the owner reference, but only where one runs) and forgets the Node once they are gone.
func (d *decider) nodeGone(e *v1alpha1.UnhealthyNode, ours []remediationObject) {
	if len(ours) == 0 {
		return
	}
	// Its requests, whose deletion the entry reports; no skip or wait of the Node's any more.
	e.RemediationProgress = v1alpha1.RemediationProgress{Remediations: engine.Adopted(e.RemediationProgress, ours, d.now),
		ConditionsHealthyTimestamp: e.ConditionsHealthyTimestamp}
	d.p.Entries[e.Name] = e
	o := &engine.Outcome{Target: engine.Target{Name: e.Name, NodeName: e.Name}}
	for _, q := range ours {
		if !q.Deleting {
			o.Delete = append(o.Delete, q.Ref)
		}
	}
	if len(o.Delete) > 0 {
		d.p.Outcomes = append(d.p.Outcomes, o)
		d.p.Events = append(d.p.Events, normal(EventNodeGone, actionDelete, "",
			fmt.Sprintf("Node %s no longer exists: deleting its remediation requests", e.Name)))
	}
}

// nodeHealthy decides for a Node healthy again (engine.Pass.Healthy): its requests kept for healthyDelay,
// or until a person confirms it, then deleted.
func (d *decider) nodeHealthy(node *corev1.Node, e *v1alpha1.UnhealthyNode, ours []remediationObject) {
	if len(ours) == 0 {
		if engine.Confirmed(node) && d.old[e.Name] != nil {
			d.p.Unconfirm = append(d.p.Unconfirm, e.Name) // the confirmation was for this remediation
		}
		return // nothing (left) to delete: forget the Node; its lease is released below
	}
	d.p.Entries[e.Name] = e
	var since time.Time
	if e.ConditionsHealthyTimestamp != nil {
		since = e.ConditionsHealthyTimestamp.Time
	}
	o := d.pass.Healthy(engine.Target{Name: e.Name, Subject: "Node " + e.Name, Node: node, NodeName: e.Name, Requests: ours,
		Status: e.RemediationProgress}, since, engine.DurationOf(d.in.Check.Spec.HealthyDelay), engine.Confirmed(node))
	e.RemediationProgress = o.Entry
	d.p.Outcomes = append(d.p.Outcomes, o)
	d.p.at(d.pass.Next)
	if o.Unconfirm {
		d.p.Unconfirm = append(d.p.Unconfirm, e.Name) // removed once its requests are deleted
	}
	for _, ev := range o.Events {
		d.p.Events = append(d.p.Events, nodeEvent(e.Name, "", ev))
	}
}

// nodeUnhealthy decides for an unhealthy Node (engine.Pass.Unhealthy: its lease, its walk, its start).
func (d *decider) nodeUnhealthy(w *nodeWork, e *v1alpha1.UnhealthyNode, ours []remediationObject) {
	node := w.node
	if !w.selected && len(e.Remediations) == 0 && len(ours) == 0 {
		return // no longer selected and never remediated: not ours
	}
	d.p.Entries[e.Name] = e
	t := engine.Target{Name: e.Name, Subject: "Node " + e.Name, Node: node, NodeName: e.Name, Why: why(w.res), ExpiredAt: w.res.ExpiredAt,
		Held: d.hold, Excluded: node.Labels[v1alpha1.LabelExcludeFromRemediation] == "true", Requests: ours,
		Status: e.RemediationProgress}
	if isControlPlane(node) {
		t.CPKey = e.Name
	}
	var o *engine.Outcome
	t.Owner = func() (string, string) {
		if owner, msg := d.ownerOf(w, len(e.Remediations) > 0); owner != "" {
			return SkipOwnedByOtherCheck, msg
		}
		st := d.in.Steps[o.Walk.Create.Step]
		key := emrRef{APIVersion: st.GVK.GroupVersion().String(), Kind: st.GVK.Kind, Namespace: st.Namespace, Name: o.Walk.Create.Name}
		if who, ok := d.in.Foreign[key]; ok && who != "" {
			return SkipRemediationExists, fmt.Sprintf("%s exists, created by %s", key, who)
		} else if ok {
			return SkipRemediationExists, fmt.Sprintf("%s exists and was not created by this check", key)
		}
		return "", ""
	}
	o = d.pass.Unhealthy(t)
	d.outs = append(d.outs, o)
}

// admit puts the Nodes' starts through the gates (engine.Pass.Admit: the control-plane Nodes the check
// remediates are busy), and puts the outcomes in the plan, their skips and events in the Nodes' entries.
func (d *decider) admit() {
	for name, w := range d.work {
		if (len(d.in.Ours[name]) > 0 || d.in.Unread[name]) && w.node != nil && isControlPlane(w.node) {
			d.pass.Gate.Admission.Busy(name)
		}
	}
	d.pass.Admit()
	d.p.at(d.pass.Next)
	for _, o := range d.outs {
		e := d.p.Entries[o.Target.Name]
		e.RemediationProgress = o.Entry
		d.p.Outcomes = append(d.p.Outcomes, o)
		if o.NewSkip {
			d.p.Skipped = append(d.p.Skipped, o.Skip.Reason)
		}
		for _, ev := range o.Events {
			d.p.Events = append(d.p.Events, nodeEvent(e.Name, e.SkipReason, ev))
		}
		if o.Create != nil {
			d.creates[e.Name] = true
		}
	}
}

// releaseLeases releases the leases we hold on Nodes that have no remediation request of ours any more.
func (d *decider) releaseLeases() {
	d.p.Release = gates.Release(d.in.Leases, d.in.Holder, func(name string) bool {
		return len(d.in.Ours[name]) > 0 || d.creates[name] || d.in.Unread[name]
	})
}

// nodeEvent is an event of the engine's about node ("": the check itself), whose skip reason is
// skipReason: a skip's own is the kind's (skipEvents).
func nodeEvent(node, skipReason string, ev engine.Event) event {
	action, ok := eventActions[ev.Reason]
	if !ok {
		action = actionSkip
	}
	reason := cmp.Or(ev.Reason, skipEvents[skipReason])
	if ev.Normal {
		return normal(reason, action, node, ev.Note)
	}
	return warning(reason, action, node, ev.Note)
}

// ownerOf applies the overlapping rule to an unhealthy Node: a check that is already remediating the Node
// keeps it; otherwise the oldest check (creation time, then name) whose selector matches the Node and
// whose conditions find it unhealthy owns it. It returns "" when this check owns the Node, else the
// owner's name and a message.
func (d *decider) ownerOf(w *nodeWork, remediating bool) (string, string) {
	if remediating {
		return "", ""
	}
	self := d.in.Check
	set := labels.Set(w.node.Labels)
	contenders := make([]gates.Contender, 0, len(d.in.Peers))
	for _, p := range d.in.Peers {
		c := gates.Contender{Name: p.Name, Created: p.Created, Remediating: p.InFlight[w.node.Name]}
		c.Claims = p.Selector != nil && p.Selector.Matches(set) && evaluate(w.node, p.Criteria, d.now).Unhealthy
		contenders = append(contenders, c)
	}
	owner := gates.Owner(gates.Contender{Name: self.Name, Created: self.CreationTimestamp.Time, Claims: true}, contenders)
	if owner == "" {
		return "", ""
	}
	return owner, gates.OwnedMessage("NodeHealthCheck", owner, "node")
}

// labelControlPlane is the control-plane role label (internal/gates has the rule).
const labelControlPlane = gates.LabelControlPlane

func isControlPlane(n *corev1.Node) bool { return gates.IsControlPlane(n.Labels) }

// why describes the condition that made a Node unhealthy.
func why(res conditions.Result) string {
	if !res.Unhealthy {
		return "healthy"
	}
	return fmt.Sprintf("%s=%s for %s", res.Matched.Type, res.Matched.Status, res.Matched.Duration)
}

func criteriaOf(in []v1alpha1.NodeUnhealthyCondition) []conditions.Criterion {
	if len(in) == 0 {
		return defaultCriteria
	}
	out := make([]conditions.Criterion, 0, len(in))
	for _, c := range in {
		out = append(out, conditions.Criterion{Type: c.Type, Status: string(c.Status), Duration: c.Duration.Duration})
	}
	return out
}

func policyOf(spec v1alpha1.NodeHealthCheckSpec) budget.Policy {
	if spec.MaxUnhealthy == nil && spec.MinHealthy == nil {
		return budget.Policy{MaxUnhealthy: &defaultMaxUnhealthy}
	}
	return budget.Policy{MaxUnhealthy: spec.MaxUnhealthy, MinHealthy: spec.MinHealthy}
}
