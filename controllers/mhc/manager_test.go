package mhc

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
)

// The controller as the manager runs it: every reaction below comes from a watch (Machines, local Nodes,
// a workload cluster's Nodes, remediation requests), not from a direct call. Eventually is used because
// a real manager runs.
var _ = Describe("Running in a manager", func() {
	It("reacts to Machine, Node (local and remote), lease and remediation request events", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.runManager(ctx, testenv.ManagerOptions{}, Options{})

		// A workload cluster checked with a template, a local pool checked with conditions.
		Expect(k8s.Create(ctx, newCluster(w.ns, "wl"))).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wl-kubeconfig", Namespace: w.ns},
			Data: map[string][]byte{"value": workloadEnv.KubeConfig}})).To(Succeed())
		w.createTemplate(ctx, "reboot", "reboot")
		remoteNode := w.createNode(ctx, workloadK8s, w.nodeName("r"), corev1.ConditionUnknown, time.Hour)
		w.createMachine(ctx, "remote-m", withCluster("wl"), withLabels("pool", "r"), withNodeRef(remoteNode.Name))
		w.createCheck(ctx, "remote", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.ClusterName = "wl"
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "r"}
			mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot"))
		})
		localNode := w.createNode(ctx, k8s, w.nodeName("l"), corev1.ConditionTrue, time.Hour)
		w.createCheck(ctx, "local", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "l"} })
		w.createMachine(ctx, "local-m", withLabels("pool", "l"), withNodeRef(localNode.Name))

		By("both checks run")
		var firstUID types.UID
		Eventually(func(g Gomega) {
			emrs := w.powerCycleRemediations(ctx)
			g.Expect(emrs).To(HaveLen(1))
			firstUID = emrs[0].GetUID()
			g.Expect(condition(w.machine(ctx, "local-m"), clusterv1.MachineHealthCheckSucceededCondition)).To(
				haveCondition(metav1.ConditionTrue, clusterv1.MachineHealthCheckSucceededReason))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())

		By("a remediation request deleted behind the check's back is recreated (request watch)")
		emr := w.powerCycleRemediations(ctx)[0]
		Expect(k8s.Delete(ctx, &emr)).To(Succeed())
		Eventually(func(g Gomega) {
			emrs := w.powerCycleRemediations(ctx)
			g.Expect(emrs).To(HaveLen(1))
			g.Expect(emrs[0].GetUID()).NotTo(Equal(firstUID))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())

		By("a local Node goes NotReady (local Node watch)")
		w.setReady(ctx, k8s, localNode, corev1.ConditionUnknown, time.Hour)
		Eventually(func(g Gomega) {
			g.Expect(condition(w.machine(ctx, "local-m"), clusterv1.MachineOwnerRemediatedCondition)).To(
				haveCondition(metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())

		By("node maintenance lets go of a failing Node's lease (lease watch): the check acts at once, not at the lease's end")
		heldNode := w.createNode(ctx, k8s, w.nodeName("h"), corev1.ConditionTrue, time.Hour)
		maintenance := w.leaseManager("node-maintenance")
		Expect(maintenance.RequestLease(ctx, heldNode, time.Hour)).To(Succeed())
		w.createMachine(ctx, "held-m", withLabels("pool", "l"), withNodeRef(heldNode.Name))
		w.setReady(ctx, k8s, heldNode, corev1.ConditionUnknown, time.Hour)
		Eventually(func(g Gomega) {
			e := entryOf(w.check(ctx, "local"), "held-m")
			g.Expect(e).NotTo(BeNil())
			g.Expect(e.SkipReason).To(Equal(v1alpha1.ReasonLeaseHeldByOther))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
		Expect(maintenance.InvalidateLease(ctx, heldNode.Name)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(w.machine(ctx, "held-m"), clusterv1.MachineOwnerRemediatedCondition)).To(
				haveCondition(metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())

		By("the workload cluster's Node recovers (remote Node watch): the request is deleted")
		w.setReady(ctx, workloadK8s, remoteNode, corev1.ConditionTrue, 0)
		Eventually(func(g Gomega) {
			g.Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())

		By("a check naming a template not made yet is disabled; the template made, it remediates (template watch)")
		lateNode := w.createNode(ctx, k8s, w.nodeName("t"), corev1.ConditionUnknown, time.Hour)
		w.createMachine(ctx, "late-m", withLabels("pool", "t"), withNodeRef(lateNode.Name))
		w.createCheck(ctx, "late", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "t"}
			mhc.Spec.RemediationTemplate = ptr.To(templateRef("late"))
		})
		Eventually(func(g Gomega) {
			g.Expect(meta.FindStatusCondition(w.check(ctx, "late").Status.Conditions, v1alpha1.ConditionDisabled)).To(
				And(Not(BeNil()), HaveField("Reason", v1alpha1.ReasonTemplateNotFound)))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
		w.createTemplate(ctx, "late", "reboot")
		Eventually(func(g Gomega) {
			g.Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("name", "late-m")))))
			g.Expect(meta.IsStatusConditionFalse(w.check(ctx, "late").Status.Conditions, v1alpha1.ConditionDisabled)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
	})
})

var _ = Describe("ServedClusterAPIVersion", func() {
	It("tells a management cluster from a cluster without Cluster API", func() {
		Expect(ServedClusterAPIVersion(mgmtDiscovery)).To(Equal("v1beta2"))
		wl, err := discovery.NewDiscoveryClientForConfig(workloadEnv.Config)
		Expect(err).NotTo(HaveOccurred())
		Expect(ServedClusterAPIVersion(wl)).To(BeEmpty())
	})
})
