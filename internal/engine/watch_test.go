package engine

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/kindwatch"
)

// TestNodeUpdatesIgnoresHeartbeats: a Node update reaches a check (of either kind) only when it can change
// a decision.
func TestNodeUpdatesIgnoresHeartbeats(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"pool": "a"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(t0), LastHeartbeatTime: metav1.NewTime(t0)}}}}
	for name, tc := range map[string]struct {
		change func(*corev1.Node)
		want   bool
	}{
		"heartbeat only": {change: func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0.Add(5 * time.Minute))
			n.ResourceVersion = "2"
		}},
		"ready status changes": {want: true, change: func(n *corev1.Node) {
			n.Status.Conditions[0].Status = corev1.ConditionUnknown
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(time.Minute))
		}},
		"a condition appears": {want: true, change: func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue})
		}},
		"labels change":   {want: true, change: func(n *corev1.Node) { n.Labels[v1alpha1.LabelExcludeFromRemediation] = "true" }},
		"deletion starts": {want: true, change: func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{Time: t0} }},
		"confirmed healthy": {want: true, change: func(n *corev1.Node) {
			n.Annotations = map[string]string{v1alpha1.AnnotationConfirmedHealthy: ""}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			n := base.DeepCopy()
			tc.change(n)
			NewWithT(t).Expect(NodeUpdates().Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n})).To(Equal(tc.want))
		})
	}
}

// TestChecksOwning: a request's event reaches the metalheal check of its kind that owns it (in the
// request's namespace for a MachineHealthCheck), never medik8s' check of the same kind.
func TestChecksOwning(t *testing.T) {
	emr := &unstructured.Unstructured{}
	emr.SetNamespace("ns")
	emr.SetOwnerReferences([]metav1.OwnerReference{
		{APIVersion: "v1", Kind: "Node", Name: "w1", UID: "n"},
		{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "m", UID: "m-uid"},
		{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "NodeHealthCheck", Name: "workers", UID: "c"},
		{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "MachineHealthCheck", Name: "check", UID: "mhc-uid"},
		{APIVersion: "remediation.medik8s.io/v1alpha1", Kind: "NodeHealthCheck", Name: "theirs", UID: "m"},
	})
	g := NewWithT(t)
	g.Expect(ChecksOwning("NodeHealthCheck", false)(t.Context(), emr)).To(Equal([]reconcile.Request{{NamespacedName: types.NamespacedName{Name: "workers"}}}))
	g.Expect(ChecksOwning("MachineHealthCheck", true)(t.Context(), emr)).To(Equal(
		[]reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "check"}}}))
}

// TestPending: a check waits for the first sync of a kind it names, until the earliest give-up; synced
// and failed kinds keep it waiting for nothing.
func TestPending(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	a, b, c := schema.GroupVersionKind{Kind: "A"}, schema.GroupVersionKind{Kind: "B"}, schema.GroupVersionKind{Kind: "C"}
	g := NewWithT(t)
	g.Expect(Pending(nil)).To(Succeed())
	g.Expect(Pending(map[schema.GroupVersionKind]kindwatch.Status{a: {State: kindwatch.Synced}, b: {State: kindwatch.Failed}})).To(Succeed())
	err := Pending(map[schema.GroupVersionKind]kindwatch.Status{a: {State: kindwatch.Pending, Until: t0.Add(time.Minute)},
		b: {State: kindwatch.Pending, Until: t0}, c: {State: kindwatch.Synced}})
	g.Expect(err).To(Equal(&WatchPendingError{Until: t0}))
}
