package nhc

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/metrics"
	"github.com/metalheal/metalheal/internal/template"
)

// steppingClock is a fake clock that moves on by step each time it is read: time passes while a
// reconcile works.
type steppingClock struct {
	*clocktesting.FakeClock
	step time.Duration
}

func (c *steppingClock) Now() time.Time {
	c.Step(c.step)
	return c.FakeClock.Now()
}

// The look again at an expiry is timed from the end of the reconcile that asks for it, not from its
// decision: its writes took time, and the request must be created when the condition expires, not that
// much later.
func TestRequeueCountsFromTheEndOfTheReconcile(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	check := w.check("nhc", &ref)
	w.node("w1", corev1.ConditionUnknown, t0)
	clk := &steppingClock{FakeClock: clocktesting.NewFakeClock(t0.Add(5*time.Minute - time.Second)), step: 10 * time.Millisecond}
	r, err := New(Options{Client: k8s, Clock: clk, Recorder: w.rec, LeaseNamespace: leaseNS, ResyncPeriod: 24 * time.Hour})
	g.Expect(err).NotTo(HaveOccurred())
	w.r = r

	res := w.reconcile(check)
	g.Expect(res.RequeueAfter).To(BeNumerically("<", time.Second), "the clock moved on during the reconcile")
	g.Expect(res.RequeueAfter).To(Equal(t0.Add(5 * time.Minute).Sub(clk.FakeClock.Now())))
}

// Condition not yet expired → nothing; expired → exactly one request with the contract's name, namespace,
// owner references, annotations and spec; node recovers → request deleted, after healthyDelay.
func TestDetectionCreatesOneRequestAndDeletesItAfterRecovery(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	check := w.check("nhc", &ref, func(c *v1alpha1.NodeHealthCheck) {
		c.Spec.HealthyDelay = &metav1.Duration{Duration: time.Minute}
	})
	sick := w.node("w1", corev1.ConditionUnknown, t0)
	w.node("w2", corev1.ConditionTrue, t0)

	// One second before the condition expires: nothing, and the next look is exactly at the expiry.
	w.clk.SetTime(t0.Add(5*time.Minute - time.Second))
	res := w.reconcile(check)
	g.Expect(res.RequeueAfter).To(Equal(time.Second))
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	g.Expect(*check.Status.ObservedNodes).To(Equal(int32(2)))
	g.Expect(*check.Status.HealthyNodes).To(Equal(int32(1)), "failing, not yet unhealthy: not healthy either (it counts against the budget)")
	g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseEnabled))

	createdBefore := testutil.ToFloat64(metrics.RemediationsCreated.WithLabelValues(metrics.CheckerNHC, "PowerCycleRemediation"))
	delaysBefore, delaySumBefore := detectionDelays(t)

	// At the expiry: exactly one request, as the contract says.
	w.clk.SetTime(t0.Add(5 * time.Minute))
	w.reconcile(check)
	emrs := w.remediations(pcRemediation, check)
	g.Expect(emrs).To(HaveLen(1))
	emr := emrs[0]
	g.Expect(emr.GetName()).To(Equal(sick.Name))
	g.Expect(emr.GetNamespace()).To(Equal(pcNS))
	g.Expect(emr.GetOwnerReferences()).To(Equal([]metav1.OwnerReference{
		{APIVersion: "v1", Kind: "Node", Name: sick.Name, UID: sick.UID},
		{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "NodeHealthCheck", Name: check.Name, UID: check.UID},
	}))
	g.Expect(emr.GetAnnotations()).To(Equal(map[string]string{
		template.AnnotationNodeName:            sick.Name,
		template.AnnotationTemplateName:        ref.Name,
		template.AnnotationClonedFromName:      ref.Name,
		template.AnnotationClonedFromGroupKind: "PowerCycleRemediationTemplate.remediation.metalheal.io",
	}))
	spec, _, _ := unstructured.NestedMap(emr.Object, "spec")
	g.Expect(spec).To(HaveKeyWithValue("strategy", "reboot"))
	g.Expect(spec).To(HaveKeyWithValue("powerOffTimeoutSeconds", int64(120)))

	g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
	g.Expect(*check.Status.HealthyNodes).To(Equal(int32(1)))
	g.Expect(check.Status.InFlightRemediations).To(HaveKey(sick.Name))
	g.Expect(check.Status.UnhealthyNodes).To(HaveLen(1))
	g.Expect(check.Status.UnhealthyNodes[0].Remediations).To(HaveLen(1))
	rem := check.Status.UnhealthyNodes[0].Remediations[0]
	g.Expect(rem.Kind).To(Equal("PowerCycleRemediation"))
	g.Expect(rem.APIVersion).To(Equal("remediation.metalheal.io/v1alpha1"))
	g.Expect(rem.Namespace).To(Equal(pcNS))
	g.Expect(rem.TemplateName).To(Equal(ref.Name))
	g.Expect(rem.Started.Time).To(BeTemporally("==", t0.Add(5*time.Minute)))
	g.Expect(w.leaseHolder(sick)).To(Equal(leaseHolder(check.Name)), "the lease is taken before the request is created")

	created := w.rec.with(EventRemediationCreated)
	g.Expect(created).To(HaveLen(1))
	g.Expect(created[0].Regarding).To(Equal(check.Name))
	g.Expect(created[0].Related).To(Equal(sick.Name))
	g.Expect(created[0].Note).To(ContainSubstring("Ready=Unknown for 5m0s"))
	g.Expect(testutil.ToFloat64(metrics.RemediationsCreated.WithLabelValues(metrics.CheckerNHC, "PowerCycleRemediation"))).To(Equal(createdBefore + 1))
	delays, delaySum := detectionDelays(t)
	g.Expect(delays).To(Equal(delaysBefore+1), "the detection delay is observed once")
	g.Expect(delaySum).To(Equal(delaySumBefore), "created at the exact expiry: zero delay")
	g.Expect(testutil.ToFloat64(metrics.UnhealthyTargets.WithLabelValues(metrics.CheckerNHC, check.Name))).To(Equal(1.0))

	// Reconciling again changes nothing.
	w.reconcile(check)
	again := w.remediations(pcRemediation, check)
	g.Expect(again).To(HaveLen(1))
	g.Expect(again[0].GetUID()).To(Equal(emr.GetUID()))

	// The node recovers: the request stays for healthyDelay.
	recovered := t0.Add(20 * time.Minute)
	w.setReady(sick, corev1.ConditionTrue, recovered)
	w.clk.SetTime(recovered)
	res = w.reconcile(check)
	g.Expect(res.RequeueAfter).To(Equal(time.Minute))
	g.Expect(w.remediations(pcRemediation, check)).To(HaveLen(1))
	g.Expect(entry(check, sick).ConditionsHealthyTimestamp.Time).To(BeTemporally("==", recovered))

	w.clk.SetTime(recovered.Add(time.Minute - time.Second))
	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(HaveLen(1))

	// healthyDelay over: deleted. Once it is gone the node is forgotten and the lease released.
	w.clk.SetTime(recovered.Add(time.Minute))
	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	g.Expect(w.rec.with(EventRemediationFinished)).To(HaveLen(1))
	w.reconcile(check)
	g.Expect(check.Status.UnhealthyNodes).To(BeEmpty())
	g.Expect(check.Status.InFlightRemediations).To(BeEmpty())
	g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseEnabled))
	g.Expect(w.leaseHolder(sick)).To(BeEmpty())
	w.reconcile(check)
	// Told once: the lease is gone with the request, its event is the record of its release (kubectl
	// metalheal timeline reads it).
	g.Expect(w.rec.with(EventNodeLeaseReleased)).To(HaveExactElements(recordedEvent{Regarding: check.Name,
		Related: sick.Name, Type: corev1.EventTypeNormal, Reason: EventNodeLeaseReleased, Action: actionLease,
		Note: leaseNS + "/node-" + sick.Name + " deleted by its holder"}))
	g.Expect(testutil.ToFloat64(metrics.UnhealthyTargets.WithLabelValues(metrics.CheckerNHC, check.Name))).To(Equal(0.0))
}

// The Cluster API book's examples, against the API server: percentages round down, remediation stops when
// the unhealthy nodes exceed the allowed number, and a storm is reported.
func TestBudgetBookExamples(t *testing.T) {
	pct := intstr.FromString("40%")
	two := intstr.FromInt32(2)
	tests := []struct {
		name      string
		max       intstr.IntOrString
		total     int
		unhealthy int
		want      int
	}{
		{name: "25 nodes, 40%: 10 unhealthy are remediated", max: pct, total: 25, unhealthy: 10, want: 10},
		{name: "25 nodes, 40%: 11 unhealthy short-circuit", max: pct, total: 25, unhealthy: 11, want: 0},
		{name: "6 nodes, 40%: 2 unhealthy are remediated", max: pct, total: 6, unhealthy: 2, want: 2},
		{name: "6 nodes, 40%: 3 unhealthy short-circuit", max: pct, total: 6, unhealthy: 3, want: 0},
		{name: "absolute 2: 2 unhealthy are remediated", max: two, total: 5, unhealthy: 2, want: 2},
		{name: "absolute 2: 3 unhealthy short-circuit", max: two, total: 5, unhealthy: 3, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			g := w.g
			ref := w.pcTemplate("pc")
			check := w.check("nhc", &ref, func(c *v1alpha1.NodeHealthCheck) { c.Spec.MaxUnhealthy = &tt.max })
			for i := range tt.total {
				status := corev1.ConditionTrue
				if i < tt.unhealthy {
					status = corev1.ConditionFalse
				}
				w.node(string(rune('a'+i/10))+string(rune('0'+i%10)), status, t0)
			}
			w.clk.SetTime(t0.Add(time.Hour))
			w.reconcile(check)
			g.Expect(w.remediations(pcRemediation, check)).To(HaveLen(tt.want))
			g.Expect(*check.Status.ObservedNodes).To(Equal(int32(tt.total)))
			g.Expect(*check.Status.HealthyNodes).To(Equal(int32(tt.total - tt.unhealthy)))
			storm := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionStormActive)
			allowed := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionRemediationAllowed)
			if tt.want > 0 {
				g.Expect(storm.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(allowed.Status).To(Equal(metav1.ConditionTrue))
				return
			}
			g.Expect(storm.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(allowed.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(allowed.Reason).To(Equal(v1alpha1.ReasonTooManyUnhealthy))
			g.Expect(w.rec.with(EventRemediationShortCircuited)).To(HaveLen(1))
		})
	}
}

// A storm stops remediation and sets StormActive; remediation resumes only after stormCooldownDuration.
func TestStormStopsRemediationAndResumesAfterCooldown(t *testing.T) {
	w := newWorld(t)
	g := w.g
	pct := intstr.FromString("40%")
	ref := w.pcTemplate("pc")
	check := w.check("nhc", &ref, func(c *v1alpha1.NodeHealthCheck) {
		c.Spec.MaxUnhealthy = &pct
		c.Spec.StormCooldownDuration = &metav1.Duration{Duration: 2 * time.Minute}
	})
	bad := []*corev1.Node{w.node("b0", corev1.ConditionFalse, t0), w.node("b1", corev1.ConditionFalse, t0), w.node("b2", corev1.ConditionFalse, t0)}
	for _, n := range []string{"g0", "g1", "g2"} {
		w.node(n, corev1.ConditionTrue, t0)
	}

	w.clk.SetTime(t0.Add(time.Hour))
	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	storm := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionStormActive)
	g.Expect(storm.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(storm.Reason).To(Equal(v1alpha1.ReasonTooManyUnhealthy))
	g.Expect(check.Status.Reason).To(ContainSubstring("short-circuited"))

	// One node recovers: within budget again, but cooling down.
	ended := t0.Add(time.Hour + time.Minute)
	w.setReady(bad[0], corev1.ConditionTrue, ended)
	w.clk.SetTime(ended)
	res := w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	storm = meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionStormActive)
	g.Expect(storm.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(storm.Reason).To(Equal(v1alpha1.ReasonStormCooldown))
	g.Expect(res.RequeueAfter).To(Equal(2 * time.Minute))
	g.Expect(w.rec.with(EventStormCooldown)).To(HaveLen(1))

	w.clk.SetTime(ended.Add(2*time.Minute - time.Second))
	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())

	// Cooldown over: the two still unhealthy nodes are remediated.
	w.clk.SetTime(ended.Add(2 * time.Minute))
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{bad[1].Name, bad[2].Name}))
	g.Expect(meta.IsStatusConditionFalse(check.Status.Conditions, v1alpha1.ConditionStormActive)).To(BeTrue())
	g.Expect(w.rec.with(EventStormEnded)).To(HaveLen(1))
}

// A third-party remediation kind, defined only by this test's CRD, is driven the same way.
func TestThirdPartyRemediationKind(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.fenceTemplate("fence", map[string]any{"template": map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"team": "ops"}},
		"spec":     map[string]any{"mode": "hard", "delaySeconds": int64(5)},
	}})
	check := w.check("nhc", &ref)
	sick := w.node("w1", corev1.ConditionFalse, t0)
	w.node("w2", corev1.ConditionTrue, t0)

	w.clk.SetTime(t0.Add(5 * time.Minute))
	w.reconcile(check)
	emrs := w.remediations(fenceRemediation, check)
	g.Expect(emrs).To(HaveLen(1))
	emr := emrs[0]
	g.Expect(emr.GetName()).To(Equal(sick.Name))
	g.Expect(emr.GetNamespace()).To(Equal(fenceNS))
	g.Expect(emr.GetLabels()).To(Equal(map[string]string{"team": "ops"}))
	g.Expect(emr.GetAnnotations()).To(HaveKeyWithValue(template.AnnotationClonedFromGroupKind, "FenceRemediationTemplate.fence.example.com"))
	g.Expect(emr.GetAnnotations()).To(HaveKeyWithValue(template.AnnotationNodeName, sick.Name))
	g.Expect(emr.GetOwnerReferences()).To(HaveLen(2))
	spec, _, _ := unstructured.NestedMap(emr.Object, "spec")
	g.Expect(spec).To(Equal(map[string]any{"mode": "hard", "delaySeconds": int64(5)}))
	g.Expect(check.Status.UnhealthyNodes[0].Remediations[0].Kind).To(Equal("FenceRemediation"))

	w.setReady(sick, corev1.ConditionTrue, t0.Add(10*time.Minute))
	w.clk.SetTime(t0.Add(10 * time.Minute))
	w.reconcile(check)
	g.Expect(w.remediations(fenceRemediation, check)).To(BeEmpty())
}

func escalating(steps ...v1alpha1.EscalatingRemediation) func(*v1alpha1.NodeHealthCheck) {
	return func(c *v1alpha1.NodeHealthCheck) {
		c.Spec.RemediationTemplate = nil
		c.Spec.EscalatingRemediations = steps
	}
}

// Escalation: step 1 times out → marked timed out, step 2 created.
func TestEscalationOnTimeout(t *testing.T) {
	w := newWorld(t)
	g := w.g
	pc := w.pcTemplate("pc")
	fence := w.fenceTemplate("fence", map[string]any{"template": map[string]any{"spec": map[string]any{"mode": "hard"}}})
	check := w.check("nhc", nil, escalating(
		v1alpha1.EscalatingRemediation{RemediationTemplate: fence, Order: 10, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
		v1alpha1.EscalatingRemediation{RemediationTemplate: pc, Order: 1, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
	))
	sick := w.node("w1", corev1.ConditionUnknown, t0)

	start := t0.Add(5 * time.Minute)
	w.clk.SetTime(start)
	res := w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{sick.Name}), "the lowest order goes first")
	g.Expect(w.remediations(fenceRemediation, check)).To(BeEmpty())
	g.Expect(res.RequeueAfter).To(Equal(5*time.Minute), "look again exactly when the step times out")

	w.clk.SetTime(start.Add(5*time.Minute - time.Second))
	w.reconcile(check)
	g.Expect(w.remediations(fenceRemediation, check)).To(BeEmpty())

	timedOut := start.Add(5 * time.Minute)
	w.clk.SetTime(timedOut)
	w.reconcile(check)
	first := w.remediations(pcRemediation, check)
	g.Expect(first).To(HaveLen(1))
	g.Expect(first[0].GetAnnotations()).To(HaveKeyWithValue(template.AnnotationTimedOut, timedOut.Format(time.RFC3339)))
	g.Expect(names(w.remediations(fenceRemediation, check))).To(Equal([]string{sick.Name}))
	rems := entry(check, sick).Remediations
	g.Expect(rems).To(HaveLen(2))
	g.Expect(rems[0].Kind).To(Equal("PowerCycleRemediation"))
	g.Expect(rems[0].TimedOut.Time).To(BeTemporally("==", timedOut))
	g.Expect(rems[1].Kind).To(Equal("FenceRemediation"))
	g.Expect(rems[1].TimedOut).To(BeNil())
	g.Expect(w.rec.with(EventRemediationTimedOut)).To(HaveLen(1))
	g.Expect(w.rec.with(EventRemediationCreated)[1].Note).To(ContainSubstring("escalation step 2 of 2"))

	// The last step times out too: exhausted, nothing more is created.
	w.clk.SetTime(timedOut.Add(10 * time.Minute))
	w.reconcile(check)
	g.Expect(w.rec.with(EventRemediationsExhausted)).To(HaveLen(1))
	g.Expect(w.remediations(fenceRemediation, check)[0].GetAnnotations()).To(HaveKey(template.AnnotationTimedOut))
	g.Expect(w.remediations(pcRemediation, check)).To(HaveLen(1))
	g.Expect(w.remediations(fenceRemediation, check)).To(HaveLen(1))
}

// Escalation: Succeeded=False escalates at once, without waiting for the timeout.
func TestEscalationOnSucceededFalse(t *testing.T) {
	w := newWorld(t)
	g := w.g
	pc := w.pcTemplate("pc")
	fence := w.fenceTemplate("fence", map[string]any{"template": map[string]any{"spec": map[string]any{"mode": "hard"}}})
	check := w.check("nhc", nil, escalating(
		v1alpha1.EscalatingRemediation{RemediationTemplate: pc, Order: 1, Timeout: metav1.Duration{Duration: 30 * time.Minute}},
		v1alpha1.EscalatingRemediation{RemediationTemplate: fence, Order: 2, Timeout: metav1.Duration{Duration: 30 * time.Minute}},
	))
	sick := w.node("w1", corev1.ConditionFalse, t0)

	w.clk.SetTime(t0.Add(5 * time.Minute))
	w.reconcile(check)
	first := w.remediations(pcRemediation, check)
	g.Expect(first).To(HaveLen(1))

	w.setSucceeded(&first[0], metav1.ConditionFalse)
	w.clk.SetTime(t0.Add(6 * time.Minute))
	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)[0].GetAnnotations()).To(HaveKeyWithValue(template.AnnotationTimedOut, t0.Add(6*time.Minute).Format(time.RFC3339)))
	g.Expect(names(w.remediations(fenceRemediation, check))).To(Equal([]string{sick.Name}))
	g.Expect(w.rec.with(EventRemediationFailed)).To(HaveLen(1))
	g.Expect(w.leaseHolder(sick)).To(Equal(leaseHolder(check.Name)), "the lease stays through the escalation")
}

// Two overlapping checks: one request; the newer check skips the node and says so in status and an event.
func TestOverlappingChecksMakeOneRequest(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	older := w.check("a", &ref)
	newer := w.check("b", &ref)
	g.Expect(older.CreationTimestamp.After(newer.CreationTimestamp.Time)).To(BeFalse())
	sick := w.node("w1", corev1.ConditionFalse, t0)
	w.clk.SetTime(t0.Add(time.Hour))

	// The newer check looks first, and still leaves the node to the older one.
	w.reconcile(newer)
	g.Expect(w.remediations(pcRemediation, newer)).To(BeEmpty())
	e := entry(newer, sick)
	g.Expect(e).NotTo(BeNil())
	g.Expect(e.SkipReason).To(Equal(SkipOwnedByOtherCheck))
	g.Expect(e.SkipMessage).To(ContainSubstring("NodeHealthCheck " + older.Name))
	skipped := w.rec.with(EventSkippedOwnedByOtherCheck)
	g.Expect(skipped).To(HaveLen(1))
	g.Expect(skipped[0].Regarding).To(Equal(newer.Name))
	g.Expect(skipped[0].Related).To(Equal(sick.Name))

	w.reconcile(older)
	w.reconcile(newer)
	g.Expect(names(w.remediations(pcRemediation, older))).To(Equal([]string{sick.Name}))
	g.Expect(w.remediations(pcRemediation, newer)).To(BeEmpty())
	g.Expect(listKind(w.ctx, pcRemediation)).To(ContainElement(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("name", sick.Name)))))
	g.Expect(entry(newer, sick).SkipReason).To(Equal(SkipOwnedByOtherCheck))
	g.Expect(w.rec.with(EventSkippedOwnedByOtherCheck)).To(HaveLen(1), "reported once, not on every reconcile")
	g.Expect(newer.Status.InFlightRemediations).To(BeEmpty())
	g.Expect(older.Status.InFlightRemediations).To(HaveKey(sick.Name))
}

// A lease held by node maintenance: no request, an event naming the holder; released → proceeds.
func TestLeaseHeldByNodeMaintenance(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	check := w.check("nhc", &ref)
	sick := w.node("w1", corev1.ConditionFalse, t0)
	now := t0.Add(time.Hour)
	w.clk.SetTime(now)

	maintenance := w.maintenance()
	g.Expect(maintenance.RequestLease(w.ctx, sick, time.Hour)).To(Succeed())

	res := w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	g.Expect(entry(check, sick).SkipReason).To(Equal(SkipLeaseHeldByOther))
	g.Expect(entry(check, sick).SkipMessage).To(ContainSubstring(`"node-maintenance"`))
	held := w.rec.with(EventSkippedLeaseHeld)
	g.Expect(held).To(HaveLen(1))
	g.Expect(held[0].Note).To(ContainSubstring(`"node-maintenance"`))
	g.Expect(res.RequeueAfter).To(Equal(time.Hour+time.Second), "look again when the lease runs out")
	g.Expect(w.leaseHolder(sick)).To(Equal("node-maintenance"))

	g.Expect(maintenance.InvalidateLease(w.ctx, sick.Name)).To(Succeed())
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{sick.Name}))
	g.Expect(w.leaseHolder(sick)).To(Equal(leaseHolder(check.Name)))
	g.Expect(entry(check, sick).SkipReason).To(BeEmpty())
}

// Two control-plane nodes unhealthy: one at a time.
func TestControlPlaneNodesOneAtATime(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	check := w.check("nhc", &ref)
	first := w.node("cp1", corev1.ConditionUnknown, t0, labelControlPlane, "")
	second := w.node("cp2", corev1.ConditionUnknown, t0.Add(time.Minute), labelControlPlane, "")

	w.clk.SetTime(t0.Add(time.Hour))
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{first.Name}))
	g.Expect(w.remediations(pcRemediation, check)[0].GetLabels()).To(HaveKeyWithValue(template.LabelControlPlane, ""),
		"labelled as medik8s' NodeHealthCheck labels a control-plane node's request")
	g.Expect(entry(check, second).SkipReason).To(Equal(SkipControlPlaneBusy))
	g.Expect(w.rec.with(EventSkippedControlPlaneBusy)).To(HaveLen(1))

	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(HaveLen(1))

	// The first recovers; its request goes, and only then the second is remediated.
	w.setReady(first, corev1.ConditionTrue, t0.Add(time.Hour))
	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{second.Name}))
	g.Expect(entry(check, second).SkipReason).To(BeEmpty())
}

// A missing or malformed template disables the check with a reason and an event; it recovers by itself.
func TestMissingOrMalformedTemplateDisablesAndRecovers(t *testing.T) {
	t.Run("template object missing", func(t *testing.T) {
		w := newWorld(t)
		g := w.g
		ref := v1alpha1.TemplateReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediationTemplate", Name: w.pool + "-pc", Namespace: pcNS}
		check := w.check("nhc", &ref)
		sick := w.node("w1", corev1.ConditionFalse, t0)
		w.clk.SetTime(t0.Add(time.Hour))

		w.reconcile(check)
		g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseDisabled))
		g.Expect(check.Status.Reason).To(ContainSubstring("not found"))
		disabled := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionDisabled)
		g.Expect(disabled.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(disabled.Reason).To(Equal(v1alpha1.ReasonTemplateNotFound))
		g.Expect(w.rec.with(EventDisabled)).To(HaveLen(1))
		g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())

		w.pcTemplate("pc")
		w.reconcile(check)
		g.Expect(meta.IsStatusConditionFalse(check.Status.Conditions, v1alpha1.ConditionDisabled)).To(BeTrue())
		g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
		g.Expect(w.rec.with(EventEnabled)).To(HaveLen(1))
		g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{sick.Name}))
	})

	t.Run("template malformed", func(t *testing.T) {
		w := newWorld(t)
		g := w.g
		ref := w.fenceTemplate("fence", map[string]any{"mode": "hard"}) // no spec.template
		check := w.check("nhc", &ref)
		w.node("w1", corev1.ConditionFalse, t0)
		w.clk.SetTime(t0.Add(time.Hour))

		w.reconcile(check)
		disabled := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionDisabled)
		g.Expect(disabled.Reason).To(Equal(v1alpha1.ReasonTemplateInvalid))
		g.Expect(disabled.Message).To(ContainSubstring("spec.template is missing"))
		g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseDisabled))
		g.Expect(w.remediations(fenceRemediation, check)).To(BeEmpty())

		tpl := &unstructured.Unstructured{}
		tpl.SetGroupVersionKind(schema.GroupVersionKind{Group: "fence.example.com", Version: "v1", Kind: "FenceRemediationTemplate"})
		g.Expect(k8s.Get(w.ctx, client.ObjectKey{Namespace: fenceNS, Name: ref.Name}, tpl)).To(Succeed())
		g.Expect(unstructured.SetNestedMap(tpl.Object, map[string]any{"template": map[string]any{"spec": map[string]any{"mode": "hard"}}}, "spec")).To(Succeed())
		g.Expect(k8s.Update(w.ctx, tpl)).To(Succeed())
		w.reconcile(check)
		g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
		g.Expect(w.remediations(fenceRemediation, check)).To(HaveLen(1))
	})

	t.Run("template kind not installed yet", func(t *testing.T) {
		w := newWorld(t)
		g := w.g
		ref := v1alpha1.TemplateReference{APIVersion: "late.example.com/v1", Kind: "LateRemediationTemplate", Name: w.pool + "-late", Namespace: fenceNS}
		check := w.check("nhc", &ref)
		sick := w.node("w1", corev1.ConditionFalse, t0)
		w.clk.SetTime(t0.Add(time.Hour))

		res := w.reconcile(check)
		disabled := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionDisabled)
		g.Expect(disabled.Reason).To(Equal(v1alpha1.ReasonTemplateNotFound))
		g.Expect(disabled.Message).To(ContainSubstring("not installed"))
		g.Expect(res.RequeueAfter).To(Equal(DefaultKindRetryPeriod), "no watch reports a new CRD: look again later")

		_, err := envtest.InstallCRDs(restCfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "late")}})
		g.Expect(err).NotTo(HaveOccurred())
		tpl := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": ref.APIVersion, "kind": ref.Kind,
			"metadata": map[string]any{"name": ref.Name, "namespace": ref.Namespace},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{}}},
		}}
		w.create(tpl)
		w.reconcile(check)
		g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
		late := w.remediations(schema.GroupVersionKind{Group: "late.example.com", Version: "v1", Kind: "LateRemediation"}, check)
		g.Expect(names(late)).To(Equal([]string{sick.Name}))
		for i := range late {
			_ = k8s.Delete(context.Background(), &late[i])
		}
	})
}

// pauseRequests stop new remediation; the exclude label keeps a node away from it.
func TestPauseRequestsAndExcludeLabel(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	check := w.check("nhc", &ref, func(c *v1alpha1.NodeHealthCheck) { c.Spec.PauseRequests = []string{"cluster upgrade"} })
	sick := w.node("w1", corev1.ConditionFalse, t0)
	excluded := w.node("w2", corev1.ConditionFalse, t0, v1alpha1.LabelExcludeFromRemediation, "true")
	w.clk.SetTime(t0.Add(time.Hour))

	w.reconcile(check)
	g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhasePaused))
	g.Expect(check.Status.Reason).To(ContainSubstring("cluster upgrade"))
	g.Expect(meta.IsStatusConditionTrue(check.Status.Conditions, v1alpha1.ConditionPaused)).To(BeTrue())
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	g.Expect(w.rec.with(EventPaused)).To(HaveLen(1))

	check.Spec.PauseRequests = nil
	g.Expect(k8s.Update(w.ctx, check)).To(Succeed())
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{sick.Name}))
	g.Expect(entry(check, excluded).SkipReason).To(Equal(SkipExcluded))
	g.Expect(w.rec.with(EventSkippedExcluded)).To(HaveLen(1))
	g.Expect(w.rec.with(EventUnpaused)).To(HaveLen(1))
	g.Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
}

// A control-plane node someone else holds (node maintenance) counts as the one control-plane node down.
func TestControlPlaneNodeUnderMaintenanceHoldsOthersBack(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	check := w.check("nhc", &ref)
	drained := w.node("cp1", corev1.ConditionTrue, t0, labelControlPlane, "")
	sick := w.node("cp2", corev1.ConditionUnknown, t0, labelControlPlane, "")
	now := t0.Add(time.Hour)
	w.clk.SetTime(now)
	maintenance := w.maintenance()
	g.Expect(maintenance.RequestLease(w.ctx, drained, time.Hour)).To(Succeed())

	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	g.Expect(entry(check, sick).SkipReason).To(Equal(SkipControlPlaneBusy))
	g.Expect(entry(check, sick).SkipMessage).To(ContainSubstring(drained.Name))

	g.Expect(maintenance.InvalidateLease(w.ctx, drained.Name)).To(Succeed())
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{sick.Name}))
}

// One control-plane node at a time holds across checks too.
func TestControlPlaneOneAtATimeAcrossChecks(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	byZone := func(zone string) func(*v1alpha1.NodeHealthCheck) {
		return func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": w.pool, "zone": zone}}
		}
	}
	first := w.check("zone-a", &ref, byZone("a"))
	second := w.check("zone-b", &ref, byZone("b"))
	cpA := w.node("cp-a", corev1.ConditionUnknown, t0, labelControlPlane, "", "zone", "a")
	cpB := w.node("cp-b", corev1.ConditionUnknown, t0, labelControlPlane, "", "zone", "b")
	w.clk.SetTime(t0.Add(time.Hour))

	w.reconcile(first)
	w.reconcile(second)
	g.Expect(names(w.remediations(pcRemediation, first))).To(Equal([]string{cpA.Name}))
	g.Expect(w.remediations(pcRemediation, second)).To(BeEmpty())
	g.Expect(entry(second, cpB).SkipReason).To(Equal(SkipControlPlaneBusy))
	g.Expect(entry(second, cpB).SkipMessage).To(ContainSubstring(cpA.Name))
}

// writeThrough makes w's reconciler use a direct client to the test API server whose calls go through
// funcs; its live reads (the API reader) do not.
func (w *world) writeThrough(funcs interceptor.Funcs) {
	w.t.Helper()
	direct, err := client.NewWithWatch(restCfg, client.Options{Scheme: k8s.Scheme(), Mapper: k8s.RESTMapper()})
	w.g.Expect(err).NotTo(HaveOccurred())
	r, err := New(Options{Client: interceptor.NewClient(direct, funcs), APIReader: direct, Clock: w.clk, Recorder: w.rec,
		LeaseNamespace: leaseNS, ResyncPeriod: 24 * time.Hour})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.r = r
}

// recordWrites returns interceptor funcs that pass every create, update and delete through after
// telling record about it ("create", "update" or "delete"), whether it then succeeds or not.
func recordWrites(record func(verb string, c client.Client, obj client.Object)) interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			record("create", c, obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			record("update", c, obj)
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			record("delete", c, obj)
			return c.Delete(ctx, obj, opts...)
		},
	}
}

// kindOf is obj's kind, from its type when it does not carry one.
func kindOf(c client.Client, obj client.Object) string {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if kind == "" {
		if gvk, err := apiutil.GVKForObject(obj, c.Scheme()); err == nil {
			kind = gvk.Kind
		}
	}
	return kind
}

// createOrder makes w's reconciler write through a client that records the kind of every create, in
// order; onCreate, if set, runs after each successful create with its kind.
func (w *world) createOrder(onCreate func(kind string)) *[]string {
	w.t.Helper()
	var mu sync.Mutex
	var kinds []string
	w.writeThrough(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			kind := kindOf(c, obj)
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			mu.Lock()
			kinds = append(kinds, kind)
			mu.Unlock()
			if onCreate != nil {
				onCreate(kind)
			}
			return nil
		},
	})
	return &kinds
}

// A PowerCycleRemediation, whose remediator checks the node lease itself, is created before the check
// takes the lease: one round trip sooner. A request of any other kind waits for the lease.
func TestOwnRequestGoesOutBeforeTheLease(t *testing.T) {
	w := newWorld(t)
	g := w.g
	order := w.createOrder(nil)
	check, sick := w.pcCheckWithSickNode()
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{sick.Name}))
	g.Expect(w.leaseHolder(sick)).To(Equal(leaseHolder(check.Name)))
	g.Expect(*order).To(Equal([]string{"PowerCycleRemediation", "Lease"}))

	w = newWorld(t)
	order = w.createOrder(nil)
	fence := w.fenceTemplate("fence", map[string]any{"template": map[string]any{"spec": map[string]any{}}})
	check = w.check("nhc", &fence)
	sick = w.node("w1", corev1.ConditionFalse, t0)
	w.clk.SetTime(t0.Add(time.Hour))
	w.reconcile(check)
	g.Expect(names(w.remediations(fenceRemediation, check))).To(Equal([]string{sick.Name}))
	g.Expect(*order).To(Equal([]string{"Lease", "FenceRemediation"}))
}

// In a burst of failures every PowerCycleRemediation goes out before any of their leases is written.
// The requests after the first hold their return for a moment, as a busy API server would: a lease
// written meanwhile (the first request's, taken at once) would land between them.
func TestBurstSendsEveryRequestBeforeAnyLease(t *testing.T) {
	w := newWorld(t)
	g := w.g
	pc := w.pcTemplate("pc")
	check := w.check("nhc", &pc)
	sick := []*corev1.Node{w.node("w1", corev1.ConditionFalse, t0), w.node("w2", corev1.ConditionFalse, t0), w.node("w3", corev1.ConditionFalse, t0)}
	w.clk.SetTime(t0.Add(time.Hour))
	var mu sync.Mutex
	requests := 0
	leaseWritten := make(chan struct{})
	var once sync.Once
	order := w.createOrder(func(kind string) {
		switch kind {
		case "Lease":
			once.Do(func() { close(leaseWritten) })
		case "PowerCycleRemediation":
			mu.Lock()
			requests++
			first := requests == 1
			mu.Unlock()
			if !first {
				select {
				case <-leaseWritten:
				case <-time.After(300 * time.Millisecond):
				}
			}
		}
	})

	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(ConsistOf(sick[0].Name, sick[1].Name, sick[2].Name))
	for _, n := range sick {
		g.Expect(w.leaseHolder(n)).To(Equal(leaseHolder(check.Name)))
	}
	g.Expect(*order).To(Equal([]string{"PowerCycleRemediation", "PowerCycleRemediation", "PowerCycleRemediation", "Lease", "Lease", "Lease"}))
}

// Node maintenance takes the lease between the check's look at the cache and its lease request, just
// after the PowerCycleRemediation went out: the request is deleted again and the Node skipped, as if the
// check had seen the lease first.
func TestLeaseTakenAfterTheRequestWentOut(t *testing.T) {
	w := newWorld(t)
	g := w.g
	check, sick := w.pcCheckWithSickNode()
	maintenance := w.maintenance()
	w.createOrder(func(kind string) {
		if kind == "PowerCycleRemediation" {
			g.Expect(maintenance.RequestLease(w.ctx, sick, time.Hour)).To(Succeed())
		}
	})

	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty(), "deleted again")
	g.Expect(w.leaseHolder(sick)).To(Equal("node-maintenance"))
	g.Expect(entry(check, sick).SkipReason).To(Equal(SkipLeaseHeldByOther))
	g.Expect(entry(check, sick).Remediations).To(BeEmpty())
}

// The remediator of the check's own PowerCycleRemediation takes the Node's lease between the request
// going out and the check's lease request: the check takes the lease over from it, so that the check
// holds the Node for all its steps, as it does when it wins. A lease its request's remediator holds when
// the check next looks is taken over too; one held by anyone else is left alone.
func TestLeaseTakenByItsOwnRequestIsTakenOver(t *testing.T) {
	w := newWorld(t)
	g := w.g
	check, sick := w.pcCheckWithSickNode()
	remediator := w.leaseManager("PowerCycleRemediation-" + sick.Name)
	w.createOrder(func(kind string) {
		if kind == "PowerCycleRemediation" {
			g.Expect(remediator.RequestLease(w.ctx, sick, time.Hour)).To(Succeed())
		}
	})
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{sick.Name}))
	g.Expect(w.leaseHolder(sick)).To(Equal(leaseHolder(check.Name)))
	g.Expect(entry(check, sick).SkipReason).To(BeEmpty())

	// The manager stops after the request went out, before its lease; the remediator takes the lease.
	ours := w.leaseManager(leaseHolder(check.Name))
	w.clk.Step(time.Minute)
	g.Expect(ours.InvalidateLease(w.ctx, sick.Name)).To(Succeed())
	g.Expect(remediator.RequestLease(w.ctx, sick, time.Hour)).To(Succeed())
	w.restart()
	w.reconcile(check)
	g.Expect(w.leaseHolder(sick)).To(Equal(leaseHolder(check.Name)), "taken over at the first look")

	w.clk.Step(time.Minute)
	g.Expect(ours.InvalidateLease(w.ctx, sick.Name)).To(Succeed())
	g.Expect(w.maintenance().RequestLease(w.ctx, sick, time.Hour)).To(Succeed())
	w.reconcile(check)
	g.Expect(w.leaseHolder(sick)).To(Equal("node-maintenance"), "someone else's lease is not taken")
	g.Expect(names(w.remediations(pcRemediation, check))).To(Equal([]string{sick.Name}), "the running remediation is not interrupted")
}

// A negative healthyDelay (medik8s' rule): a Node healthy again keeps its request until a person
// annotates it confirmed healthy; the annotation is then removed, so that it confirms only this
// remediation.
func TestNegativeHealthyDelayWaitsForAPersonsConfirmation(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	check := w.check("nhc", &ref, func(c *v1alpha1.NodeHealthCheck) { c.Spec.HealthyDelay = &metav1.Duration{Duration: -time.Second} })
	sick := w.node("w1", corev1.ConditionUnknown, t0)
	w.clk.SetTime(t0.Add(10 * time.Minute))
	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(HaveLen(1))

	// Ready again, for days: the request stays, an event says what it waits for (once).
	w.setReady(sick, corev1.ConditionTrue, t0.Add(20*time.Minute))
	w.clk.SetTime(t0.Add(20 * time.Minute))
	res := w.reconcile(check)
	g.Expect(res.RequeueAfter).To(Equal(w.r.opts.ResyncPeriod), "no deadline: only the resync")
	w.clk.SetTime(t0.Add(72 * time.Hour))
	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(HaveLen(1))
	g.Expect(w.rec.with(EventWaitingForConfirmation)).To(ConsistOf(HaveField("Note",
		ContainSubstring(v1alpha1.AnnotationConfirmedHealthy))))
	g.Expect(w.leaseHolder(sick)).NotTo(BeEmpty(), "the Node stays held while its remediation is kept")

	// A person confirms it: the request goes, then the confirmation.
	g.Expect(k8s.Get(w.ctx, client.ObjectKeyFromObject(sick), sick)).To(Succeed())
	metav1.SetMetaDataAnnotation(&sick.ObjectMeta, v1alpha1.AnnotationConfirmedHealthy, "")
	g.Expect(k8s.Update(w.ctx, sick)).To(Succeed())
	w.reconcile(check)
	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	w.reconcile(check)
	g.Expect(k8s.Get(w.ctx, client.ObjectKeyFromObject(sick), sick)).To(Succeed())
	g.Expect(sick.Annotations).NotTo(HaveKey(v1alpha1.AnnotationConfirmedHealthy))
	g.Expect(check.Status.UnhealthyNodes).To(BeEmpty())
}

// A check in dry run decides everything and starts nothing: the Nodes it would remediate are in its
// status (skipReason DryRun, and what it would create), in one WouldRemediate event each, and in the
// would-remediate gauge; no request, no lease. Turned off, it remediates them.
func TestDryRunStartsNothingAndSaysWhatItWouldDo(t *testing.T) {
	w := newWorld(t)
	g := w.g
	ref := w.pcTemplate("pc")
	check := w.check("nhc", &ref, func(c *v1alpha1.NodeHealthCheck) { c.Spec.DryRun = true })
	a := w.node("a", corev1.ConditionUnknown, t0)
	b := w.node("b", corev1.ConditionFalse, t0)
	w.node("c", corev1.ConditionTrue, t0)
	w.clk.SetTime(t0.Add(time.Hour))
	w.reconcile(check)
	w.reconcile(check)

	g.Expect(w.remediations(pcRemediation, check)).To(BeEmpty())
	g.Expect(w.leaseHolder(a) + w.leaseHolder(b)).To(BeEmpty())
	for _, n := range []*corev1.Node{a, b} {
		e := entry(check, n)
		g.Expect(e).NotTo(BeNil())
		g.Expect(e.SkipReason).To(Equal(engine.SkipDryRun))
		g.Expect(e.SkipMessage).To(ContainSubstring("would create PowerCycleRemediation metalheal-system/" + n.Name))
	}
	g.Expect(w.rec.with(engine.EventWouldRemediate)).To(HaveLen(2), "once per Node")
	g.Expect(checkState(check, w.clk.Now()).WouldRemediate).To(Equal(2))

	// Acting for real: the same Nodes are remediated.
	g.Expect(k8s.Get(w.ctx, client.ObjectKeyFromObject(check), check)).To(Succeed())
	check.Spec.DryRun = false
	g.Expect(k8s.Update(w.ctx, check)).To(Succeed())
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(ConsistOf(a.Name, b.Name))
}
