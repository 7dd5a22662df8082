package nhc

import (
	"time"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/metrics"
)

// CheckState is what a NodeHealthCheck's status says now, for its state gauges (internal/metrics: storm, budget,
// disabled, in-flight requests; cmd/main registers it with metrics.AddCheckKind).
func CheckState(c *v1alpha1.NodeHealthCheck, now time.Time) metrics.CheckState {
	st := metrics.FromConditions(c.Status.Conditions, c.Spec.StormCooldownDuration, now)
	st.Name = c.Name
	st.Targets, st.Healthy = c.Status.ObservedNodes, c.Status.HealthyNodes
	for _, u := range c.Status.UnhealthyNodes {
		st.Count(u.RemediationProgress)
	}
	return st
}
