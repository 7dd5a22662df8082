package mhc

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/metrics"
)

func TestMachineCheckState(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name  string
		check v1alpha1.MachineHealthCheck
		want  metrics.CheckState
	}{
		{
			name:  "not reported yet: allowed, no counts",
			check: v1alpha1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "md-0"}},
			want:  metrics.CheckState{Name: "ns/md-0", RemediationAllowed: true, Storm: &metrics.StormState{}},
		},
		{
			name: "short-circuited and disabled; timed-out requests are not in flight",
			check: v1alpha1.MachineHealthCheck{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "md-0"},
				Status: v1alpha1.MachineHealthCheckStatus{
					ExpectedMachines: ptr.To[int32](4),
					CurrentHealthy:   ptr.To[int32](1),
					UnhealthyMachines: []v1alpha1.UnhealthyMachine{
						{Name: "m1", RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{{TimedOut: &now}, {}}}},
						{Name: "m2", RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{{}}}},
						{Name: "m3"},
					},
					Conditions: []metav1.Condition{
						{Type: v1alpha1.ConditionRemediationAllowed, Status: metav1.ConditionFalse},
						{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionTrue},
					},
				},
			},
			want: metrics.CheckState{Name: "ns/md-0", Targets: ptr.To[int32](4), Healthy: ptr.To[int32](1), Disabled: true, InFlight: 2,
				Storm: &metrics.StormState{}},
		},
		{
			name: "a storm for a minute, with its cooldown",
			check: v1alpha1.MachineHealthCheck{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "md-0"},
				Spec:       v1alpha1.MachineHealthCheckSpec{StormCooldownDuration: &metav1.Duration{Duration: 5 * time.Minute}},
				Status: v1alpha1.MachineHealthCheckStatus{Conditions: []metav1.Condition{
					{Type: v1alpha1.ConditionStormActive, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))},
				}},
			},
			want: metrics.CheckState{Name: "ns/md-0", RemediationAllowed: false, // a storm holds remediation back
				Storm: &metrics.StormState{Active: true, ActiveFor: time.Minute, Cooldown: 5 * time.Minute}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(CheckState(&tc.check, now.Time)).To(Equal(tc.want))
		})
	}
}
