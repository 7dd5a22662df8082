//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// escalateAfterTwo power-cycles twice, waiting 10s each time for the node, then escalates.
func escalateAfterTwo(s *v1alpha1.PowerCycleRemediationSpec) {
	s.Strategy = v1alpha1.StrategyEscalate
	s.DeleteAfterRetries = ptr.To[int32](2)
	s.PowerOnTimeoutSeconds = 10
}

var _ = Describe("A host that never comes back", func() {
	It("driven by a NodeHealthCheck: is power-cycled twice, then left powered off and fenced with Succeeded=False, and the check gives up on it", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "persistent-nhc"
		nodes := pool.take(ctx, group, 2)
		broken, bystander := nodes[0], nodes[1]
		reportOnFailure(start, nodes...)
		remediateGroup(ctx, group, 1, remediation(escalateAfterTwo))
		pcr := pcrKey(broken)
		pcrObj := "pcr/" + pcr.Namespace + "/" + pcr.Name

		By("the host breaks for good")
		Expect(h.Sim.InjectFault(broken, nodesim.FaultPersistent)).To(Succeed())

		By("two power cycles fail; the remediator escalates: the host is powered off, the node fenced, Succeeded=False")
		Eventually(func() bool { return tl.has(pcrObj, "Succeeded=False", start) }).
			WithContext(ctx).WithTimeout(remedyWait).WithPolling(poll).Should(BeTrue())
		failedAt := tl.at(pcrObj, "Succeeded=False", start)
		power := tl.before("power/"+broken, start, failedAt)
		Expect(power).NotTo(BeEmpty())
		Expect(power[len(power)-1].What).To(Equal(string(redfishmock.PowerOff)), "the host was confirmed off before the remediation gave up:\n%s", tl.dump(start, broken))
		offs := 0
		for _, e := range power {
			if e.What == string(redfishmock.PowerOff) {
				offs++
			}
		}
		Expect(offs).To(Equal(3), "two power cycles and the escalation's power-off:\n%s", tl.dump(start, broken))
		Expect(tl.before("node/"+broken, start, failedAt)).To(ContainElement(HaveField("What", "taint+"+v1alpha1.TaintOutOfService)))
		Expect(tl.before("node/"+broken, start, failedAt)).NotTo(ContainElement(HaveField("What", "taint-"+v1alpha1.TaintOutOfService)),
			"fenced at the first power-off, the node stays fenced between attempts and after")
		Expect(tl.at(pcrObj, "phase="+string(v1alpha1.PhaseEscalating), start)).To(BeTemporally("<", failedAt))
		Expect(resets(broken)[:5]).To(Equal([]string{"ForceOff", "On", "ForceOff", "On", "ForceOff"}))

		By("the check ends its last step but leaves the request as the remediator left it: host off, node fenced")
		Eventually(func(g Gomega) {
			p, err := getPCR(ctx, pcr)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).NotTo(BeNil(), "the check keeps its request while the node is unhealthy")
			g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
			g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonRetriesExhausted)))
			g.Expect(p.Status.RetryCount).To(BeEquivalentTo(2))
			g.Expect(p.Status.Attempts).To(HaveEach(HaveField("Result", "Failed")))

			nhc := &v1alpha1.NodeHealthCheck{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: group}, nhc)).To(Succeed())
			g.Expect(nhc.Status.UnhealthyNodes).To(ConsistOf(And(
				HaveField("Name", broken),
				HaveField("Remediations", ConsistOf(HaveField("TimedOut", Not(BeNil())))))))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		Consistently(func(g Gomega) {
			p, err := getPCR(ctx, pcr)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.Annotations).NotTo(HaveKey(v1alpha1.AnnotationTimedOut), "the last step is not handed back to the remediator's clean-up")
			g.Expect(p.Finalizers).NotTo(BeEmpty())
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintOutOfService)).To(BeTrue(), "the dead host stays fenced")
			g.Expect(hostPower(broken)).To(Equal(string(redfishmock.PowerOff)))
		}).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(poll).Should(Succeed())
		Expect(resets(broken)).To(Equal([]string{"ForceOff", "On", "ForceOff", "On", "ForceOff"}))
		lease, err := nodeLease(ctx, broken)
		Expect(err).NotTo(HaveOccurred())
		Expect(lease).NotTo(BeNil())
		Expect(lease.Spec.HolderIdentity).To(HaveValue(Equal("NodeHealthCheck.remediation.metalheal.io-"+group)), "the check keeps the node's lease while it keeps its request")

		By("an administrator repairs the host and powers it on: the node comes back, the check deletes its request, the remediator cleans up")
		Expect(h.Sim.ClearFault(broken)).To(Succeed())
		Expect(h.Mock.SetPowerState(harness.SystemID(broken), redfishmock.PowerOn)).To(Succeed())
		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
		Expect(resets(broken)).To(Equal([]string{"ForceOff", "On", "ForceOff", "On", "ForceOff"}), "the remediator never powered the fenced host back on")
		Expect(resets(bystander)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))

	It("driven by a MachineHealthCheck: is power-cycled twice, then its Machine is deleted for its MachineSet to replace", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "persistent-mhc"
		broken := pool.take(ctx, group, 1)[0]
		reportOnFailure(start, broken, "workers-0")
		ns := namespace(ctx, "e2e-mhc")
		// What an admin grants in a Cluster's namespace the remediator trusts (docs/operations.md): the
		// escalation deletes the request's Machine there.
		Expect(h.GrantClusterNamespace(ctx, ns)).To(Succeed())
		createTemplate(ctx, ns, "escalate", remediation(escalateAfterTwo))

		By("a MachineSet's Machine runs on the node")
		labels := map[string]string{"pool": "workers"}
		ms := &clusterv1.MachineSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workers"},
			Spec: clusterv1.MachineSetSpec{
				ClusterName: "e2e",
				Selector:    metav1.LabelSelector{MatchLabels: labels},
				Template: clusterv1.MachineTemplateSpec{
					ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
					Spec:       machineSpec("workers"),
				},
			},
		}
		Expect(k8s.Create(ctx, ms)).To(Succeed())
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workers-0", Labels: labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet",
					Name: ms.Name, UID: ms.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: machineSpec("workers-0"),
		}
		Expect(k8s.Create(ctx, machine)).To(Succeed())
		machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: broken}
		Expect(k8s.Status().Update(ctx, machine)).To(Succeed())

		mhc := &v1alpha1.MachineHealthCheck{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workers"},
			Spec: v1alpha1.MachineHealthCheckSpec{
				Selector: metav1.LabelSelector{MatchLabels: labels},
				UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
					{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: conditionDuration}},
					{Type: "Ready", Status: "False", Timeout: metav1.Duration{Duration: conditionDuration}},
				},
				RemediationTemplate: &v1alpha1.TemplateReference{
					APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediationTemplate", Name: "escalate"},
			},
		}
		Expect(k8s.Create(ctx, mhc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), mhc)).To(Succeed())
			g.Expect(mhc.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(1)))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())

		By("the host breaks for good")
		Expect(h.Sim.InjectFault(broken, nodesim.FaultPersistent)).To(Succeed())

		By("two power cycles fail; the remediator records that the node goes for good and deletes the Machine")
		machineObj := "machine/" + ns + "/workers-0"
		pcrObj := "pcr/" + ns + "/workers-0"
		Eventually(func() bool { return tl.has(machineObj, "deleted", start) }).
			WithContext(ctx).WithTimeout(remedyWait).WithPolling(poll).Should(BeTrue())
		deleted := [2]string{machineObj, "deleted"}
		tl.storedBefore(ctx, start, [2]string{pcrObj, v1alpha1.ConditionPermanentNodeDeletionExpected + "=True"}, deleted)
		tl.storedBefore(ctx, start, [2]string{pcrObj, "attempt=2"}, deleted)
		Expect(tl.has(pcrObj, "attempt=3", start)).To(BeFalse())

		By("the request goes with the Machine; the node is released, its host left as it is (on), and the MachineSet remains")
		waitGone(ctx, client.ObjectKey{Namespace: ns, Name: "workers-0"}, settledWait)
		Eventually(func(g Gomega) {
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintOutOfService)).To(BeFalse())
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintRemediation)).To(BeFalse())
			g.Expect(nodeLease(ctx, broken)).To(BeNil())
			g.Expect(remediationsOf(ctx, broken)).To(BeEmpty())
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), mhc)).To(Succeed())
			g.Expect(mhc.Status.ExpectedMachines).To(HaveValue(BeEquivalentTo(0)))
			g.Expect(mhc.Status.UnhealthyMachines).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ms), ms)).To(Succeed())
		Expect(resets(broken)).To(Equal([]string{"ForceOff", "On", "ForceOff", "On"}))
		Expect(hostPower(broken)).To(Equal(string(redfishmock.PowerOn)))

		By("the node's host is repaired (as its replacement would be): Ready, nothing left behind")
		Expect(h.Sim.ClearFault(broken)).To(Succeed())
		expectSettled(ctx, broken)
	}, SpecTimeout(scenarioMax))
})

// machineSpec is a Machine's spec in the e2e cluster: nothing reads it but the API server's validation.
func machineSpec(name string) clusterv1.MachineSpec {
	return clusterv1.MachineSpec{
		ClusterName: "e2e",
		Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
		InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "FakeMachine", Name: name},
	}
}
