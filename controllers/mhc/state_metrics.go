package mhc

import (
	"time"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/metrics"
)

// CheckState is what a MachineHealthCheck's status says now, for its state gauges (internal/metrics: storm, budget,
// disabled, in-flight requests; cmd/main registers it with metrics.AddCheckKind).
func CheckState(c *v1alpha1.MachineHealthCheck, now time.Time) metrics.CheckState {
	st := metrics.FromConditions(c.Status.Conditions, c.Spec.StormCooldownDuration, now)
	st.Name = c.Namespace + "/" + c.Name
	st.Targets, st.Healthy = c.Status.ExpectedMachines, c.Status.CurrentHealthy
	for _, m := range c.Status.UnhealthyMachines {
		st.Count(m.RemediationProgress)
	}
	return st
}
