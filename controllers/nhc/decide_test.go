package nhc

import (
	"fmt"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/conditions"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/template"
)

// Unit tests of decide: pure, no API server. The envtest suite drives the same behaviour end to end. The
// rules shared with the MachineHealthCheck are rows of the parity table (parity_test.go,
// internal/engine/enginetest); the tests here hold what it does not compare: messages, event reasons,
// the phase, and the NodeHealthCheck's own rules.

var (
	u0      = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	pcRef   = v1alpha1.TemplateReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediationTemplate", Name: "pool-a", Namespace: "metalheal-system"}
	fenceRf = v1alpha1.TemplateReference{APIVersion: "fence.example.com/v1", Kind: "FenceRemediationTemplate", Name: "fence", Namespace: "ops"}
	pcGVK   = schema.GroupVersionKind{Group: "remediation.metalheal.io", Version: "v1alpha1", Kind: "PowerCycleRemediation"}
	fenceGV = schema.GroupVersionKind{Group: "fence.example.com", Version: "v1", Kind: "FenceRemediation"}
	holder  = "NodeHealthCheck-workers"
	all     = intstr.FromString("100%")
)

func tplFor(ref v1alpha1.TemplateReference) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}}}
	u.SetAPIVersion(ref.APIVersion)
	u.SetKind(ref.Kind)
	u.SetNamespace(ref.Namespace)
	u.SetName(ref.Name)
	return u
}

// stepOf is the step of template ref, its requests of kind gvk, read.
func stepOf(ref v1alpha1.TemplateReference, gvk schema.GroupVersionKind, timeout time.Duration) engine.Step {
	return engine.Step{GVK: gvk, Namespace: ref.Namespace, Template: ref.Name, Timeout: timeout, Object: tplFor(ref)}
}

func singleStep() []engine.Step {
	return []engine.Step{stepOf(pcRef, pcGVK, 0)}
}

func twoSteps() []engine.Step {
	return []engine.Step{stepOf(pcRef, pcGVK, 5*time.Minute), stepOf(fenceRf, fenceGV, 10*time.Minute)}
}

func unitCheck(mods ...func(*v1alpha1.NodeHealthCheck)) *v1alpha1.NodeHealthCheck {
	c := &v1alpha1.NodeHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", UID: "nhc-uid", Generation: 1, CreationTimestamp: metav1.NewTime(u0.Add(-time.Hour))},
		Spec: v1alpha1.NodeHealthCheckSpec{
			UnhealthyConditions: []v1alpha1.NodeUnhealthyCondition{
				{Type: "Ready", Status: "Unknown", Duration: metav1.Duration{Duration: 5 * time.Minute}},
				{Type: "Ready", Status: "False", Duration: metav1.Duration{Duration: 5 * time.Minute}},
			},
			RemediationTemplate: &pcRef,
			MaxUnhealthy:        &all, // most tests look at one node of a small pool; TestDecideBudget sets its own
		},
	}
	for _, m := range mods {
		m(c)
	}
	return c
}

// unitNode is a Node whose Ready condition has had status since the given time.
func unitNode(name string, status corev1.ConditionStatus, since time.Time, lbls ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}}}
	for i := 0; i+1 < len(lbls); i += 2 {
		n.Labels[lbls[i]] = lbls[i+1]
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}
	return n
}

func unitObserved(check *v1alpha1.NodeHealthCheck, nodes ...*corev1.Node) observed {
	return observed{Check: check, Nodes: nodes, Steps: singleStep(), Ours: map[string][]remediationObject{},
		Foreign: map[emrRef]string{}, Leases: map[string]leaseInfo{}, Holder: holder, LeaseDuration: 10 * time.Minute}
}

func pcObj(node string, created time.Time) remediationObject {
	return remediationObject{Ref: emrRef{APIVersion: pcGVK.GroupVersion().String(), Kind: pcGVK.Kind, Namespace: "metalheal-system", Name: node},
		TemplateName: "pool-a", Created: created}
}

func fenceObj(node string, created time.Time) remediationObject {
	return remediationObject{Ref: emrRef{APIVersion: fenceGV.GroupVersion().String(), Kind: fenceGV.Kind, Namespace: "ops", Name: node},
		TemplateName: "fence", Created: created}
}

func pcEntry(started time.Time) v1alpha1.RequestRecord {
	return v1alpha1.RequestRecord{APIVersion: pcGVK.GroupVersion().String(), Kind: pcGVK.Kind, Namespace: "metalheal-system", TemplateName: "pool-a", Started: metav1.NewTime(started)}
}

func created(p plan) []string {
	var out []string
	for _, c := range creates(p) {
		out = append(out, fmt.Sprintf("%s@%d", c.Target.Name, c.Create.Step))
	}
	return out
}

// creates are the plan's outcomes that create a request.
func creates(p plan) []*engine.Outcome {
	var out []*engine.Outcome
	for _, o := range p.Outcomes {
		if o.Create != nil {
			out = append(out, o)
		}
	}
	return out
}

// timeOuts and deletes are the requests the plan marks timed out and deletes.
func timeOuts(p plan) []emrRef {
	var out []emrRef
	for _, o := range p.Outcomes {
		out = append(out, o.Walk.TimeOut...)
	}
	return out
}

func deletes(p plan) []emrRef {
	var out []emrRef
	for _, o := range p.Outcomes {
		out = append(out, slices.Concat(o.Walk.Delete, o.Delete)...)
	}
	return out
}

// renewal is a lease the plan writes: renewed, retaken, or taken over From the remediators of the Node's
// requests.
type renewal struct {
	Node *corev1.Node
	From []string
}

func renewals(p plan) []renewal {
	var out []renewal
	for _, o := range p.Outcomes {
		if o.Lease {
			out = append(out, renewal{Node: o.Target.Node, From: o.From})
		}
	}
	return out
}

// nodeOf is the Node of a request the plan times out or deletes.
func nodeOf(p plan, ref emrRef) string {
	for _, o := range p.Outcomes {
		if slices.Contains(slices.Concat(o.Walk.TimeOut, o.Walk.Delete, o.Delete), ref) {
			return o.Target.Name
		}
	}
	return ""
}

func reasons(p plan) []string {
	var out []string
	for _, e := range p.Events {
		out = append(out, e.Reason)
	}
	return out
}

func unhealthyNodes(n int, status corev1.ConditionStatus, since time.Time, prefix string, healthy int) []*corev1.Node {
	var nodes []*corev1.Node
	for i := range n {
		nodes = append(nodes, unitNode(fmt.Sprintf("%s-bad-%02d", prefix, i), status, since))
	}
	for i := range healthy {
		nodes = append(nodes, unitNode(fmt.Sprintf("%s-ok-%02d", prefix, i), corev1.ConditionTrue, since))
	}
	return nodes
}

func TestDecideDetection(t *testing.T) {
	tests := []struct {
		name        string
		since       time.Time
		now         time.Time
		wantCreates []string
		wantNext    time.Time
	}{
		{name: "condition not yet expired: nothing, look again exactly at expiry", since: u0, now: u0.Add(4*time.Minute + 59*time.Second),
			wantNext: u0.Add(5 * time.Minute)},
		{name: "exactly at expiry: remediate", since: u0, now: u0.Add(5 * time.Minute), wantCreates: []string{"w1@0"}},
		{name: "long expired: remediate", since: u0, now: u0.Add(time.Hour), wantCreates: []string{"w1@0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			in := unitObserved(unitCheck(), unitNode("w1", corev1.ConditionUnknown, tt.since), unitNode("w2", corev1.ConditionTrue, tt.since))
			p := decide(in, tt.now)
			g.Expect(created(p)).To(Equal(tt.wantCreates))
			if !tt.wantNext.IsZero() {
				g.Expect(p.Next).To(Equal(tt.wantNext))
			}
			if len(tt.wantCreates) > 0 {
				g.Expect(creates(p)[0].Target.ExpiredAt).To(Equal(tt.since.Add(5 * time.Minute)))
				g.Expect(creates(p)[0].Target.Why).To(Equal("Ready=Unknown for 5m0s"))
			}
			g.Expect(p.Observed).To(Equal(2))
		})
	}
}

// TestDecideBudget runs the Cluster API book's examples: percentages round down, and remediation stops
// when the unhealthy Nodes exceed the allowed number.
func TestDecideBudget(t *testing.T) {
	pct := intstr.FromString("40%")
	two := intstr.FromInt32(2)
	minH := intstr.FromString("51%")
	tests := []struct {
		name      string
		max, min  *intstr.IntOrString
		total     int
		unhealthy int
		allowed   bool
	}{
		{name: "25 nodes, 40%: 10 unhealthy are remediated", max: &pct, total: 25, unhealthy: 10, allowed: true},
		{name: "25 nodes, 40%: 11 unhealthy stop remediation", max: &pct, total: 25, unhealthy: 11},
		{name: "6 nodes, 40% (2.4 rounds down to 2): 2 unhealthy are remediated", max: &pct, total: 6, unhealthy: 2, allowed: true},
		{name: "6 nodes, 40%: 3 unhealthy stop remediation", max: &pct, total: 6, unhealthy: 3},
		{name: "absolute 2: 2 unhealthy are remediated", max: &two, total: 10, unhealthy: 2, allowed: true},
		{name: "absolute 2: 3 unhealthy stop remediation", max: &two, total: 10, unhealthy: 3},
		{name: "default 49%: 4 of 10 are remediated", total: 10, unhealthy: 4, allowed: true},
		{name: "default 49%: 5 of 10 stop remediation", total: 10, unhealthy: 5},
		{name: "minHealthy 51% of 5 rounds up to 3: 2 unhealthy are remediated", min: &minH, total: 5, unhealthy: 2, allowed: true},
		{name: "minHealthy 51% of 5: 3 unhealthy stop remediation", min: &minH, total: 5, unhealthy: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			check := unitCheck(func(c *v1alpha1.NodeHealthCheck) { c.Spec.MaxUnhealthy, c.Spec.MinHealthy = tt.max, tt.min })
			in := unitObserved(check, unhealthyNodes(tt.unhealthy, corev1.ConditionFalse, u0, "n", tt.total-tt.unhealthy)...)
			p := decide(in, u0.Add(time.Hour))
			allowedCond := meta.FindStatusCondition(p.Conditions, v1alpha1.ConditionRemediationAllowed)
			storm := meta.FindStatusCondition(p.Conditions, v1alpha1.ConditionStormActive)
			if tt.allowed {
				g.Expect(creates(p)).To(HaveLen(tt.unhealthy))
				g.Expect(allowedCond.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(storm.Status).To(Equal(metav1.ConditionFalse))
				return
			}
			g.Expect(creates(p)).To(BeEmpty())
			g.Expect(allowedCond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(allowedCond.Reason).To(Equal(v1alpha1.ReasonTooManyUnhealthy))
			g.Expect(storm.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(reasons(p)).To(ContainElement(EventRemediationShortCircuited))
			g.Expect(p.Skipped).To(ContainElement(SkipShortCircuit))
			st := p.status(check)
			g.Expect(st.UnhealthyNodes).To(BeEmpty(), "a storm does not list every held-back node")
			g.Expect(*st.HealthyNodes).To(Equal(int32(tt.total - tt.unhealthy)))
		})
	}
}

// TestDecideStorm walks a storm: it starts, ends into a cooldown, and remediation resumes after it.
func TestDecideStorm(t *testing.T) {
	g := NewWithT(t)
	pct := intstr.FromString("40%")
	check := unitCheck(func(c *v1alpha1.NodeHealthCheck) {
		c.Spec.MaxUnhealthy = &pct
		c.Spec.StormCooldownDuration = &metav1.Duration{Duration: 2 * time.Minute}
	})
	nodes := unhealthyNodes(3, corev1.ConditionFalse, u0, "s", 3)
	now := u0.Add(time.Hour)

	// 3 of 6 unhealthy, 2 allowed: storm.
	p := decide(unitObserved(check, nodes...), now)
	g.Expect(creates(p)).To(BeEmpty())
	g.Expect(meta.IsStatusConditionTrue(p.Conditions, v1alpha1.ConditionStormActive)).To(BeTrue())
	check.Status = p.status(check)

	// One recovers: the budget is fine again, but the cooldown holds remediation back.
	nodes[0] = unitNode(nodes[0].Name, corev1.ConditionTrue, now)
	now = now.Add(10 * time.Second)
	p = decide(unitObserved(check, nodes...), now)
	g.Expect(creates(p)).To(BeEmpty())
	storm := meta.FindStatusCondition(p.Conditions, v1alpha1.ConditionStormActive)
	g.Expect(storm.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(storm.Reason).To(Equal(v1alpha1.ReasonStormCooldown))
	g.Expect(p.Next).To(Equal(now.Add(2 * time.Minute)))
	g.Expect(reasons(p)).To(ContainElement(EventStormCooldown))
	check.Status = p.status(check)

	// Still cooling down a minute later: no event again, nothing created.
	p = decide(unitObserved(check, nodes...), now.Add(time.Minute))
	g.Expect(creates(p)).To(BeEmpty())
	g.Expect(p.Events).To(BeEmpty())

	// Cooldown over: both remaining unhealthy nodes are remediated.
	p = decide(unitObserved(check, nodes...), now.Add(2*time.Minute))
	g.Expect(created(p)).To(ConsistOf("s-bad-01@0", "s-bad-02@0"))
	g.Expect(meta.IsStatusConditionTrue(p.Conditions, v1alpha1.ConditionStormActive)).To(BeFalse())
	g.Expect(reasons(p)).To(ContainElement(EventStormEnded))
}

// TestDecideStormOfNodesFailingTogether: nodes that fail together are noticed a little apart (the node
// lifecycle controller marks them Unknown as their heartbeats run out). When the first one's condition
// expires, those whose condition matches but has not expired yet count against the budget too: the storm
// is recognised and nothing is remediated, rather than the first few within the budget.
func TestDecideStormOfNodesFailingTogether(t *testing.T) {
	g := NewWithT(t)
	pct := intstr.FromString("49%")
	check := unitCheck(func(c *v1alpha1.NodeHealthCheck) { c.Spec.MaxUnhealthy = &pct })
	first := u0
	nodes := []*corev1.Node{
		unitNode("a", corev1.ConditionUnknown, first),
		unitNode("b", corev1.ConditionUnknown, first.Add(time.Second)),
		unitNode("c", corev1.ConditionUnknown, first.Add(2*time.Second)),
		unitNode("d", corev1.ConditionTrue, first.Add(-time.Hour)),
		unitNode("e", corev1.ConditionTrue, first.Add(-time.Hour)),
	}
	p := decide(unitObserved(check, nodes...), first.Add(5*time.Minute)) // a's condition has just expired
	g.Expect(p.Unhealthy).To(Equal(1))
	g.Expect(creates(p)).To(BeEmpty(), "3 of 5 nodes are failing, at most 2 may be remediated")
	g.Expect(meta.IsStatusConditionTrue(p.Conditions, v1alpha1.ConditionStormActive)).To(BeTrue())
	g.Expect(meta.FindStatusCondition(p.Conditions, v1alpha1.ConditionRemediationAllowed).Message).To(ContainSubstring("3 of 5"))
	g.Expect(*p.status(check).HealthyNodes).To(Equal(int32(2)))

	// One of them recovers before its condition expires: two failing are within the budget.
	nodes[2] = unitNode("c", corev1.ConditionTrue, first.Add(3*time.Second))
	p = decide(unitObserved(check, nodes...), first.Add(5*time.Minute+time.Second))
	g.Expect(created(p)).To(ConsistOf("a@0", "b@0"))
	g.Expect(meta.IsStatusConditionTrue(p.Conditions, v1alpha1.ConditionStormActive)).To(BeFalse())
}

func TestDecideGates(t *testing.T) {
	expired := u0
	now := u0.Add(time.Hour)
	tests := []struct {
		name       string
		node       *corev1.Node
		modCheck   func(*v1alpha1.NodeHealthCheck)
		modIn      func(*observed)
		wantCreate bool
		wantSkip   string
		wantEvent  string
		wantPhase  v1alpha1.NodeHealthCheckPhase
	}{
		{name: "unhealthy node is remediated", node: unitNode("w1", corev1.ConditionFalse, expired), wantCreate: true, wantPhase: v1alpha1.PhaseEnabled},
		{name: "exclude label", node: unitNode("w1", corev1.ConditionFalse, expired, v1alpha1.LabelExcludeFromRemediation, "true"),
			wantSkip: SkipExcluded, wantEvent: EventSkippedExcluded, wantPhase: v1alpha1.PhaseEnabled},
		{name: "pause requests", node: unitNode("w1", corev1.ConditionFalse, expired),
			modCheck:  func(c *v1alpha1.NodeHealthCheck) { c.Spec.PauseRequests = []string{"cluster upgrade"} },
			wantEvent: EventPaused, wantPhase: v1alpha1.PhasePaused},
		{name: "disabled template", node: unitNode("w1", corev1.ConditionFalse, expired),
			modIn:     func(in *observed) { in.Disabled = &cause{Reason: v1alpha1.ReasonTemplateNotFound, Message: "missing"} },
			wantEvent: EventDisabled, wantPhase: v1alpha1.PhaseDisabled},
		{name: "lease held by node maintenance", node: unitNode("w1", corev1.ConditionFalse, expired),
			modIn: func(in *observed) {
				in.Leases["w1"] = leaseInfo{Holder: "node-maintenance", Until: now.Add(time.Minute)}
			},
			wantSkip: SkipLeaseHeldByOther, wantEvent: EventSkippedLeaseHeld, wantPhase: v1alpha1.PhaseEnabled},
		{name: "expired lease of someone else does not hold", node: unitNode("w1", corev1.ConditionFalse, expired),
			modIn: func(in *observed) {
				in.Leases["w1"] = leaseInfo{Holder: "node-maintenance", Until: now.Add(-time.Second)}
			},
			wantCreate: true, wantPhase: v1alpha1.PhaseEnabled},
		{name: "our own lease does not hold", node: unitNode("w1", corev1.ConditionFalse, expired),
			modIn:      func(in *observed) { in.Leases["w1"] = leaseInfo{Holder: holder, Until: now.Add(time.Minute)} },
			wantCreate: true, wantPhase: v1alpha1.PhaseEnabled},
		{name: "a request of the same name made by someone else", node: unitNode("w1", corev1.ConditionFalse, expired),
			modIn: func(in *observed) {
				in.Foreign[emrRef{APIVersion: pcGVK.GroupVersion().String(), Kind: pcGVK.Kind, Namespace: "metalheal-system", Name: "w1"}] = "NodeHealthCheck legacy"
			},
			wantSkip: SkipRemediationExists, wantEvent: EventSkippedRemediationExists, wantPhase: v1alpha1.PhaseEnabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			check := unitCheck()
			if tt.modCheck != nil {
				tt.modCheck(check)
			}
			in := unitObserved(check, tt.node, unitNode("w2", corev1.ConditionTrue, u0), unitNode("w3", corev1.ConditionTrue, u0))
			if tt.modIn != nil {
				tt.modIn(&in)
			}
			p := decide(in, now)
			if tt.wantCreate {
				g.Expect(created(p)).To(Equal([]string{"w1@0"}))
			} else {
				g.Expect(creates(p)).To(BeEmpty())
			}
			st := p.status(check)
			g.Expect(st.Phase).To(Equal(tt.wantPhase))
			if tt.wantSkip != "" {
				g.Expect(st.UnhealthyNodes).To(HaveLen(1))
				g.Expect(st.UnhealthyNodes[0].SkipReason).To(Equal(tt.wantSkip))
				g.Expect(st.UnhealthyNodes[0].SkipMessage).NotTo(BeEmpty())
				g.Expect(p.Skipped).To(Equal([]string{tt.wantSkip}))
			}
			if tt.wantEvent != "" {
				g.Expect(reasons(p)).To(ContainElement(tt.wantEvent))
			}

			// The same decision again is not news: no event, no skip count.
			check.Status = st
			again := decide(in, now)
			g.Expect(again.Events).To(BeEmpty())
			g.Expect(again.Skipped).To(BeEmpty())
		})
	}
}

func TestDecideLeaseHeldRequeuesAtExpiry(t *testing.T) {
	g := NewWithT(t)
	now := u0.Add(time.Hour)
	in := unitObserved(unitCheck(), unitNode("w1", corev1.ConditionFalse, u0))
	in.Leases["w1"] = leaseInfo{Holder: "node-maintenance", Until: now.Add(time.Minute)}
	p := decide(in, now)
	g.Expect(p.Next).To(Equal(now.Add(time.Minute + time.Second)))
	g.Expect(p.Events[0].Message).To(ContainSubstring(`"node-maintenance"`))
}

func TestDecideOverlap(t *testing.T) {
	now := u0.Add(time.Hour)
	sel := labels.SelectorFromSet(labels.Set{"pool": "a"})
	slow := []conditions.Criterion{{Type: "Ready", Status: "False", Duration: 2 * time.Hour}}
	fast := criteriaOf(unitCheck().Spec.UnhealthyConditions)
	tests := []struct {
		name       string
		peer       peer
		wantCreate bool
	}{
		{name: "older check that finds the node unhealthy owns it", peer: peer{Name: "older", Created: u0.Add(-2 * time.Hour), Selector: sel, Criteria: fast}},
		{name: "same age, larger name: we own it", peer: peer{Name: "zzz", Created: u0.Add(-time.Hour), Selector: sel, Criteria: fast}, wantCreate: true},
		{name: "older check that does not find it unhealthy yet: we own it",
			peer: peer{Name: "older", Created: u0.Add(-2 * time.Hour), Selector: sel, Criteria: slow}, wantCreate: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			in := unitObserved(unitCheck(), unitNode("w1", corev1.ConditionFalse, u0, "pool", "a"))
			in.Peers = []peer{tt.peer}
			p := decide(in, now)
			if tt.wantCreate {
				g.Expect(created(p)).To(Equal([]string{"w1@0"}))
				return
			}
			g.Expect(creates(p)).To(BeEmpty())
			e := p.Entries["w1"]
			g.Expect(e.SkipReason).To(Equal(SkipOwnedByOtherCheck))
			g.Expect(e.SkipMessage).To(ContainSubstring("NodeHealthCheck " + tt.peer.Name))
			g.Expect(reasons(p)).To(Equal([]string{EventSkippedOwnedByOtherCheck}))
		})
	}
}

func TestDecideControlPlaneOneAtATime(t *testing.T) {
	now := u0.Add(time.Hour)
	cp := func(name string, since time.Time) *corev1.Node {
		return unitNode(name, corev1.ConditionUnknown, since, labelControlPlane, "")
	}
	t.Run("two unhealthy: the one that expired first goes first", func(t *testing.T) {
		g := NewWithT(t)
		in := unitObserved(unitCheck(), cp("cp-b", u0), cp("cp-a", u0.Add(time.Minute)), unitNode("w1", corev1.ConditionUnknown, u0.Add(time.Minute)))
		p := decide(in, now)
		g.Expect(created(p)).To(ConsistOf("cp-b@0", "w1@0"), "workers are not limited")
		g.Expect(p.Entries["cp-a"].SkipReason).To(Equal(SkipControlPlaneBusy))
		g.Expect(p.Entries["cp-a"].SkipMessage).To(ContainSubstring("cp-b"))
	})
	t.Run("a lease-held candidate does not count as busy", func(t *testing.T) {
		g := NewWithT(t)
		in := unitObserved(unitCheck(), cp("cp-a", u0), cp("cp-b", u0.Add(time.Minute)))
		in.Leases["cp-a"] = leaseInfo{Holder: "NodeHealthCheck-other", Until: now.Add(time.Hour)}
		p := decide(in, now)
		g.Expect(created(p)).To(Equal([]string{"cp-b@0"}))
	})
	t.Run("one remediated by another check holds ours back", func(t *testing.T) {
		g := NewWithT(t)
		in := unitObserved(unitCheck(), cp("cp-b", u0))
		in.BusyControlPlane = []string{"cp-x"}
		p := decide(in, now)
		g.Expect(creates(p)).To(BeEmpty())
		g.Expect(p.Entries["cp-b"].SkipMessage).To(ContainSubstring("cp-x"))
	})
}

func TestDecideEscalation(t *testing.T) {
	started := u0.Add(time.Hour)
	check := func(remediations ...v1alpha1.RequestRecord) *v1alpha1.NodeHealthCheck {
		return unitCheck(func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.RemediationTemplate = nil
			c.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
				{RemediationTemplate: pcRef, Order: 1, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
				{RemediationTemplate: fenceRf, Order: 2, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
			}
			c.Status.UnhealthyNodes = []v1alpha1.UnhealthyNode{{Name: "w1", RemediationProgress: v1alpha1.RemediationProgress{Remediations: remediations}}}
		})
	}
	fenceEntry := v1alpha1.RequestRecord{APIVersion: fenceGV.GroupVersion().String(), Kind: fenceGV.Kind, Namespace: "ops", TemplateName: "fence",
		Started: metav1.NewTime(started.Add(5 * time.Minute))}
	lease := leaseInfo{Holder: holder, Until: started.Add(9 * time.Minute)}

	t.Run("step 1 times out: marked, step 2 created", func(t *testing.T) {
		g := NewWithT(t)
		in := unitObserved(check(pcEntry(started)), unitNode("w1", corev1.ConditionFalse, u0))
		in.Steps, in.Ours["w1"], in.Leases["w1"] = twoSteps(), []remediationObject{pcObj("w1", started)}, lease
		now := started.Add(5 * time.Minute)
		p := decide(in, now)
		g.Expect(timeOuts(p)).To(Equal([]emrRef{pcObj("w1", started).Ref}))
		g.Expect(created(p)).To(Equal([]string{"w1@1"}))
		g.Expect(creates(p)[0].Create.First).To(BeFalse(), "escalation is not detection")
		g.Expect(p.Entries["w1"].Remediations[0].TimedOut.Time).To(Equal(now))
		g.Expect(reasons(p)).To(Equal([]string{EventRemediationTimedOut}))
	})
	t.Run("Succeeded=False escalates at once", func(t *testing.T) {
		g := NewWithT(t)
		obj := pcObj("w1", started)
		obj.Failed = true
		in := unitObserved(check(pcEntry(started)), unitNode("w1", corev1.ConditionFalse, u0))
		in.Steps, in.Ours["w1"], in.Leases["w1"] = twoSteps(), []remediationObject{obj}, lease
		p := decide(in, started.Add(time.Second))
		g.Expect(timeOuts(p)).To(HaveLen(1))
		g.Expect(created(p)).To(Equal([]string{"w1@1"}))
		g.Expect(reasons(p)).To(Equal([]string{EventRemediationFailed}))
	})
	t.Run("a pause does not stop marking, but holds the next step", func(t *testing.T) {
		g := NewWithT(t)
		in := unitObserved(check(pcEntry(started)), unitNode("w1", corev1.ConditionFalse, u0))
		in.Check.Spec.PauseRequests = []string{"maintenance window"}
		in.Steps, in.Ours["w1"], in.Leases["w1"] = twoSteps(), []remediationObject{pcObj("w1", started)}, lease
		p := decide(in, started.Add(5*time.Minute))
		g.Expect(timeOuts(p)).To(HaveLen(1))
		g.Expect(creates(p)).To(BeEmpty())
	})
	t.Run("last step ends: exhausted, nothing more", func(t *testing.T) {
		g := NewWithT(t)
		first := pcEntry(started)
		first.TimedOut = &metav1.Time{Time: started.Add(5 * time.Minute)}
		timedOut := pcObj("w1", started)
		timedOut.TimedOut = true
		in := unitObserved(check(first, fenceEntry), unitNode("w1", corev1.ConditionFalse, u0))
		in.Steps, in.Leases["w1"] = twoSteps(), lease
		in.Ours["w1"] = []remediationObject{timedOut, fenceObj("w1", started.Add(5*time.Minute))}
		p := decide(in, started.Add(15*time.Minute))
		g.Expect(timeOuts(p)).To(Equal([]emrRef{fenceObj("w1", started).Ref}))
		g.Expect(creates(p)).To(BeEmpty())
		g.Expect(reasons(p)).To(Equal([]string{EventRemediationTimedOut, EventRemediationsExhausted}))
	})
	t.Run("last step reports Succeeded=False: left as the remediator left it", func(t *testing.T) {
		g := NewWithT(t)
		first := pcEntry(started)
		first.TimedOut = &metav1.Time{Time: started.Add(5 * time.Minute)}
		timedOut := pcObj("w1", started)
		timedOut.TimedOut = true
		failed := fenceObj("w1", started.Add(5*time.Minute))
		failed.Failed = true
		in := unitObserved(check(first, fenceEntry), unitNode("w1", corev1.ConditionFalse, u0))
		in.Steps, in.Leases["w1"] = twoSteps(), lease
		in.Ours["w1"] = []remediationObject{timedOut, failed}
		now := started.Add(6 * time.Minute)
		p := decide(in, now)
		g.Expect(timeOuts(p)).To(BeEmpty(), "the fenced host must not be handed back to the remediator's clean-up")
		g.Expect(deletes(p)).To(BeEmpty())
		g.Expect(creates(p)).To(BeEmpty())
		g.Expect(p.Entries["w1"].Remediations[1].TimedOut.Time).To(Equal(now), "the step has ended in status")
		g.Expect(reasons(p)).To(Equal([]string{EventRemediationFailed, EventRemediationsExhausted}))
		g.Expect(renewals(p)).To(ContainElement(HaveField("Node.Name", "w1")), "the check keeps the node's lease")
	})
	t.Run("next step of the same kind: a name of its own, the earlier request is not deleted", func(t *testing.T) {
		g := NewWithT(t)
		in := unitObserved(check(pcEntry(started)), unitNode("w1", corev1.ConditionFalse, u0))
		in.Steps, in.Ours["w1"], in.Leases["w1"] = sameKindSteps(), []remediationObject{pcObj("w1", started)}, lease
		p := decide(in, started.Add(5*time.Minute))
		g.Expect(timeOuts(p)).To(Equal([]emrRef{pcObj("w1", started).Ref}))
		g.Expect(deletes(p)).To(BeEmpty())
		g.Expect(created(p)).To(Equal([]string{"w1@1"}), "a request without a Processing condition cannot be waited for")
		g.Expect(creates(p)[0].Create.Name).To(Equal(hardObj("w1", started).Ref.Name))
	})
}

// sameKindSteps are two steps that make requests of the same kind in the same namespace.
func sameKindSteps() []engine.Step {
	return []engine.Step{stepOf(pcRef, pcGVK, 5*time.Minute), stepOf(hardRef, pcGVK, 10*time.Minute)}
}

var hardRef = v1alpha1.TemplateReference{APIVersion: pcRef.APIVersion, Kind: pcRef.Kind, Namespace: pcRef.Namespace, Name: "pool-a-hard"}

// hardObj is the request of sameKindSteps' second step.
func hardObj(node string, created time.Time) remediationObject {
	o := pcObj(node, created)
	o.Ref.Name, o.TemplateName = template.LaterStepName(node, hardRef.Name), hardRef.Name
	return o
}

// processing sets the status of a request's Processing condition.
func processing(o remediationObject, status metav1.ConditionStatus) remediationObject {
	o.Processing = status
	return o
}

// marked is a request that carries the timed-out mark set at at.
func marked(o remediationObject, at time.Time) remediationObject {
	o.TimedOut, o.TimedOutAt = true, at
	return o
}

// TestDecideHandOver: one hand per host. After a step times out, the next step's request is created only
// once the ended step's request is finished with the host (Processing=False, deleted, or no Processing
// condition at all), or template.HandOverBound after the timed-out mark, with a warning. Steps of the same
// kind and namespace get distinct names; the earlier request is never deleted by the escalation.
func TestDecideHandOver(t *testing.T) {
	started := u0.Add(time.Hour)
	timedOut := started.Add(5 * time.Minute)
	pairs := []struct {
		name   string
		steps  func() []engine.Step
		second func(node string, created time.Time) remediationObject // the second step's request
	}{
		{name: "different kinds", steps: twoSteps, second: fenceObj},
		{name: "same kind and namespace", steps: sameKindSteps, second: hardObj},
	}
	for _, pair := range pairs {
		checkWith := func() *v1alpha1.NodeHealthCheck {
			return unitCheck(func(c *v1alpha1.NodeHealthCheck) {
				c.Spec.RemediationTemplate = nil
				c.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
					{RemediationTemplate: pair.steps()[0].Ref(), Order: 1, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
					{RemediationTemplate: pair.steps()[1].Ref(), Order: 2, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
				}
				c.Status.UnhealthyNodes = []v1alpha1.UnhealthyNode{{Name: "w1", RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{pcEntry(started)}}}}
			})
		}
		observe := func(check *v1alpha1.NodeHealthCheck, ours ...remediationObject) observed {
			in := unitObserved(check, unitNode("w1", corev1.ConditionFalse, u0))
			in.Steps, in.Ours["w1"] = pair.steps(), ours
			in.Leases["w1"] = leaseInfo{Holder: holder, Until: timedOut.Add(25 * time.Minute)} // no renewal due in these passes
			return in
		}
		first := pcObj("w1", started)
		second := pair.second("w1", timedOut)
		// waiting runs the pass in which step 1 times out while its request reports Processing=True, and
		// returns the check with the status that pass wrote.
		waiting := func(g Gomega) *v1alpha1.NodeHealthCheck {
			check := checkWith()
			p := decide(observe(check, processing(first, metav1.ConditionTrue)), timedOut)
			g.Expect(timeOuts(p)).To(Equal([]emrRef{first.Ref}))
			g.Expect(creates(p)).To(BeEmpty(), "no second request while the first still acts on the host")
			g.Expect(deletes(p)).To(BeEmpty())
			g.Expect(p.Entries["w1"].WaitingFor).To(Equal(first.Ref.String()))
			g.Expect(reasons(p)).To(Equal([]string{EventRemediationTimedOut, EventWaitingForHandOver}))
			g.Expect(p.Events[1].Message).To(ContainSubstring(first.Ref.String()))
			g.Expect(p.Events[1].Type).To(Equal(corev1.EventTypeNormal))
			g.Expect(p.Next).To(Equal(timedOut.Add(template.HandOverBound)), "look again at the bound")
			check.Status = p.status(check)
			g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
			return check
		}
		// secondCreated checks a pass that creates the second step's request.
		secondCreated := func(g Gomega, p plan) {
			g.Expect(created(p)).To(Equal([]string{"w1@1"}))
			g.Expect(creates(p)[0].Create.Name).To(Equal(second.Ref.Name))
			if second.Ref.Kind == first.Ref.Kind && second.Ref.Namespace == first.Ref.Namespace {
				g.Expect(second.Ref.Name).NotTo(Equal(first.Ref.Name), "two requests of one kind and namespace, two names")
			}
			g.Expect(deletes(p)).To(BeEmpty(), "the escalation never deletes the first request")
			g.Expect(p.Entries["w1"].WaitingFor).To(BeEmpty())
		}

		t.Run(pair.name+": Processing=True holds the next step, an event says so once", func(t *testing.T) {
			g := NewWithT(t)
			check := waiting(g)
			p := decide(observe(check, processing(marked(first, timedOut), metav1.ConditionTrue)), timedOut.Add(time.Minute))
			g.Expect(creates(p)).To(BeEmpty())
			g.Expect(timeOuts(p)).To(BeEmpty())
			g.Expect(deletes(p)).To(BeEmpty())
			g.Expect(p.Events).To(BeEmpty(), "the wait was reported already")
			g.Expect(p.Entries["w1"].WaitingFor).To(Equal(first.Ref.String()))
			g.Expect(p.Next).To(Equal(timedOut.Add(template.HandOverBound)))
		})
		t.Run(pair.name+": created as soon as the first reports Processing=False", func(t *testing.T) {
			g := NewWithT(t)
			check := waiting(g)
			p := decide(observe(check, processing(marked(first, timedOut), metav1.ConditionFalse)), timedOut.Add(time.Minute))
			secondCreated(g, p)
			g.Expect(p.Events).To(BeEmpty(), "no warning: it handed over")
		})
		t.Run(pair.name+": created as soon as the first is gone", func(t *testing.T) {
			g := NewWithT(t)
			check := waiting(g)
			p := decide(observe(check), timedOut.Add(time.Minute))
			secondCreated(g, p)
			g.Expect(p.Events).To(BeEmpty())
		})
		t.Run(pair.name+": a first request being deleted still holds it while Processing=True", func(t *testing.T) {
			g := NewWithT(t)
			check := waiting(g)
			deleting := processing(marked(first, timedOut), metav1.ConditionTrue)
			deleting.Deleting = true
			p := decide(observe(check, deleting), timedOut.Add(time.Minute))
			g.Expect(creates(p)).To(BeEmpty())
			g.Expect(p.Entries["w1"].WaitingFor).To(Equal(first.Ref.String()))
		})
		t.Run(pair.name+": a first request that never hands over holds it exactly until the bound", func(t *testing.T) {
			g := NewWithT(t)
			check := waiting(g)
			stuck := processing(marked(first, timedOut), metav1.ConditionTrue)
			p := decide(observe(check, stuck), timedOut.Add(template.HandOverBound-time.Second))
			g.Expect(creates(p)).To(BeEmpty())
			g.Expect(p.Events).To(BeEmpty())
			p = decide(observe(check, stuck), timedOut.Add(template.HandOverBound))
			secondCreated(g, p)
			g.Expect(reasons(p)).To(Equal([]string{EventHandOverTimedOut}))
			g.Expect(p.Events[0].Type).To(Equal(corev1.EventTypeWarning))
			g.Expect(p.Events[0].Message).To(ContainSubstring(first.Ref.String()))
		})
		t.Run(pair.name+": a first request without a Processing condition does not hold it", func(t *testing.T) {
			g := NewWithT(t)
			check := checkWith()
			p := decide(observe(check, first), timedOut)
			g.Expect(timeOuts(p)).To(Equal([]emrRef{first.Ref}))
			secondCreated(g, p)
			g.Expect(reasons(p)).To(Equal([]string{EventRemediationTimedOut}))
			g.Expect(nodeOf(p, first.Ref)).To(Equal("w1"))
		})
		t.Run(pair.name+": both requests live side by side; nothing is deleted or created", func(t *testing.T) {
			g := NewWithT(t)
			check := waiting(g)
			now := timedOut.Add(6 * time.Minute)
			p := decide(observe(check, processing(marked(first, timedOut), metav1.ConditionTrue), processing(second, metav1.ConditionTrue)), now)
			g.Expect(creates(p)).To(BeEmpty())
			g.Expect(deletes(p)).To(BeEmpty())
			g.Expect(timeOuts(p)).To(BeEmpty())
			g.Expect(p.Events).To(BeEmpty())
			rems := p.Entries["w1"].Remediations
			g.Expect(rems).To(HaveLen(2))
			g.Expect(requestNameOf("w1", rems[0])).To(Equal(first.Ref.Name))
			g.Expect(rems[0].TimedOut.Time).To(Equal(timedOut))
			g.Expect(rems[1].Name).To(Equal(second.Ref.Name))
			g.Expect(rems[1].TimedOut).To(BeNil(), "the second step runs, its timeout counted from when the check learnt of it")
			g.Expect(p.Entries["w1"].WaitingFor).To(BeEmpty())
		})
	}
}

func TestDecideRecovery(t *testing.T) {
	started := u0.Add(time.Hour)
	withEntry := func(healthySince *time.Time) *v1alpha1.NodeHealthCheck {
		return unitCheck(func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.HealthyDelay = &metav1.Duration{Duration: time.Minute}
			e := v1alpha1.UnhealthyNode{Name: "w1", RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{pcEntry(started)}}}
			if healthySince != nil {
				e.ConditionsHealthyTimestamp = &metav1.Time{Time: *healthySince}
			}
			c.Status.UnhealthyNodes = []v1alpha1.UnhealthyNode{e}
		})
	}
	recovered := started.Add(10 * time.Minute)
	lease := leaseInfo{Holder: holder, Until: recovered.Add(9 * time.Minute)}

	t.Run("healthyDelay passed: delete", func(t *testing.T) {
		g := NewWithT(t)
		in := unitObserved(withEntry(&recovered), unitNode("w1", corev1.ConditionTrue, recovered))
		in.Ours["w1"], in.Leases["w1"] = []remediationObject{pcObj("w1", started)}, lease
		p := decide(in, recovered.Add(time.Minute))
		g.Expect(deletes(p)).To(Equal([]emrRef{pcObj("w1", started).Ref}))
		g.Expect(reasons(p)).To(Equal([]string{EventRemediationFinished}))
		g.Expect(p.Release).To(BeEmpty(), "the lease is kept until the request is gone")
	})
	t.Run("request gone: forget the node, release the lease", func(t *testing.T) {
		g := NewWithT(t)
		check := withEntry(&recovered)
		in := unitObserved(check, unitNode("w1", corev1.ConditionTrue, recovered))
		in.Leases["w1"] = lease
		p := decide(in, recovered.Add(2*time.Minute))
		g.Expect(p.Release).To(Equal([]string{"w1"}))
		st := p.status(check)
		g.Expect(st.UnhealthyNodes).To(BeEmpty())
		g.Expect(st.InFlightRemediations).To(BeEmpty())
		g.Expect(st.Phase).To(Equal(v1alpha1.PhaseEnabled))
	})
	t.Run("node deleted: its requests are deleted, its entry says nothing else", func(t *testing.T) {
		g := NewWithT(t)
		check := withEntry(nil)
		check.Status.UnhealthyNodes[0].SkipReason, check.Status.UnhealthyNodes[0].WaitingFor = SkipLeaseHeldByOther, "PowerCycleRemediation ns/w1"
		in := unitObserved(check)
		in.Ours["w1"] = []remediationObject{pcObj("w1", started)}
		in.Tracked = map[string]*corev1.Node{"w1": nil}
		p := decide(in, recovered)
		g.Expect(deletes(p)).To(HaveLen(1))
		g.Expect(reasons(p)).To(Equal([]string{EventNodeGone}))
		g.Expect(p.Entries["w1"].RemediationProgress).To(Equal(v1alpha1.RemediationProgress{
			Remediations: []v1alpha1.RequestRecord{pcEntry(started)}}), "its requests, being deleted; no skip, no wait")
	})
	t.Run("a request of ours missing from status is adopted, not duplicated", func(t *testing.T) {
		g := NewWithT(t)
		in := unitObserved(unitCheck(), unitNode("w1", corev1.ConditionFalse, u0))
		in.Ours["w1"] = []remediationObject{pcObj("w1", started)}
		in.Leases["w1"] = lease
		p := decide(in, started.Add(time.Minute))
		g.Expect(creates(p)).To(BeEmpty())
		g.Expect(p.Entries["w1"].Remediations).To(HaveLen(1))
		g.Expect(p.Entries["w1"].Remediations[0].Started.Time).To(Equal(started.Add(time.Minute)), "adopted as started now: no early timeout")
		g.Expect(p.status(in.Check).Phase).To(Equal(v1alpha1.PhaseRemediating))
	})
	t.Run("a stale status that missed the timed-out mark does not time the step out again", func(t *testing.T) {
		g := NewWithT(t)
		check := unitCheck(func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.RemediationTemplate = nil
			c.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
				{RemediationTemplate: pcRef, Order: 1, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
				{RemediationTemplate: fenceRf, Order: 2, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
			}
			c.Status.UnhealthyNodes = []v1alpha1.UnhealthyNode{{Name: "w1", RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{pcEntry(started)}}}}
		})
		marked := pcObj("w1", started)
		marked.TimedOut, marked.Failed, marked.TimedOutAt = true, true, started.Add(time.Minute)
		in := unitObserved(check, unitNode("w1", corev1.ConditionFalse, u0))
		in.Steps, in.Leases["w1"] = twoSteps(), leaseInfo{Holder: holder, Until: started.Add(9 * time.Minute)}
		in.Ours["w1"] = []remediationObject{marked, fenceObj("w1", started.Add(time.Minute))}
		p := decide(in, started.Add(2*time.Minute))
		g.Expect(timeOuts(p)).To(BeEmpty())
		g.Expect(creates(p)).To(BeEmpty())
		g.Expect(p.Events).To(BeEmpty())
		rems := p.Entries["w1"].Remediations
		g.Expect(rems).To(HaveLen(2))
		g.Expect(rems[0].TimedOut.Time).To(Equal(started.Add(time.Minute)))
		g.Expect(rems[1].Kind).To(Equal("FenceRemediation"))
	})
	t.Run("lease held by our request's remediator taken over, anyone else's left alone", func(t *testing.T) {
		g := NewWithT(t)
		in := unitObserved(unitCheck(), unitNode("w1", corev1.ConditionFalse, u0))
		in.Check.Status.UnhealthyNodes = []v1alpha1.UnhealthyNode{{Name: "w1", RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{pcEntry(started)}}}}
		in.Ours["w1"] = []remediationObject{pcObj("w1", started)}
		in.Leases["w1"] = leaseInfo{Holder: "PowerCycleRemediation-w1", Until: started.Add(10 * time.Minute)}
		p := decide(in, started.Add(time.Minute))
		g.Expect(renewals(p)).To(ConsistOf(renewal{Node: in.Nodes[0], From: []string{"PowerCycleRemediation-w1"}}))
		in.Leases["w1"] = leaseInfo{Holder: "node-maintenance", Until: started.Add(10 * time.Minute)}
		p = decide(in, started.Add(time.Minute))
		g.Expect(renewals(p)).To(BeEmpty())
	})
}

// TestDecideUnreadRequestsKeepTheirNode: the request kind of a Node's running remediation cannot be read
// (its watch failed after a restart: the check is disabled). The request may still act on the Node: its
// entry stays, its lease is kept and renewed, not released, and, a control-plane Node, it keeps the other
// control-plane Nodes' starts back.
func TestDecideUnreadRequestsKeepTheirNode(t *testing.T) {
	g := NewWithT(t)
	entry := v1alpha1.UnhealthyNode{Name: "cp-0", RemediationProgress: v1alpha1.RemediationProgress{
		Remediations: []v1alpha1.RequestRecord{pcEntry(u0.Add(-3 * time.Minute))}}}
	check := unitCheck(func(c *v1alpha1.NodeHealthCheck) { c.Status.UnhealthyNodes = []v1alpha1.UnhealthyNode{entry} })
	cp0 := unitNode("cp-0", corev1.ConditionUnknown, u0.Add(-10*time.Minute), labelControlPlane, "")
	in := unitObserved(check, cp0)
	in.Disabled = &cause{Reason: v1alpha1.ReasonRemediationKindNotWatchable, Message: "not watchable"}
	in.Unread = map[string]bool{"cp-0": true}
	in.Leases = map[string]leaseInfo{"cp-0": {Holder: holder, Until: u0.Add(4 * time.Minute)}} // past half-time

	p := decide(in, u0)
	g.Expect(p.Release).To(BeEmpty(), "the lease is not let go while the request may act")
	g.Expect(p.Entries).To(HaveKeyWithValue("cp-0", HaveField("RemediationProgress", entry.RemediationProgress)))
	g.Expect(p.Outcomes).To(ConsistOf(And(HaveField("Target.Name", "cp-0"), HaveField("Lease", true))), "renewed, nothing else")

	in.Disabled = nil
	cp1 := unitNode("cp-1", corev1.ConditionUnknown, u0.Add(-10*time.Minute), labelControlPlane, "")
	in.Nodes = append(in.Nodes, cp1)
	p = decide(in, u0)
	g.Expect(p.Entries).To(HaveKeyWithValue("cp-1", HaveField("SkipReason", SkipControlPlaneBusy)))
}
