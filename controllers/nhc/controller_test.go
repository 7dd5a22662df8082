package nhc

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/metrics"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/internal/testenv"
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
var _ = Describe("Requeue", func() {
	It("times the look again at an expiry from the end of the reconcile that asks for it, not from its decision", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref)
		w.node(ctx, "w1", corev1.ConditionUnknown, t0)
		clk := &steppingClock{FakeClock: clocktesting.NewFakeClock(t0.Add(5*time.Minute - time.Second)), step: 10 * time.Millisecond}
		r, err := New(Options{Client: k8s, Clock: clk, Recorder: w.rec, LeaseNamespace: leaseNS, ResyncPeriod: worldResync})
		Expect(err).NotTo(HaveOccurred())
		w.r = r

		res := w.reconcile(ctx, check)
		Expect(res.RequeueAfter).To(BeNumerically("<", time.Second), "the clock moved on during the reconcile")
		Expect(res.RequeueAfter).To(Equal(t0.Add(5 * time.Minute).Sub(clk.FakeClock.Now())))
	})
})

// A check deleted without a finalizer is found gone (NotFound): nothing of its status writes stays
// remembered, however many checks come and go in the manager's lifetime.
var _ = Describe("A deleted check", func() {
	It("leaves nothing of its status writes remembered", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "gone", &ref)
		w.reconcile(ctx, check)
		Expect(w.r.statuses.Remembers(client.ObjectKeyFromObject(check))).To(BeTrue(), "its status was written")

		Expect(k8s.Delete(ctx, check)).To(Succeed())
		_, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(check)})
		Expect(err).NotTo(HaveOccurred())
		Expect(w.r.statuses.Remembers(client.ObjectKeyFromObject(check))).To(BeFalse())
	})
})

// Condition not yet expired → nothing; expired → exactly one request with the contract's name, namespace,
// owner references, annotations and spec; node recovers → request deleted, after healthyDelay.
var _ = Describe("Detection", func() {
	It("creates exactly one request, as the contract says, when the condition expires, and deletes it healthyDelay after the Node recovers", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref, func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.HealthyDelay = &metav1.Duration{Duration: time.Minute}
		})
		sick := w.node(ctx, "w1", corev1.ConditionUnknown, t0)
		w.node(ctx, "w2", corev1.ConditionTrue, t0)

		// One second before the condition expires: nothing, and the next look is exactly at the expiry.
		w.clk.SetTime(t0.Add(5*time.Minute - time.Second))
		res := w.reconcile(ctx, check)
		Expect(res.RequeueAfter).To(Equal(time.Second))
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		Expect(*check.Status.ObservedNodes).To(Equal(int32(2)))
		Expect(*check.Status.HealthyNodes).To(Equal(int32(1)), "failing, not yet unhealthy: not healthy either (it counts against the budget)")
		Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseEnabled))

		createdBefore := testutil.ToFloat64(metrics.RemediationsCreated.WithLabelValues(metrics.CheckerNHC, "PowerCycleRemediation"))
		delaysBefore, delaySumBefore := detectionDelays()

		// At the expiry: exactly one request, as the contract says.
		w.clk.SetTime(t0.Add(5 * time.Minute))
		w.reconcile(ctx, check)
		emrs := w.remediations(ctx, pcRemediation, check)
		Expect(emrs).To(HaveLen(1))
		emr := emrs[0]
		Expect(emr.GetName()).To(Equal(sick.Name))
		Expect(emr.GetNamespace()).To(Equal(pcNS))
		Expect(emr.GetOwnerReferences()).To(Equal([]metav1.OwnerReference{
			{APIVersion: "v1", Kind: "Node", Name: sick.Name, UID: sick.UID},
			{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "NodeHealthCheck", Name: check.Name, UID: check.UID},
		}))
		Expect(emr.GetAnnotations()).To(Equal(map[string]string{
			template.AnnotationNodeName:            sick.Name,
			template.AnnotationTemplateName:        ref.Name,
			template.AnnotationClonedFromName:      ref.Name,
			template.AnnotationClonedFromGroupKind: "PowerCycleRemediationTemplate.remediation.metalheal.io",
		}))
		spec, _, _ := unstructured.NestedMap(emr.Object, "spec")
		Expect(spec).To(HaveKeyWithValue("strategy", "reboot"))
		Expect(spec).To(HaveKeyWithValue("powerOffTimeoutSeconds", int64(120)))

		Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
		Expect(*check.Status.HealthyNodes).To(Equal(int32(1)))
		Expect(check.Status.InFlightRemediations).To(HaveKey(sick.Name))
		Expect(check.Status.UnhealthyNodes).To(HaveLen(1))
		Expect(check.Status.UnhealthyNodes[0].Remediations).To(HaveLen(1))
		rem := check.Status.UnhealthyNodes[0].Remediations[0]
		Expect(rem.Kind).To(Equal("PowerCycleRemediation"))
		Expect(rem.APIVersion).To(Equal("remediation.metalheal.io/v1alpha1"))
		Expect(rem.Namespace).To(Equal(pcNS))
		Expect(rem.TemplateName).To(Equal(ref.Name))
		Expect(rem.Started.Time).To(BeTemporally("==", t0.Add(5*time.Minute)))
		Expect(w.leaseHolder(ctx, sick)).To(Equal(leaseHolder(check.Name)), "the lease is taken before the request is created")

		created := w.rec.With(EventRemediationCreated)
		Expect(created).To(HaveLen(1))
		Expect(created[0].Name).To(Equal(check.Name))
		Expect(created[0].Related).To(Equal(sick.Name))
		Expect(created[0].Note).To(ContainSubstring("Ready=Unknown for 5m0s"))
		Expect(testutil.ToFloat64(metrics.RemediationsCreated.WithLabelValues(metrics.CheckerNHC, "PowerCycleRemediation"))).To(Equal(createdBefore + 1))
		delays, delaySum := detectionDelays()
		Expect(delays).To(Equal(delaysBefore+1), "the detection delay is observed once")
		Expect(delaySum).To(Equal(delaySumBefore), "created at the exact expiry: zero delay")
		Expect(testutil.ToFloat64(metrics.UnhealthyTargets.WithLabelValues(metrics.CheckerNHC, check.Name))).To(Equal(1.0))

		// Reconciling again changes nothing.
		w.reconcile(ctx, check)
		again := w.remediations(ctx, pcRemediation, check)
		Expect(again).To(HaveLen(1))
		Expect(again[0].GetUID()).To(Equal(emr.GetUID()))

		// The node recovers: the request stays for healthyDelay.
		recovered := t0.Add(20 * time.Minute)
		w.setReady(ctx, sick, corev1.ConditionTrue, recovered)
		w.clk.SetTime(recovered)
		res = w.reconcile(ctx, check)
		Expect(res.RequeueAfter).To(Equal(time.Minute))
		Expect(w.remediations(ctx, pcRemediation, check)).To(HaveLen(1))
		Expect(entry(check, sick).ConditionsHealthyTimestamp.Time).To(BeTemporally("==", recovered))

		w.clk.SetTime(recovered.Add(time.Minute - time.Second))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(HaveLen(1))

		// healthyDelay over: deleted. Once it is gone the node is forgotten and the lease released.
		w.clk.SetTime(recovered.Add(time.Minute))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		Expect(w.rec.With(EventRemediationFinished)).To(HaveLen(1))
		w.reconcile(ctx, check)
		Expect(check.Status.UnhealthyNodes).To(BeEmpty())
		Expect(check.Status.InFlightRemediations).To(BeEmpty())
		Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseEnabled))
		Expect(w.leaseHolder(ctx, sick)).To(BeEmpty())
		w.reconcile(ctx, check)
		// Told once: the lease is gone with the request, its event is the record of its release (kubectl
		// metalheal timeline reads it).
		Expect(w.rec.With(EventNodeLeaseReleased)).To(HaveExactElements(testenv.Event{Kind: "NodeHealthCheck", Name: check.Name,
			Related: sick.Name, Type: corev1.EventTypeNormal, Reason: EventNodeLeaseReleased, Action: actionLease,
			Note: leaseNS + "/node-" + sick.Name + " deleted by its holder"}))
		Expect(testutil.ToFloat64(metrics.UnhealthyTargets.WithLabelValues(metrics.CheckerNHC, check.Name))).To(Equal(0.0))
	})
})

// The Cluster API book's examples, against the API server: percentages round down, remediation stops when
// the unhealthy nodes exceed the allowed number, and a storm is reported.
var _ = Describe("Unhealthy budget", func() {
	pct := intstr.FromString("40%")
	two := intstr.FromInt32(2)
	DescribeTable("the Cluster API book's examples",
		func(ctx SpecContext, max intstr.IntOrString, total, unhealthy, want int) {
			w := newWorld(ctx)
			ref := w.pcTemplate(ctx, "pc")
			check := w.check(ctx, "nhc", &ref, func(c *v1alpha1.NodeHealthCheck) { c.Spec.MaxUnhealthy = &max })
			for i := range total {
				status := corev1.ConditionTrue
				if i < unhealthy {
					status = corev1.ConditionFalse
				}
				w.node(ctx, string(rune('a'+i/10))+string(rune('0'+i%10)), status, t0)
			}
			w.clk.SetTime(t0.Add(time.Hour))
			w.reconcile(ctx, check)
			Expect(w.remediations(ctx, pcRemediation, check)).To(HaveLen(want))
			Expect(*check.Status.ObservedNodes).To(Equal(int32(total)))
			Expect(*check.Status.HealthyNodes).To(Equal(int32(total - unhealthy)))
			storm := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionStormActive)
			allowed := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionRemediationAllowed)
			if want > 0 {
				Expect(storm.Status).To(Equal(metav1.ConditionFalse))
				Expect(allowed.Status).To(Equal(metav1.ConditionTrue))
				return
			}
			Expect(storm.Status).To(Equal(metav1.ConditionTrue))
			Expect(allowed.Status).To(Equal(metav1.ConditionFalse))
			Expect(allowed.Reason).To(Equal(v1alpha1.ReasonTooManyUnhealthy))
			Expect(w.rec.With(EventRemediationShortCircuited)).To(HaveLen(1))
		},
		Entry("25 nodes, 40%: 10 unhealthy are remediated", pct, 25, 10, 10),
		Entry("25 nodes, 40%: 11 unhealthy short-circuit", pct, 25, 11, 0),
		Entry("6 nodes, 40%: 2 unhealthy are remediated", pct, 6, 2, 2),
		Entry("6 nodes, 40%: 3 unhealthy short-circuit", pct, 6, 3, 0),
		Entry("absolute 2: 2 unhealthy are remediated", two, 5, 2, 2),
		Entry("absolute 2: 3 unhealthy short-circuit", two, 5, 3, 0),
	)
})

// A storm stops remediation and sets StormActive; remediation resumes only after stormCooldownDuration.
var _ = Describe("Storm", func() {
	It("stops remediation and sets StormActive; remediation resumes only after stormCooldownDuration", func(ctx SpecContext) {
		w := newWorld(ctx)
		pct := intstr.FromString("40%")
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref, func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.MaxUnhealthy = &pct
			c.Spec.StormCooldownDuration = &metav1.Duration{Duration: 2 * time.Minute}
		})
		bad := []*corev1.Node{w.node(ctx, "b0", corev1.ConditionFalse, t0), w.node(ctx, "b1", corev1.ConditionFalse, t0), w.node(ctx, "b2", corev1.ConditionFalse, t0)}
		for _, n := range []string{"g0", "g1", "g2"} {
			w.node(ctx, n, corev1.ConditionTrue, t0)
		}

		w.clk.SetTime(t0.Add(time.Hour))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		storm := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionStormActive)
		Expect(storm.Status).To(Equal(metav1.ConditionTrue))
		Expect(storm.Reason).To(Equal(v1alpha1.ReasonTooManyUnhealthy))
		Expect(check.Status.Reason).To(ContainSubstring("short-circuited"))

		// One node recovers: within budget again, but cooling down.
		ended := t0.Add(time.Hour + time.Minute)
		w.setReady(ctx, bad[0], corev1.ConditionTrue, ended)
		w.clk.SetTime(ended)
		res := w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		storm = meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionStormActive)
		Expect(storm.Status).To(Equal(metav1.ConditionTrue))
		Expect(storm.Reason).To(Equal(v1alpha1.ReasonStormCooldown))
		Expect(res.RequeueAfter).To(Equal(2 * time.Minute))
		Expect(w.rec.With(EventStormCooldown)).To(HaveLen(1))

		w.clk.SetTime(ended.Add(2*time.Minute - time.Second))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())

		// Cooldown over: the two still unhealthy nodes are remediated.
		w.clk.SetTime(ended.Add(2 * time.Minute))
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{bad[1].Name, bad[2].Name}))
		Expect(meta.IsStatusConditionFalse(check.Status.Conditions, v1alpha1.ConditionStormActive)).To(BeTrue())
		Expect(w.rec.With(EventStormEnded)).To(HaveLen(1))
	})
})

// A third-party remediation kind, defined only by this test's CRD, is driven the same way.
var _ = Describe("A third-party remediation kind", func() {
	It("is driven the same way, from a template of a CRD only the test defines", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.fenceTemplate(ctx, "fence", map[string]any{"template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"team": "ops"}},
			"spec":     map[string]any{"mode": "hard", "delaySeconds": int64(5)},
		}})
		check := w.check(ctx, "nhc", &ref)
		sick := w.node(ctx, "w1", corev1.ConditionFalse, t0)
		w.node(ctx, "w2", corev1.ConditionTrue, t0)

		w.clk.SetTime(t0.Add(5 * time.Minute))
		w.reconcile(ctx, check)
		emrs := w.remediations(ctx, fenceRemediation, check)
		Expect(emrs).To(HaveLen(1))
		emr := emrs[0]
		Expect(emr.GetName()).To(Equal(sick.Name))
		Expect(emr.GetNamespace()).To(Equal(fenceNS))
		Expect(emr.GetLabels()).To(Equal(map[string]string{"team": "ops"}))
		Expect(emr.GetAnnotations()).To(HaveKeyWithValue(template.AnnotationClonedFromGroupKind, "FenceRemediationTemplate.fence.example.com"))
		Expect(emr.GetAnnotations()).To(HaveKeyWithValue(template.AnnotationNodeName, sick.Name))
		Expect(emr.GetOwnerReferences()).To(HaveLen(2))
		spec, _, _ := unstructured.NestedMap(emr.Object, "spec")
		Expect(spec).To(Equal(map[string]any{"mode": "hard", "delaySeconds": int64(5)}))
		Expect(check.Status.UnhealthyNodes[0].Remediations[0].Kind).To(Equal("FenceRemediation"))

		w.setReady(ctx, sick, corev1.ConditionTrue, t0.Add(10*time.Minute))
		w.clk.SetTime(t0.Add(10 * time.Minute))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, fenceRemediation, check)).To(BeEmpty())
	})
})

func escalating(steps ...v1alpha1.EscalatingRemediation) func(*v1alpha1.NodeHealthCheck) {
	return func(c *v1alpha1.NodeHealthCheck) {
		c.Spec.RemediationTemplate = nil
		c.Spec.EscalatingRemediations = steps
	}
}

// Escalation: step 1 times out → marked timed out, step 2 created.
var _ = Describe("Escalation", func() {
	It("marks a step that times out and creates the next, looking again exactly at the timeout; the last one timing out exhausts the Node", func(ctx SpecContext) {
		w := newWorld(ctx)
		pc := w.pcTemplate(ctx, "pc")
		fence := w.fenceTemplate(ctx, "fence", map[string]any{"template": map[string]any{"spec": map[string]any{"mode": "hard"}}})
		check := w.check(ctx, "nhc", nil, escalating(
			v1alpha1.EscalatingRemediation{RemediationTemplate: fence, Order: 10, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
			v1alpha1.EscalatingRemediation{RemediationTemplate: pc, Order: 1, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
		))
		sick := w.node(ctx, "w1", corev1.ConditionUnknown, t0)

		start := t0.Add(5 * time.Minute)
		w.clk.SetTime(start)
		res := w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{sick.Name}), "the lowest order goes first")
		Expect(w.remediations(ctx, fenceRemediation, check)).To(BeEmpty())
		Expect(res.RequeueAfter).To(Equal(5*time.Minute), "look again exactly when the step times out")

		w.clk.SetTime(start.Add(5*time.Minute - time.Second))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, fenceRemediation, check)).To(BeEmpty())

		timedOut := start.Add(5 * time.Minute)
		w.clk.SetTime(timedOut)
		w.reconcile(ctx, check)
		first := w.remediations(ctx, pcRemediation, check)
		Expect(first).To(HaveLen(1))
		Expect(first[0].GetAnnotations()).To(HaveKeyWithValue(template.AnnotationTimedOut, timedOut.Format(time.RFC3339)))
		Expect(names(w.remediations(ctx, fenceRemediation, check))).To(Equal([]string{sick.Name}))
		rems := entry(check, sick).Remediations
		Expect(rems).To(HaveLen(2))
		Expect(rems[0].Kind).To(Equal("PowerCycleRemediation"))
		Expect(rems[0].TimedOut.Time).To(BeTemporally("==", timedOut))
		Expect(rems[1].Kind).To(Equal("FenceRemediation"))
		Expect(rems[1].TimedOut).To(BeNil())
		Expect(w.rec.With(EventRemediationTimedOut)).To(HaveLen(1))
		Expect(w.rec.With(EventRemediationCreated)[1].Note).To(ContainSubstring("escalation step 2 of 2"))

		// The last step times out too: exhausted, nothing more is created.
		w.clk.SetTime(timedOut.Add(10 * time.Minute))
		w.reconcile(ctx, check)
		Expect(w.rec.With(EventRemediationsExhausted)).To(HaveLen(1))
		Expect(w.remediations(ctx, fenceRemediation, check)[0].GetAnnotations()).To(HaveKey(template.AnnotationTimedOut))
		Expect(w.remediations(ctx, pcRemediation, check)).To(HaveLen(1))
		Expect(w.remediations(ctx, fenceRemediation, check)).To(HaveLen(1))
	})
})

// Escalation: Succeeded=False escalates at once, without waiting for the timeout.
var _ = Describe("Escalation", func() {
	It("escalates at once when a request reports Succeeded=False, without waiting for the timeout; the lease stays", func(ctx SpecContext) {
		w := newWorld(ctx)
		pc := w.pcTemplate(ctx, "pc")
		fence := w.fenceTemplate(ctx, "fence", map[string]any{"template": map[string]any{"spec": map[string]any{"mode": "hard"}}})
		check := w.check(ctx, "nhc", nil, escalating(
			v1alpha1.EscalatingRemediation{RemediationTemplate: pc, Order: 1, Timeout: metav1.Duration{Duration: 30 * time.Minute}},
			v1alpha1.EscalatingRemediation{RemediationTemplate: fence, Order: 2, Timeout: metav1.Duration{Duration: 30 * time.Minute}},
		))
		sick := w.node(ctx, "w1", corev1.ConditionFalse, t0)

		w.clk.SetTime(t0.Add(5 * time.Minute))
		w.reconcile(ctx, check)
		first := w.remediations(ctx, pcRemediation, check)
		Expect(first).To(HaveLen(1))

		w.setSucceeded(ctx, &first[0], metav1.ConditionFalse)
		w.clk.SetTime(t0.Add(6 * time.Minute))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)[0].GetAnnotations()).To(HaveKeyWithValue(template.AnnotationTimedOut, t0.Add(6*time.Minute).Format(time.RFC3339)))
		Expect(names(w.remediations(ctx, fenceRemediation, check))).To(Equal([]string{sick.Name}))
		Expect(w.rec.With(EventRemediationFailed)).To(HaveLen(1))
		Expect(w.leaseHolder(ctx, sick)).To(Equal(leaseHolder(check.Name)), "the lease stays through the escalation")
	})
})

// Two overlapping checks: one request; the newer check skips the node and says so in status and an event.
var _ = Describe("Overlapping checks", func() {
	It("make one request: the newer check skips the Node and says so in status and an event, once", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		older := w.check(ctx, "a", &ref)
		newer := w.check(ctx, "b", &ref)
		Expect(older.CreationTimestamp.After(newer.CreationTimestamp.Time)).To(BeFalse())
		sick := w.node(ctx, "w1", corev1.ConditionFalse, t0)
		w.clk.SetTime(t0.Add(time.Hour))

		// The newer check looks first, and still leaves the node to the older one.
		w.reconcile(ctx, newer)
		Expect(w.remediations(ctx, pcRemediation, newer)).To(BeEmpty())
		e := entry(newer, sick)
		Expect(e).NotTo(BeNil())
		Expect(e.SkipReason).To(Equal(SkipOwnedByOtherCheck))
		Expect(e.SkipMessage).To(ContainSubstring("NodeHealthCheck " + older.Name))
		skipped := w.rec.With(EventSkippedOwnedByOtherCheck)
		Expect(skipped).To(HaveLen(1))
		Expect(skipped[0].Name).To(Equal(newer.Name))
		Expect(skipped[0].Related).To(Equal(sick.Name))

		w.reconcile(ctx, older)
		w.reconcile(ctx, newer)
		Expect(names(w.remediations(ctx, pcRemediation, older))).To(Equal([]string{sick.Name}))
		Expect(w.remediations(ctx, pcRemediation, newer)).To(BeEmpty())
		Expect(listKind(ctx, pcRemediation)).To(ContainElement(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("name", sick.Name)))))
		Expect(entry(newer, sick).SkipReason).To(Equal(SkipOwnedByOtherCheck))
		Expect(w.rec.With(EventSkippedOwnedByOtherCheck)).To(HaveLen(1), "reported once, not on every reconcile")
		Expect(newer.Status.InFlightRemediations).To(BeEmpty())
		Expect(older.Status.InFlightRemediations).To(HaveKey(sick.Name))
	})
})

// A lease held by node maintenance: no request, an event naming the holder; released → proceeds.
var _ = Describe("Node leases", func() {
	It("leave a Node alone while node maintenance holds its lease, naming the holder, and proceed once it is released", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref)
		sick := w.node(ctx, "w1", corev1.ConditionFalse, t0)
		now := t0.Add(time.Hour)
		w.clk.SetTime(now)

		maintenance := w.maintenance()
		Expect(maintenance.RequestLease(ctx, sick, time.Hour)).To(Succeed())

		res := w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		Expect(entry(check, sick).SkipReason).To(Equal(SkipLeaseHeldByOther))
		Expect(entry(check, sick).SkipMessage).To(ContainSubstring(`"node-maintenance"`))
		held := w.rec.With(EventSkippedLeaseHeld)
		Expect(held).To(HaveLen(1))
		Expect(held[0].Note).To(ContainSubstring(`"node-maintenance"`))
		Expect(res.RequeueAfter).To(Equal(time.Hour+time.Second), "look again when the lease runs out")
		Expect(w.leaseHolder(ctx, sick)).To(Equal("node-maintenance"))

		Expect(maintenance.InvalidateLease(ctx, sick.Name)).To(Succeed())
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{sick.Name}))
		Expect(w.leaseHolder(ctx, sick)).To(Equal(leaseHolder(check.Name)))
		Expect(entry(check, sick).SkipReason).To(BeEmpty())
	})
})

// Two control-plane nodes unhealthy: one at a time.
var _ = Describe("Control-plane Nodes", func() {
	It("are remediated one at a time", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref)
		first := w.node(ctx, "cp1", corev1.ConditionUnknown, t0, labelControlPlane, "")
		second := w.node(ctx, "cp2", corev1.ConditionUnknown, t0.Add(time.Minute), labelControlPlane, "")

		w.clk.SetTime(t0.Add(time.Hour))
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{first.Name}))
		Expect(w.remediations(ctx, pcRemediation, check)[0].GetLabels()).To(HaveKeyWithValue(template.LabelControlPlane, ""),
			"labelled as medik8s' NodeHealthCheck labels a control-plane node's request")
		Expect(entry(check, second).SkipReason).To(Equal(SkipControlPlaneBusy))
		Expect(w.rec.With(EventSkippedControlPlaneBusy)).To(HaveLen(1))

		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(HaveLen(1))

		// The first recovers; its request goes, and only then the second is remediated.
		w.setReady(ctx, first, corev1.ConditionTrue, t0.Add(time.Hour))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{second.Name}))
		Expect(entry(check, second).SkipReason).To(BeEmpty())
	})
})

// A missing or malformed template disables the check with a reason and an event; it recovers by itself.
var _ = Describe("A missing or malformed template", func() {
	It("disables the check while the template object is missing, and enables it once it appears", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := v1alpha1.TemplateReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediationTemplate", Name: w.pool + "-pc", Namespace: pcNS}
		check := w.check(ctx, "nhc", &ref)
		sick := w.node(ctx, "w1", corev1.ConditionFalse, t0)
		w.clk.SetTime(t0.Add(time.Hour))

		w.reconcile(ctx, check)
		Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseDisabled))
		Expect(check.Status.Reason).To(ContainSubstring("not found"))
		disabled := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionDisabled)
		Expect(disabled.Status).To(Equal(metav1.ConditionTrue))
		Expect(disabled.Reason).To(Equal(v1alpha1.ReasonTemplateNotFound))
		Expect(w.rec.With(EventDisabled)).To(HaveLen(1))
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())

		w.pcTemplate(ctx, "pc")
		w.reconcile(ctx, check)
		Expect(meta.IsStatusConditionFalse(check.Status.Conditions, v1alpha1.ConditionDisabled)).To(BeTrue())
		Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
		Expect(w.rec.With(EventEnabled)).To(HaveLen(1))
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{sick.Name}))
	})

	It("disables the check while the template is malformed, and enables it once it is fixed", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.fenceTemplate(ctx, "fence", map[string]any{"mode": "hard"}) // no spec.template
		check := w.check(ctx, "nhc", &ref)
		w.node(ctx, "w1", corev1.ConditionFalse, t0)
		w.clk.SetTime(t0.Add(time.Hour))

		w.reconcile(ctx, check)
		disabled := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionDisabled)
		Expect(disabled.Reason).To(Equal(v1alpha1.ReasonTemplateInvalid))
		Expect(disabled.Message).To(ContainSubstring("spec.template is missing"))
		Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseDisabled))
		Expect(w.remediations(ctx, fenceRemediation, check)).To(BeEmpty())

		tpl := &unstructured.Unstructured{}
		tpl.SetGroupVersionKind(schema.GroupVersionKind{Group: "fence.example.com", Version: "v1", Kind: "FenceRemediationTemplate"})
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: fenceNS, Name: ref.Name}, tpl)).To(Succeed())
		Expect(unstructured.SetNestedMap(tpl.Object, map[string]any{"template": map[string]any{"spec": map[string]any{"mode": "hard"}}}, "spec")).To(Succeed())
		Expect(k8s.Update(ctx, tpl)).To(Succeed())
		w.reconcile(ctx, check)
		Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
		Expect(w.remediations(ctx, fenceRemediation, check)).To(HaveLen(1))
	})

	It("disables the check while the template's kind is not installed, looking again later, and enables it once it is", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := v1alpha1.TemplateReference{APIVersion: "late.example.com/v1", Kind: "LateRemediationTemplate", Name: w.pool + "-late", Namespace: fenceNS}
		check := w.check(ctx, "nhc", &ref)
		sick := w.node(ctx, "w1", corev1.ConditionFalse, t0)
		w.clk.SetTime(t0.Add(time.Hour))

		res := w.reconcile(ctx, check)
		disabled := meta.FindStatusCondition(check.Status.Conditions, v1alpha1.ConditionDisabled)
		Expect(disabled.Reason).To(Equal(v1alpha1.ReasonTemplateNotFound))
		Expect(disabled.Message).To(ContainSubstring("not installed"))
		Expect(res.RequeueAfter).To(Equal(DefaultKindRetryPeriod), "no watch reports a new CRD: look again later")

		_, err := envtest.InstallCRDs(restCfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "late")}})
		Expect(err).NotTo(HaveOccurred())
		tpl := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": ref.APIVersion, "kind": ref.Kind,
			"metadata": map[string]any{"name": ref.Name, "namespace": ref.Namespace},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{}}},
		}}
		w.create(ctx, tpl)
		w.reconcile(ctx, check)
		Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
		late := w.remediations(ctx, schema.GroupVersionKind{Group: "late.example.com", Version: "v1", Kind: "LateRemediation"}, check)
		Expect(names(late)).To(Equal([]string{sick.Name}))
		for i := range late {
			_ = k8s.Delete(context.Background(), &late[i])
		}
	})
})

// pauseRequests stop new remediation; the exclude label keeps a node away from it.
var _ = Describe("Pause and exclusion", func() {
	It("pauseRequests stop new remediation; the exclude label keeps a Node away from it", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref, func(c *v1alpha1.NodeHealthCheck) { c.Spec.PauseRequests = []string{"cluster upgrade"} })
		sick := w.node(ctx, "w1", corev1.ConditionFalse, t0)
		excluded := w.node(ctx, "w2", corev1.ConditionFalse, t0, v1alpha1.LabelExcludeFromRemediation, "true")
		w.clk.SetTime(t0.Add(time.Hour))

		w.reconcile(ctx, check)
		Expect(check.Status.Phase).To(Equal(v1alpha1.PhasePaused))
		Expect(check.Status.Reason).To(ContainSubstring("cluster upgrade"))
		Expect(meta.IsStatusConditionTrue(check.Status.Conditions, v1alpha1.ConditionPaused)).To(BeTrue())
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		Expect(w.rec.With(EventPaused)).To(HaveLen(1))

		check.Spec.PauseRequests = nil
		Expect(k8s.Update(ctx, check)).To(Succeed())
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{sick.Name}))
		Expect(entry(check, excluded).SkipReason).To(Equal(SkipExcluded))
		Expect(w.rec.With(EventSkippedExcluded)).To(HaveLen(1))
		Expect(w.rec.With(EventUnpaused)).To(HaveLen(1))
		Expect(check.Status.Phase).To(Equal(v1alpha1.PhaseRemediating))
	})
})

// A control-plane node someone else holds (node maintenance) counts as the one control-plane node down.
var _ = Describe("Control-plane Nodes", func() {
	It("count one someone else holds (node maintenance) as the one control-plane Node down", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref)
		drained := w.node(ctx, "cp1", corev1.ConditionTrue, t0, labelControlPlane, "")
		sick := w.node(ctx, "cp2", corev1.ConditionUnknown, t0, labelControlPlane, "")
		now := t0.Add(time.Hour)
		w.clk.SetTime(now)
		maintenance := w.maintenance()
		Expect(maintenance.RequestLease(ctx, drained, time.Hour)).To(Succeed())

		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		Expect(entry(check, sick).SkipReason).To(Equal(SkipControlPlaneBusy))
		Expect(entry(check, sick).SkipMessage).To(ContainSubstring(drained.Name))

		Expect(maintenance.InvalidateLease(ctx, drained.Name)).To(Succeed())
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{sick.Name}))
	})
})

// One control-plane node at a time holds across checks too.
var _ = Describe("Control-plane Nodes", func() {
	It("are remediated one at a time across checks too", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		byZone := func(zone string) func(*v1alpha1.NodeHealthCheck) {
			return func(c *v1alpha1.NodeHealthCheck) {
				c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": w.pool, "zone": zone}}
			}
		}
		first := w.check(ctx, "zone-a", &ref, byZone("a"))
		second := w.check(ctx, "zone-b", &ref, byZone("b"))
		cpA := w.node(ctx, "cp-a", corev1.ConditionUnknown, t0, labelControlPlane, "", "zone", "a")
		cpB := w.node(ctx, "cp-b", corev1.ConditionUnknown, t0, labelControlPlane, "", "zone", "b")
		w.clk.SetTime(t0.Add(time.Hour))

		w.reconcile(ctx, first)
		w.reconcile(ctx, second)
		Expect(names(w.remediations(ctx, pcRemediation, first))).To(Equal([]string{cpA.Name}))
		Expect(w.remediations(ctx, pcRemediation, second)).To(BeEmpty())
		Expect(entry(second, cpB).SkipReason).To(Equal(SkipControlPlaneBusy))
		Expect(entry(second, cpB).SkipMessage).To(ContainSubstring(cpA.Name))
	})
})

// writeThrough makes w's reconciler use a direct client to the test API server whose calls go through
// funcs; its live reads (the API reader) do not.
func (w *world) writeThrough(funcs interceptor.Funcs) {
	GinkgoHelper()
	direct, err := client.NewWithWatch(restCfg, client.Options{Scheme: k8s.Scheme(), Mapper: k8s.RESTMapper()})
	Expect(err).NotTo(HaveOccurred())
	r, err := New(Options{Client: interceptor.NewClient(direct, funcs), APIReader: direct, Clock: w.clk, Recorder: w.rec,
		LeaseNamespace: leaseNS, ResyncPeriod: worldResync})
	Expect(err).NotTo(HaveOccurred())
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
	GinkgoHelper()
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
var _ = Describe("Write order", func() {
	It("creates a PowerCycleRemediation before taking the lease; a request of any other kind waits for the lease", func(ctx SpecContext) {
		w := newWorld(ctx)
		order := w.createOrder(nil)
		check, sick := w.pcCheckWithSickNode(ctx)
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{sick.Name}))
		Expect(w.leaseHolder(ctx, sick)).To(Equal(leaseHolder(check.Name)))
		Expect(*order).To(Equal([]string{"PowerCycleRemediation", "Lease"}))

		w = newWorld(ctx)
		order = w.createOrder(nil)
		fence := w.fenceTemplate(ctx, "fence", map[string]any{"template": map[string]any{"spec": map[string]any{}}})
		check = w.check(ctx, "nhc", &fence)
		sick = w.node(ctx, "w1", corev1.ConditionFalse, t0)
		w.clk.SetTime(t0.Add(time.Hour))
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, fenceRemediation, check))).To(Equal([]string{sick.Name}))
		Expect(*order).To(Equal([]string{"Lease", "FenceRemediation"}))
	})
})

// In a burst of failures every PowerCycleRemediation goes out before any of their leases is written.
// The requests after the first hold their return for a moment, as a busy API server would: a lease
// written meanwhile (the first request's, taken at once) would land between them.
var _ = Describe("Write order", func() {
	It("sends every PowerCycleRemediation of a burst before any of their leases", func(ctx SpecContext) {
		w := newWorld(ctx)
		pc := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &pc)
		sick := []*corev1.Node{w.node(ctx, "w1", corev1.ConditionFalse, t0), w.node(ctx, "w2", corev1.ConditionFalse, t0), w.node(ctx, "w3", corev1.ConditionFalse, t0)}
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

		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(ConsistOf(sick[0].Name, sick[1].Name, sick[2].Name))
		for _, n := range sick {
			Expect(w.leaseHolder(ctx, n)).To(Equal(leaseHolder(check.Name)))
		}
		Expect(*order).To(Equal([]string{"PowerCycleRemediation", "PowerCycleRemediation", "PowerCycleRemediation", "Lease", "Lease", "Lease"}))
	})
})

// Node maintenance takes the lease between the check's look at the cache and its lease request, just
// after the PowerCycleRemediation went out: the request is deleted again and the Node skipped, as if the
// check had seen the lease first.
var _ = Describe("Node leases", func() {
	It("taken by node maintenance just after the request went out: the request is deleted again and the Node skipped", func(ctx SpecContext) {
		w := newWorld(ctx)
		check, sick := w.pcCheckWithSickNode(ctx)
		maintenance := w.maintenance()
		w.createOrder(func(kind string) {
			defer GinkgoRecover() // the reconcile writes from goroutines of its own
			if kind == "PowerCycleRemediation" {
				Expect(maintenance.RequestLease(ctx, sick, time.Hour)).To(Succeed())
			}
		})

		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty(), "deleted again")
		Expect(w.leaseHolder(ctx, sick)).To(Equal("node-maintenance"))
		Expect(entry(check, sick).SkipReason).To(Equal(SkipLeaseHeldByOther))
		Expect(entry(check, sick).Remediations).To(BeEmpty())
	})
})

// The remediator of the check's own PowerCycleRemediation takes the Node's lease between the request
// going out and the check's lease request: the check takes the lease over from it, so that the check
// holds the Node for all its steps, as it does when it wins. A lease its request's remediator holds when
// the check next looks is taken over too; one held by anyone else is left alone.
var _ = Describe("Node leases", func() {
	It("taken by the check's own request's remediator are taken over; anyone else's are left alone", func(ctx SpecContext) {
		w := newWorld(ctx)
		check, sick := w.pcCheckWithSickNode(ctx)
		remediator := w.leaseManager("PowerCycleRemediation-" + sick.Name)
		w.createOrder(func(kind string) {
			defer GinkgoRecover() // the reconcile writes from goroutines of its own
			if kind == "PowerCycleRemediation" {
				Expect(remediator.RequestLease(ctx, sick, time.Hour)).To(Succeed())
			}
		})
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{sick.Name}))
		Expect(w.leaseHolder(ctx, sick)).To(Equal(leaseHolder(check.Name)))
		Expect(entry(check, sick).SkipReason).To(BeEmpty())

		// The manager stops after the request went out, before its lease; the remediator takes the lease.
		ours := w.leaseManager(leaseHolder(check.Name))
		w.clk.Step(time.Minute)
		Expect(ours.InvalidateLease(ctx, sick.Name)).To(Succeed())
		Expect(remediator.RequestLease(ctx, sick, time.Hour)).To(Succeed())
		w.restart()
		w.reconcile(ctx, check)
		Expect(w.leaseHolder(ctx, sick)).To(Equal(leaseHolder(check.Name)), "taken over at the first look")

		w.clk.Step(time.Minute)
		Expect(ours.InvalidateLease(ctx, sick.Name)).To(Succeed())
		Expect(w.maintenance().RequestLease(ctx, sick, time.Hour)).To(Succeed())
		w.reconcile(ctx, check)
		Expect(w.leaseHolder(ctx, sick)).To(Equal("node-maintenance"), "someone else's lease is not taken")
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{sick.Name}), "the running remediation is not interrupted")
	})
})

// A negative healthyDelay (medik8s' rule): a Node healthy again keeps its request until a person
// annotates it confirmed healthy; the annotation is then removed, so that it confirms only this
// remediation.
var _ = Describe("A negative healthyDelay", func() {
	It("keeps a recovered Node's request until a person confirms it healthy, then removes the confirmation", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref, func(c *v1alpha1.NodeHealthCheck) { c.Spec.HealthyDelay = &metav1.Duration{Duration: -time.Second} })
		sick := w.node(ctx, "w1", corev1.ConditionUnknown, t0)
		w.clk.SetTime(t0.Add(10 * time.Minute))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(HaveLen(1))

		// Ready again, for days: the request stays, an event says what it waits for (once).
		w.setReady(ctx, sick, corev1.ConditionTrue, t0.Add(20*time.Minute))
		w.clk.SetTime(t0.Add(20 * time.Minute))
		res := w.reconcile(ctx, check)
		Expect(res.RequeueAfter).To(Equal(worldResync), "no deadline: only the resync")
		w.clk.SetTime(t0.Add(72 * time.Hour))
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(HaveLen(1))
		Expect(w.rec.With(EventWaitingForConfirmation)).To(ConsistOf(HaveField("Note",
			ContainSubstring(v1alpha1.AnnotationConfirmedHealthy))))
		Expect(w.leaseHolder(ctx, sick)).NotTo(BeEmpty(), "the Node stays held while its remediation is kept")

		// A person confirms it: the request goes, then the confirmation.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sick), sick)).To(Succeed())
		metav1.SetMetaDataAnnotation(&sick.ObjectMeta, v1alpha1.AnnotationConfirmedHealthy, "")
		Expect(k8s.Update(ctx, sick)).To(Succeed())
		w.reconcile(ctx, check)
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		w.reconcile(ctx, check)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sick), sick)).To(Succeed())
		Expect(sick.Annotations).NotTo(HaveKey(v1alpha1.AnnotationConfirmedHealthy))
		Expect(check.Status.UnhealthyNodes).To(BeEmpty())
	})
})

// A check in dry run decides everything and starts nothing: the Nodes it would remediate are in its
// status (skipReason DryRun, and what it would create), in one WouldRemediate event each, and in the
// would-remediate gauge; no request, no lease. Turned off, it remediates them.
var _ = Describe("Dry run", func() {
	It("decides everything and starts nothing: the status, an event and the gauge say what it would do; turned off, it remediates", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref, func(c *v1alpha1.NodeHealthCheck) { c.Spec.DryRun = true })
		a := w.node(ctx, "a", corev1.ConditionUnknown, t0)
		b := w.node(ctx, "b", corev1.ConditionFalse, t0)
		w.node(ctx, "c", corev1.ConditionTrue, t0)
		w.clk.SetTime(t0.Add(time.Hour))
		w.reconcile(ctx, check)
		w.reconcile(ctx, check)

		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		Expect(w.leaseHolder(ctx, a) + w.leaseHolder(ctx, b)).To(BeEmpty())
		for _, n := range []*corev1.Node{a, b} {
			e := entry(check, n)
			Expect(e).NotTo(BeNil())
			Expect(e.SkipReason).To(Equal(engine.SkipDryRun))
			Expect(e.SkipMessage).To(ContainSubstring("would create PowerCycleRemediation metalheal-system/" + n.Name))
		}
		Expect(w.rec.With(engine.EventWouldRemediate)).To(HaveLen(2), "once per Node")
		Expect(CheckState(check, w.clk.Now()).WouldRemediate).To(Equal(2))

		// Acting for real: the same Nodes are remediated.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(check), check)).To(Succeed())
		check.Spec.DryRun = false
		Expect(k8s.Update(ctx, check)).To(Succeed())
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(ConsistOf(a.Name, b.Name))
	})
})
