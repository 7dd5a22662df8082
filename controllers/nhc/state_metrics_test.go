package nhc

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// TestCheckStateInFlight: the requests in flight are the open ones, as for a MachineHealthCheck: a Node
// whose every step has ended (it stays in inFlightRemediations until it is healthy) has none open.
func TestCheckStateInFlight(t *testing.T) {
	ended := metav1.Now()
	c := &v1alpha1.NodeHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "workers"}, Status: v1alpha1.NodeHealthCheckStatus{
		InFlightRemediations: map[string]metav1.Time{"w1": ended, "w2": ended},
		UnhealthyNodes: []v1alpha1.UnhealthyNode{
			{Name: "w1", RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{{Kind: "A", TimedOut: &ended}, {Kind: "B"}}}},
			{Name: "w2", RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{{Kind: "A", TimedOut: &ended}}}},
			{Name: "w3", RemediationProgress: v1alpha1.RemediationProgress{SkipReason: v1alpha1.SkipDryRun}},
		}}}
	st := CheckState(c, ended.Time)
	NewWithT(t).Expect([]int{st.InFlight, st.WouldRemediate}).To(Equal([]int{1, 1}))
}
