package engine

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

func TestHealthyHold(t *testing.T) {
	since := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		delay     time.Duration
		confirmed bool
		now       time.Time
		hold      bool
		until     time.Time
	}{
		{name: "no delay: released at once", now: since},
		{name: "within the delay", delay: 5 * time.Minute, now: since.Add(time.Minute), hold: true, until: since.Add(5 * time.Minute)},
		{name: "the delay over", delay: 5 * time.Minute, now: since.Add(5 * time.Minute), until: since.Add(5 * time.Minute)},
		{name: "confirmed within the delay: released", delay: 5 * time.Minute, confirmed: true, now: since.Add(time.Minute)},
		{name: "negative: held however long", delay: -time.Second, now: since.Add(72 * time.Hour), hold: true},
		{name: "negative, confirmed: released", delay: -time.Second, confirmed: true, now: since.Add(time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			hold, until := HealthyHold(since, tc.delay, tc.confirmed, tc.now)
			g.Expect(hold).To(Equal(tc.hold))
			g.Expect(until).To(Equal(tc.until))
		})
	}
}

func TestNodeChanged(t *testing.T) {
	at := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	base := func() *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"pool": "a"}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				LastTransitionTime: at, LastHeartbeatTime: at}}}}
	}
	for _, tc := range []struct {
		name   string
		change func(*corev1.Node)
		want   bool
	}{
		{name: "a heartbeat", change: func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(at.Add(time.Minute)) }},
		{name: "another annotation", change: func(n *corev1.Node) { n.Annotations = map[string]string{"x": "y"} }},
		{name: "Ready changes", change: func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }, want: true},
		{name: "a label", change: func(n *corev1.Node) { n.Labels[v1alpha1.LabelExcludeFromRemediation] = "true" }, want: true},
		{name: "a person confirms it healthy", change: func(n *corev1.Node) {
			n.Annotations = map[string]string{v1alpha1.AnnotationConfirmedHealthy: ""}
		}, want: true},
		{name: "being deleted", change: func(n *corev1.Node) { n.DeletionTimestamp = &at }, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := base()
			tc.change(cur)
			NewWithT(t).Expect(NodeChanged(base(), cur)).To(Equal(tc.want))
		})
	}
}
