package mhc

import (
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/testenv"
)

// How a MachineHealthCheck watches its own kind, as a NodeHealthCheck does (engine.WatchChecks): it looks
// again at its own spec and annotations, not at its status, which is the record of its last pass; and it
// looks again at once when another check of its namespace changes what the overlapping rule reads of it,
// not at its next resync.
var _ = Describe("A check's watch of its own kind", func() {
	It("is not reconciled for a status write, its own or anyone's, and is for its annotations", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.runManager(ctx, testenv.ManagerOptions{}, Options{ResyncPeriod: worldResync})
		node := w.createNode(ctx, k8s, w.nodeName("m"), corev1.ConditionTrue, time.Hour)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		w.createCheck(ctx, "check")
		Eventually(func(g Gomega) {
			g.Expect(w.check(ctx, "check").Status.Targets).To(ConsistOf("m"))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
		Eventually(steady(reconciles)).WithPolling(time.Second).WithTimeout(eventuallyTimeout).Should(BeTrue(), "the check is quiet")

		By("the check is paused by its annotation: one reconcile, whose status write brings it back no more")
		base := reconciles()
		mhc := w.check(ctx, "check")
		orig := mhc.DeepCopy()
		metav1.SetMetaDataAnnotation(&mhc.ObjectMeta, clusterv1.PausedAnnotation, "")
		Expect(k8s.Patch(ctx, mhc, client.MergeFrom(orig))).To(Succeed())
		Eventually(func() bool {
			return meta.IsStatusConditionTrue(w.check(ctx, "check").Status.Conditions, v1alpha1.ConditionPaused)
		}).WithTimeout(eventuallyTimeout).Should(BeTrue(), "the annotation reaches the check, which writes Paused=True")
		// Counted once the reconcile returns, a moment after its status write is stored.
		Eventually(reconciles).WithTimeout(eventuallyTimeout).Should(BeNumerically(">", base))
		Consistently(reconciles).WithTimeout(2*time.Second).Should(Equal(base+1),
			"one reconcile for the annotation, none for the status write it made")

		By("someone else writes the check's status: the check is not reconciled")
		base = reconciles()
		mhc = w.check(ctx, "check")
		orig = mhc.DeepCopy()
		mhc.Status.CurrentHealthy = ptr.To(int32(7))
		Expect(k8s.Status().Patch(ctx, mhc, client.MergeFrom(orig))).To(Succeed())
		Consistently(reconciles).WithTimeout(2*time.Second).Should(Equal(base), "no reconcile for a status-only write")
	})

	It("looks again at once when a peer is created over its Machines, not at its resync", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.runManager(ctx, testenv.ManagerOptions{}, Options{ResyncPeriod: worldResync})
		node := w.createNode(ctx, k8s, w.nodeName("m"), corev1.ConditionUnknown, 0)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		w.createCheck(ctx, "existing", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.DryRun = true })
		Eventually(func(g Gomega) {
			g.Expect(w.check(ctx, "existing").Status.Targets).To(ConsistOf("m"))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
		Expect(entryOf(w.check(ctx, "existing"), "m")).To(BeNil(), "the Node has just gone NotReady: not unhealthy before 300s")
		Eventually(steady(reconciles)).WithPolling(time.Second).WithTimeout(eventuallyTimeout).Should(BeTrue(), "the check is quiet")

		By("the clock passes the Node's timeout: nothing tells the check, which looks again in five minutes")
		w.clock.Step(301 * time.Second)
		Consistently(func() *v1alpha1.UnhealthyMachine { return entryOf(w.check(ctx, "existing"), "m") }).
			WithTimeout(2*time.Second).Should(BeNil(), "no event reaches the check")

		By("a peer is created over the same Machines (paused: it writes nothing to them)")
		w.createCheck(ctx, "peer", func(mhc *v1alpha1.MachineHealthCheck) {
			metav1.SetMetaDataAnnotation(&mhc.ObjectMeta, clusterv1.PausedAnnotation, "")
		})
		Eventually(func(g Gomega) {
			e := entryOf(w.check(ctx, "existing"), "m")
			g.Expect(e).NotTo(BeNil())
			g.Expect(e.SkipReason).To(Equal(engine.SkipDryRun))
		}).WithTimeout(10*time.Second).Should(Succeed(),
			"the peer's creation brings the existing check, which finds the Machine unhealthy (the oldest check owns it)")
	})
})

// TestPeerStatus: the other checks read a check's Disabled condition and the Machines it records requests
// for, ended steps' included; a Machine it only reports, or skips, is not one it remediates.
func TestPeerStatus(t *testing.T) {
	req := []v1alpha1.RequestRecord{{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediation", TemplateName: "reboot"}}
	ended := []v1alpha1.RequestRecord{{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediation", TemplateName: "reboot",
		TimedOut: &metav1.Time{Time: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}}}
	mhc := &v1alpha1.MachineHealthCheck{Status: v1alpha1.MachineHealthCheckStatus{
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionTrue, Reason: "RemediationKindRefused"}},
		UnhealthyMachines: []v1alpha1.UnhealthyMachine{{Name: "m1", RemediationProgress: v1alpha1.RemediationProgress{Remediations: req}}, {Name: "m2", RemediationProgress: v1alpha1.RemediationProgress{SkipReason: "OwnedByOtherCheck"}},
			{Name: "m3", RemediationProgress: v1alpha1.RemediationProgress{Remediations: ended}}},
	}}
	NewWithT(t).Expect(peerStatus(mhc)).To(Equal(engine.PeerStatus{Disabled: true, Remediating: map[string]bool{"m1": true, "m3": true}}))
}
