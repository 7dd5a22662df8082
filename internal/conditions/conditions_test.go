package conditions

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	t0           = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	readyUnknown = Criterion{Type: "Ready", Status: "Unknown", Duration: 5 * time.Minute}
	readyFalse   = Criterion{Type: "Ready", Status: "False", Duration: 5 * time.Minute}
	diskPressure = Criterion{Type: "DiskPressure", Status: "True", Duration: 10 * time.Minute}
	defaults     = []Criterion{readyUnknown, readyFalse}
)

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name     string
		conds    []Condition
		criteria []Criterion
		now      time.Time
		want     Result
	}{
		{
			name:     "healthy node",
			conds:    []Condition{{Type: "Ready", Status: "True", LastTransitionTime: t0}},
			criteria: defaults,
			now:      t0.Add(time.Hour),
			want:     Result{},
		},
		{
			name:     "node without conditions yet is not unhealthy",
			conds:    nil,
			criteria: defaults,
			now:      t0.Add(time.Hour),
			want:     Result{},
		},
		{
			name:     "node without a Ready condition is not unhealthy",
			conds:    []Condition{{Type: "MemoryPressure", Status: "False", LastTransitionTime: t0}},
			criteria: defaults,
			now:      t0.Add(time.Hour),
			want:     Result{},
		},
		{
			name:     "no criteria never matches",
			conds:    []Condition{{Type: "Ready", Status: "Unknown", LastTransitionTime: t0}},
			criteria: nil,
			now:      t0.Add(time.Hour),
			want:     Result{},
		},
		{
			name:     "matching but not expired: look again at the expiry",
			conds:    []Condition{{Type: "Ready", Status: "Unknown", LastTransitionTime: t0}},
			criteria: defaults,
			now:      t0.Add(time.Minute),
			want:     Result{NextCheck: t0.Add(5 * time.Minute)},
		},
		{
			name:     "one nanosecond before expiry is still pending",
			conds:    []Condition{{Type: "Ready", Status: "Unknown", LastTransitionTime: t0}},
			criteria: defaults,
			now:      t0.Add(5*time.Minute - time.Nanosecond),
			want:     Result{NextCheck: t0.Add(5 * time.Minute)},
		},
		{
			name:     "exactly at expiry is unhealthy",
			conds:    []Condition{{Type: "Ready", Status: "Unknown", LastTransitionTime: t0}},
			criteria: defaults,
			now:      t0.Add(5 * time.Minute),
			want:     Result{Unhealthy: true, Matched: readyUnknown, ExpiredAt: t0.Add(5 * time.Minute)},
		},
		{
			name:     "expired long ago reports the expiry instant, not now",
			conds:    []Condition{{Type: "Ready", Status: "False", LastTransitionTime: t0}},
			criteria: defaults,
			now:      t0.Add(time.Hour),
			want:     Result{Unhealthy: true, Matched: readyFalse, ExpiredAt: t0.Add(5 * time.Minute)},
		},
		{
			name:     "status must match exactly",
			conds:    []Condition{{Type: "Ready", Status: "unknown", LastTransitionTime: t0}},
			criteria: defaults,
			now:      t0.Add(time.Hour),
			want:     Result{},
		},
		{
			name: "the earliest expired criterion is reported",
			conds: []Condition{
				{Type: "Ready", Status: "False", LastTransitionTime: t0.Add(2 * time.Minute)},
				{Type: "DiskPressure", Status: "True", LastTransitionTime: t0},
			},
			criteria: []Criterion{readyFalse, diskPressure},
			now:      t0.Add(time.Hour),
			want:     Result{Unhealthy: true, Matched: readyFalse, ExpiredAt: t0.Add(7 * time.Minute)},
		},
		{
			name: "unhealthy by one criterion still reports another pending expiry",
			conds: []Condition{
				{Type: "Ready", Status: "False", LastTransitionTime: t0},
				{Type: "DiskPressure", Status: "True", LastTransitionTime: t0.Add(4 * time.Minute)},
			},
			criteria: []Criterion{readyFalse, diskPressure},
			now:      t0.Add(6 * time.Minute),
			want: Result{
				Unhealthy: true, Matched: readyFalse, ExpiredAt: t0.Add(5 * time.Minute),
				NextCheck: t0.Add(14 * time.Minute),
			},
		},
		{
			name: "next check is the earliest pending expiry",
			conds: []Condition{
				{Type: "Ready", Status: "False", LastTransitionTime: t0.Add(3 * time.Minute)},
				{Type: "DiskPressure", Status: "True", LastTransitionTime: t0},
			},
			criteria: []Criterion{readyFalse, diskPressure},
			now:      t0.Add(4 * time.Minute),
			want:     Result{NextCheck: t0.Add(8 * time.Minute)},
		},
		{
			name:     "zero duration matches immediately",
			conds:    []Condition{{Type: "Ready", Status: "False", LastTransitionTime: t0}},
			criteria: []Criterion{{Type: "Ready", Status: "False"}},
			now:      t0,
			want:     Result{Unhealthy: true, Matched: Criterion{Type: "Ready", Status: "False"}, ExpiredAt: t0},
		},
		{
			name:     "negative duration counts as zero",
			conds:    []Condition{{Type: "Ready", Status: "False", LastTransitionTime: t0}},
			criteria: []Criterion{{Type: "Ready", Status: "False", Duration: -time.Minute}},
			now:      t0,
			want: Result{
				Unhealthy: true, Matched: Criterion{Type: "Ready", Status: "False", Duration: -time.Minute}, ExpiredAt: t0,
			},
		},
		{
			name:     "a matching condition without transition time has expired",
			conds:    []Condition{{Type: "Ready", Status: "Unknown"}},
			criteria: defaults,
			now:      t0,
			want:     Result{Unhealthy: true, Matched: readyUnknown},
		},
		{
			name: "a condition without transition time wins over a dated one",
			conds: []Condition{
				{Type: "DiskPressure", Status: "True", LastTransitionTime: t0},
				{Type: "Ready", Status: "Unknown"},
			},
			criteria: []Criterion{diskPressure, readyUnknown},
			now:      t0.Add(time.Hour),
			want:     Result{Unhealthy: true, Matched: readyUnknown},
		},
		{
			name: "a non-matching condition without transition time is ignored",
			conds: []Condition{
				{Type: "Ready", Status: "True"},
			},
			criteria: defaults,
			now:      t0,
			want:     Result{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(Evaluate(tt.conds, tt.criteria, tt.now)).To(Equal(tt.want))
		})
	}
}

func TestRequeueAfter(t *testing.T) {
	tests := []struct {
		name string
		r    Result
		now  time.Time
		want time.Duration
	}{
		{name: "nothing pending", r: Result{}, now: t0, want: 0},
		{name: "pending in a minute", r: Result{NextCheck: t0.Add(time.Minute)}, now: t0, want: time.Minute},
		{name: "already due is never zero or negative", r: Result{NextCheck: t0}, now: t0.Add(time.Second), want: time.Nanosecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(tt.r.RequeueAfter(tt.now)).To(Equal(tt.want))
		})
	}
}

func TestNodeConditions(t *testing.T) {
	g := NewWithT(t)
	node := corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(t0)},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
	}}}
	got := NodeConditions(node.Status.Conditions)
	g.Expect(got).To(Equal([]Condition{
		{Type: "Ready", Status: "Unknown", LastTransitionTime: t0},
		{Type: "DiskPressure", Status: "False"},
	}))
	g.Expect(Evaluate(got, defaults, t0.Add(5*time.Minute))).To(Equal(
		Result{Unhealthy: true, Matched: readyUnknown, ExpiredAt: t0.Add(5 * time.Minute)}))
}
