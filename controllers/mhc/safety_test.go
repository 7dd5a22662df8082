package mhc

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/pkg/leases"
)

// leaseManager acts as holder on the world's clock, in the lease namespace.
func (w *world) leaseManager(holder string) *leases.Manager {
	m, err := leases.NewManager(k8s, holder, w.clock)
	Expect(err).NotTo(HaveOccurred())
	return m
}

// leaseHolder is who holds node's lease, "" when there is none.
func leaseHolder(ctx context.Context, node string) string {
	l := &coordinationv1.Lease{}
	err := k8s.Get(ctx, types.NamespacedName{Namespace: leases.DefaultNamespace, Name: leases.LeaseName(node)}, l)
	if apierrors.IsNotFound(err) {
		return ""
	}
	Expect(err).NotTo(HaveOccurred())
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

func withTemplate(name string) func(*v1alpha1.MachineHealthCheck) {
	return func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.RemediationTemplate = ptr.To(templateRef(name)) }
}

// asControlPlane makes the Machine a KubeadmControlPlane's.
var asControlPlane = machineOpt{meta: func(m *clusterv1.Machine) {
	m.Labels[clusterv1.MachineControlPlaneLabel] = ""
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "controlplane.cluster.x-k8s.io/v1beta2", Kind: "KubeadmControlPlane",
		Name: "kcp", UID: "kcp-uid", Controller: ptr.To(true)}}
}}

func entryOf(mhc *v1alpha1.MachineHealthCheck, machine string) *v1alpha1.UnhealthyMachine {
	for i := range mhc.Status.UnhealthyMachines {
		if mhc.Status.UnhealthyMachines[i].Name == machine {
			return &mhc.Status.UnhealthyMachines[i]
		}
	}
	return nil
}

var _ = Describe("Safety rules shared with the NodeHealthCheck", func() {
	It("hands a Node off while node-maintenance holds its lease, takes the lease with the request, releases it after", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", withTemplate("reboot"))
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 10*time.Minute)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		maintenance := w.leaseManager("node-maintenance")
		Expect(maintenance.RequestLease(ctx, node, 10*time.Minute)).To(Succeed())

		res := w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty(), "the Node is under maintenance")
		e := entryOf(w.check(ctx, "workers"), "m")
		Expect(e).NotTo(BeNil())
		Expect(e.SkipReason).To(Equal(v1alpha1.ReasonLeaseHeldByOther))
		Expect(e.SkipMessage).To(ContainSubstring(`"node-maintenance"`))
		Expect(e.Remediations).To(BeEmpty())
		Expect(w.rec.all()).To(ContainElement(And(HaveField("Kind", "Machine"), HaveField("Reason", EventRemediationSkipped),
			HaveField("Type", corev1.EventTypeWarning), HaveField("Note", ContainSubstring("node-maintenance")))))
		Expect(res.RequeueAfter).To(BeNumerically("<=", 10*time.Minute+time.Second), "looks again when the lease runs out")
		Expect(leaseHolder(ctx, node.Name)).To(Equal("node-maintenance"))

		By("maintenance ends: the check creates the request and takes the lease (right after it: engine.LeaseAfter)")
		Expect(maintenance.InvalidateLease(ctx, node.Name)).To(Succeed())
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))
		Expect(leaseHolder(ctx, node.Name)).To(Equal("MachineHealthCheck.remediation.metalheal.io-workers"))
		Expect(entryOf(w.check(ctx, "workers"), "m").SkipReason).To(BeEmpty())

		By("the Node is healthy again: the request goes, then the lease")
		w.setReady(ctx, k8s, node, corev1.ConditionTrue, 0)
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		w.reconcile(ctx, "workers")
		Expect(leaseHolder(ctx, node.Name)).To(BeEmpty())
	})

	It("holds remediation through the storm and its cooldown", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", withTemplate("reboot"), func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.MaxUnhealthy = ptr.To(intstr.FromInt32(1))
			mhc.Spec.StormCooldownDuration = &metav1.Duration{Duration: 10 * time.Minute}
		})
		a := w.createNode(ctx, k8s, w.nodeName("a"), corev1.ConditionUnknown, 10*time.Minute)
		b := w.createNode(ctx, k8s, w.nodeName("b"), corev1.ConditionUnknown, 10*time.Minute)
		c := w.createNode(ctx, k8s, w.nodeName("c"), corev1.ConditionTrue, time.Hour)
		w.createMachine(ctx, "a", withNodeRef(a.Name))
		w.createMachine(ctx, "b", withNodeRef(b.Name))
		w.createMachine(ctx, "c", withNodeRef(c.Name))
		storm := func() *metav1.Condition {
			return meta.FindStatusCondition(w.check(ctx, "workers").Status.Conditions, v1alpha1.ConditionStormActive)
		}

		w.reconcile(ctx, "workers")
		Expect(storm()).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonTooManyUnhealthy)))
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())

		By("b recovers: the budget is met again, the cooldown holds")
		w.clock.Step(time.Minute)
		w.setReady(ctx, k8s, b, corev1.ConditionTrue, 0)
		res := w.reconcile(ctx, "workers")
		Expect(storm()).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonStormCooldown)))
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty(), "a is not remediated during the cooldown")
		Expect(res.RequeueAfter).To(Equal(10*time.Minute), "looks again when the cooldown ends")
		Expect(w.rec.all()).To(ContainElement(HaveField("Reason", EventStormCooldown)))

		w.clock.Step(10*time.Minute - time.Second)
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty(), "still cooling down")

		By("the cooldown ends: remediation resumes")
		w.clock.Step(time.Second)
		w.reconcile(ctx, "workers")
		Expect(storm()).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonNoStorm)))
		Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("name", "a")))))
		Expect(w.rec.all()).To(ContainElement(HaveField("Reason", EventStormEnded)))
	})

	It("keeps the request of a Node flapping inside healthyDelay", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", withTemplate("reboot"), func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.HealthyDelay = &metav1.Duration{Duration: 5 * time.Minute}
		})
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 10*time.Minute)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		w.reconcile(ctx, "workers")
		emrs := w.powerCycleRemediations(ctx)
		Expect(emrs).To(HaveLen(1))
		uid := emrs[0].GetUID()

		By("a first Ready heartbeat: the request stays")
		w.setReady(ctx, k8s, node, corev1.ConditionTrue, 0)
		res := w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("uid", string(uid))))))
		e := entryOf(w.check(ctx, "workers"), "m")
		Expect(e).NotTo(BeNil())
		Expect(e.ConditionsHealthyTimestamp).NotTo(BeNil())
		Expect(res.RequeueAfter).To(Equal(5 * time.Minute))

		By("a short blip inside the delay (Unknown, not yet unhealthy): still the same request")
		w.clock.Step(time.Minute)
		w.setReady(ctx, k8s, node, corev1.ConditionUnknown, 0)
		w.reconcile(ctx, "workers")
		w.setReady(ctx, k8s, node, corev1.ConditionTrue, 0)
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("uid", string(uid))))))

		By("the Node is unhealthy again inside the delay, then Ready: the delay starts over, the request stays")
		w.clock.Step(time.Minute)
		w.setReady(ctx, k8s, node, corev1.ConditionUnknown, 10*time.Minute)
		w.reconcile(ctx, "workers")
		Expect(entryOf(w.check(ctx, "workers"), "m").ConditionsHealthyTimestamp).To(BeNil())
		w.clock.Step(time.Minute)
		w.setReady(ctx, k8s, node, corev1.ConditionTrue, 0)
		w.reconcile(ctx, "workers")
		w.clock.Step(4 * time.Minute)
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("uid", string(uid))))),
			"7 minutes after the first Ready heartbeat, 4 after the last")
		Expect(countReason(w.rec.all(), EventRemediationRequestCreated)).To(Equal(1), "no second request")

		By("Ready for the whole delay: the request goes, and the Machine's entry once it is gone")
		w.clock.Step(time.Minute)
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		w.reconcile(ctx, "workers") // the deletion brings the check back
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines).To(BeEmpty())
	})

	It("keeps the request of a Node healthy again until a person confirms it, with a negative healthyDelay; then removes the confirmation", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", withTemplate("reboot"), func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.HealthyDelay = &metav1.Duration{Duration: -time.Second}
		})
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 10*time.Minute)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))

		By("Ready again, for days: the request stays; an event says what it waits for, once")
		w.setReady(ctx, k8s, node, corev1.ConditionTrue, 0)
		res := w.reconcile(ctx, "workers")
		Expect(res.RequeueAfter).To(Equal(defaultLeaseDuration/2), "no deadline of its own: only the lease's renewal")
		w.clock.Step(72 * time.Hour)
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))
		Expect(countReason(w.rec.all(), EventWaitingForConfirmation)).To(Equal(1))
		Expect(entryOf(w.check(ctx, "workers"), "m").ConditionsHealthyTimestamp).NotTo(BeNil())

		By("a person confirms it: the request goes, then the confirmation")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, v1alpha1.AnnotationConfirmedHealthy, "")
		Expect(k8s.Update(ctx, node)).To(Succeed())
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		w.reconcile(ctx, "workers")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
		Expect(node.Annotations).NotTo(HaveKey(v1alpha1.AnnotationConfirmedHealthy))
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines).To(BeEmpty())
	})

	DescribeTable("remediates three failing control-plane Machines one at a time",
		func(ctx SpecContext, nhcHoldsFirst, nhcStatusOnly bool) {
			w := newWorld(ctx)
			w.createTemplate(ctx, "reboot", "reboot")
			w.createCheck(ctx, "cp", withTemplate("reboot"), func(mhc *v1alpha1.MachineHealthCheck) {
				mhc.Spec.MaxUnhealthy = ptr.To(intstr.FromString("100%"))
			})
			var nodes []*corev1.Node
			for _, name := range []string{"cp-0", "cp-1", "cp-2"} {
				n := w.createNode(ctx, k8s, w.nodeName(name), corev1.ConditionUnknown, 10*time.Minute)
				n.Labels = map[string]string{gates.LabelControlPlane: ""}
				Expect(k8s.Update(ctx, n)).To(Succeed())
				nodes = append(nodes, n)
				w.createMachine(ctx, name, withNodeRef(n.Name), asControlPlane)
			}
			if nhcStatusOnly {
				By("a NodeHealthCheck's status shows it remediating cp-0's Node (its lease not seen yet)")
				nhc := &v1alpha1.NodeHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: w.ns + "-cp"},
					Spec: v1alpha1.NodeHealthCheckSpec{RemediationTemplate: &v1alpha1.TemplateReference{
						APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediationTemplate", Name: "reboot", Namespace: w.ns}}}
				Expect(k8s.Create(ctx, nhc)).To(Succeed())
				DeferCleanup(func(ctx context.Context) { Expect(k8s.Delete(ctx, nhc)).To(Succeed()) })
				nhc.Status.InFlightRemediations = map[string]metav1.Time{nodes[0].Name: metav1.NewTime(w.clock.Now())}
				Expect(k8s.Status().Update(ctx, nhc)).To(Succeed())
				w.reconcile(ctx, "cp")
				Expect(w.powerCycleRemediations(ctx)).To(BeEmpty(), "another check's control-plane remediation counts")
				st := w.check(ctx, "cp")
				Expect(entryOf(st, "cp-0").SkipReason).To(Equal(string(blockedOwnedByOtherCheck)), "the check already remediating a Node keeps it")
				Expect(entryOf(st, "cp-0").SkipMessage).To(ContainSubstring("NodeHealthCheck " + nhc.Name))
				Expect(entryOf(st, "cp-1").SkipReason).To(Equal(string(blockedControlPlaneBusy)))
				Expect(entryOf(st, "cp-2").SkipReason).To(Equal(string(blockedControlPlaneBusy)))
				By("the NodeHealthCheck is done with it")
				w.setReady(ctx, k8s, nodes[0], corev1.ConditionTrue, 0)
				nhc.Status.InFlightRemediations = nil
				Expect(k8s.Status().Update(ctx, nhc)).To(Succeed())
				nodes = nodes[1:]
			}
			if nhcHoldsFirst {
				By("a NodeHealthCheck remediates cp-0's Node: it holds its lease")
				nhc := w.leaseManager("NodeHealthCheck-control-plane")
				Expect(nhc.RequestLease(ctx, nodes[0], 10*time.Minute)).To(Succeed())
				w.reconcile(ctx, "cp")
				Expect(w.powerCycleRemediations(ctx)).To(BeEmpty(), "another check's control-plane remediation counts")
				st := w.check(ctx, "cp")
				Expect(entryOf(st, "cp-0").SkipReason).To(Equal(v1alpha1.ReasonLeaseHeldByOther))
				Expect(entryOf(st, "cp-1").SkipReason).To(Equal(string(blockedControlPlaneBusy)))
				Expect(entryOf(st, "cp-2").SkipReason).To(Equal(string(blockedControlPlaneBusy)))
				Expect(entryOf(st, "cp-1").SkipMessage).To(ContainSubstring(nodes[0].Name))
				By("its Node recovers and the NodeHealthCheck lets go")
				w.setReady(ctx, k8s, nodes[0], corev1.ConditionTrue, 0)
				Expect(nhc.InvalidateLease(ctx, nodes[0].Name)).To(Succeed())
				nodes = nodes[1:]
			}
			for i, n := range nodes {
				w.reconcile(ctx, "cp")
				w.reconcile(ctx, "cp")
				emrs := w.powerCycleRemediations(ctx)
				Expect(emrs).To(HaveLen(1), "one control-plane Machine at a time")
				Expect(emrs[0].GetAnnotations()).To(HaveKeyWithValue("remediation.medik8s.io/node-name", n.Name))
				for _, other := range nodes[i+1:] {
					Expect(leaseHolder(ctx, other.Name)).To(BeEmpty())
				}
				By("the Machine's Node recovers: the next one starts")
				w.setReady(ctx, k8s, n, corev1.ConditionTrue, 0)
				w.reconcile(ctx, "cp")
				Expect(w.powerCycleRemediations(ctx)).NotTo(ContainElement(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("name", emrs[0].GetName())))))
			}
			Expect(w.rec.all()).To(ContainElement(And(HaveField("Reason", EventRemediationSkipped), HaveField("Note", ContainSubstring("one control-plane node at a time")))))
		},
		Entry("within one MachineHealthCheck", false, false),
		Entry("with one Node under a NodeHealthCheck's lease", true, false),
		Entry("with one Node in a NodeHealthCheck's inFlightRemediations", false, true),
	)

	It("reports the overlap on the newer of two checks selecting the same Machine", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "a-older", withTemplate("reboot"))
		w.createCheck(ctx, "b-newer", withTemplate("reboot"))
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 10*time.Minute)
		w.createMachine(ctx, "m", withNodeRef(node.Name))

		w.reconcile(ctx, "b-newer")
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		e := entryOf(w.check(ctx, "b-newer"), "m")
		Expect(e).NotTo(BeNil())
		Expect(e.SkipReason).To(Equal(string(blockedOwnedByOtherCheck)))
		Expect(e.SkipMessage).To(ContainSubstring("MachineHealthCheck a-older owns this Machine"))
		Expect(w.rec.all()).To(ContainElement(And(HaveField("Name", "m"), HaveField("Reason", EventRemediationSkipped),
			HaveField("Note", ContainSubstring("a-older")))))

		w.reconcile(ctx, "a-older")
		w.reconcile(ctx, "b-newer")
		emrs := w.powerCycleRemediations(ctx)
		Expect(emrs).To(HaveLen(1))
		Expect(emrs[0].GetOwnerReferences()).To(ContainElement(HaveField("Name", "a-older")))
		Expect(entryOf(w.check(ctx, "a-older"), "m").SkipReason).To(BeEmpty())
		Expect(entryOf(w.check(ctx, "b-newer"), "m").SkipReason).To(Equal(string(blockedOwnedByOtherCheck)), "still reported")
	})

	It("reports a request of the Machine's name that someone else created, never takes it as its own", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", withTemplate("reboot"))
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 10*time.Minute)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		foreign := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "remediation.metalheal.io/v1alpha1", "kind": "PowerCycleRemediation",
			"metadata": map[string]any{"name": "m", "namespace": w.ns}, "spec": map[string]any{"strategy": "reboot"}}}
		Expect(k8s.Create(ctx, foreign)).To(Succeed())

		w.reconcile(ctx, "workers")
		e := entryOf(w.check(ctx, "workers"), "m")
		Expect(e).NotTo(BeNil())
		Expect(e.SkipReason).To(Equal(string(blockedRemediationExists)))
		Expect(e.Remediations).To(BeEmpty(), "not recorded as ours")
		Expect(w.rec.all()).To(ContainElement(And(HaveField("Reason", EventRemediationSkipped), HaveField("Note", ContainSubstring("exists")))))
		Expect(leaseHolder(ctx, node.Name)).To(BeEmpty(), "the lease taken for it is let go")
	})
})

func countReason(evs []recordedEvent, reason string) int {
	n := 0
	for _, e := range evs {
		if e.Reason == reason {
			n++
		}
	}
	return n
}
