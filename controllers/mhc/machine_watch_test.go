package mhc

import (
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/metalheal/metalheal/internal/testenv"
)

// A check hears of its Machines' changes, not of the HealthCheckSucceeded condition it writes on them
// itself: each such write would cost it one more reconcile over all its Machines.
var _ = Describe("A check's own writes to its Machines' HealthCheckSucceeded", func() {
	It("bring no reconcile; a change of what the check reads does", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.runManager(ctx, testenv.ManagerOptions{}, Options{ResyncPeriod: worldResync})
		node := w.createNode(ctx, k8s, w.nodeName("m"), corev1.ConditionTrue, time.Hour)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		w.createCheck(ctx, "check")
		Eventually(func() *metav1.Condition {
			return condition(w.machine(ctx, "m"), clusterv1.MachineHealthCheckSucceededCondition)
		}).WithTimeout(eventuallyTimeout).ShouldNot(BeNil(), "the check reports the Machine healthy")
		Eventually(steady(reconciles)).WithPolling(time.Second).WithTimeout(eventuallyTimeout).Should(BeTrue())

		By("HealthCheckSucceeded rewritten five times, as checks do (its transition time only: nothing the check would set back)")
		base := reconciles()
		for i := range 5 {
			m := w.machine(ctx, "m")
			c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineHealthCheckSucceededCondition)
			c.LastTransitionTime = metav1.NewTime(c.LastTransitionTime.Add(time.Duration(i+1) * time.Second))
			Expect(k8s.Status().Update(ctx, m)).To(Succeed())
		}

		By("then a label the check does not select by: every earlier event of the Machine was delivered before it")
		m := w.machine(ctx, "m")
		m.Labels["example.com/rack"] = "r1"
		Expect(k8s.Update(ctx, m)).To(Succeed())
		Eventually(reconciles).WithTimeout(eventuallyTimeout).Should(BeNumerically(">", base), "the label reaches the check")
		Consistently(reconciles).WithTimeout(2*time.Second).Should(Equal(base+1),
			"one reconcile for the label, none for the five condition writes")
	})
})

// TestMachineUpdates: which Machine updates the Machine watch passes, in both served versions.
func TestMachineUpdates(t *testing.T) {
	g := NewWithT(t)
	healthy := metav1.Condition{Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionTrue, Reason: "HealthCheckSucceeded"}
	v1beta2 := func(mutate func(*clusterv1.Machine)) client.Object {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", ResourceVersion: "1", Labels: map[string]string{"pool": "a"}},
			Spec:   clusterv1.MachineSpec{ClusterName: "c1"},
			Status: clusterv1.MachineStatus{NodeRef: clusterv1.MachineNodeReference{Name: "n"}, Conditions: []metav1.Condition{healthy}}}
		if mutate != nil {
			mutate(m)
		}
		return m
	}
	v1beta1 := func(mutate func(*clusterv1beta1.Machine)) client.Object {
		m := &clusterv1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", ResourceVersion: "1"},
			Status: clusterv1beta1.MachineStatus{Conditions: clusterv1beta1.Conditions{{Type: "HealthCheckSucceeded", Status: corev1.ConditionTrue}},
				V1Beta2: &clusterv1beta1.MachineV1Beta2Status{Conditions: []metav1.Condition{healthy}}}}
		if mutate != nil {
			mutate(m)
		}
		return m
	}
	unhealthy := func(conds []metav1.Condition) {
		meta.SetStatusCondition(&conds, metav1.Condition{Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionFalse, Reason: "UnhealthyNode"})
	}
	for name, tc := range map[string]struct {
		old, new client.Object
		pass     bool
	}{
		"v1beta2: only HealthCheckSucceeded and the resourceVersion": {old: v1beta2(nil), new: v1beta2(func(m *clusterv1.Machine) {
			m.ResourceVersion = "2"
			unhealthy(m.Status.Conditions)
		})},
		"v1beta2: OwnerRemediated set": {old: v1beta2(nil), new: v1beta2(func(m *clusterv1.Machine) {
			m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse})
		}), pass: true},
		"v1beta2: a label":     {old: v1beta2(nil), new: v1beta2(func(m *clusterv1.Machine) { m.Labels["x"] = "y" }), pass: true},
		"v1beta2: the nodeRef": {old: v1beta2(nil), new: v1beta2(func(m *clusterv1.Machine) { m.Status.NodeRef.Name = "other" }), pass: true},
		"v1beta2: a Machine condition a check may select by": {old: v1beta2(nil), new: v1beta2(func(m *clusterv1.Machine) {
			m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse})
		}), pass: true},
		"v1beta2: being deleted": {old: v1beta2(nil), new: v1beta2(func(m *clusterv1.Machine) { m.DeletionTimestamp = &metav1.Time{} }), pass: true},
		"v1beta1: HealthCheckSucceeded in both condition lists": {old: v1beta1(nil), new: v1beta1(func(m *clusterv1beta1.Machine) {
			m.ResourceVersion = "2"
			m.Status.Conditions[0].Status = corev1.ConditionFalse
			unhealthy(m.Status.V1Beta2.Conditions)
		})},
		"v1beta1: OwnerRemediated in v1beta1's conditions": {old: v1beta1(nil), new: v1beta1(func(m *clusterv1beta1.Machine) {
			m.Status.Conditions = append(m.Status.Conditions, clusterv1beta1.Condition{Type: "OwnerRemediated", Status: corev1.ConditionFalse})
		}), pass: true},
	} {
		got := machineUpdates().Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new})
		g.Expect(got).To(Equal(tc.pass), name)
	}
}
