package mhc

import (
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/metrics"
)

// RegisterStateMetrics reports every MachineHealthCheck's state gauges (internal/metrics: storm, budget,
// disabled, in-flight requests), read from reader (the manager's cache) at scrape time once elected is
// closed.
func RegisterStateMetrics(reader client.Reader, clk clock.PassiveClock, elected <-chan struct{}) {
	metrics.AddCheckKind(metrics.CheckerMHC, reader, clk, elected,
		func(l *v1alpha1.MachineHealthCheckList) []v1alpha1.MachineHealthCheck { return l.Items }, machineCheckState)
}

// machineCheckState is what c's status says now.
func machineCheckState(c *v1alpha1.MachineHealthCheck, now time.Time) metrics.CheckState {
	st := metrics.FromConditions(c.Status.Conditions, c.Spec.StormCooldownDuration, now)
	st.Name = c.Namespace + "/" + c.Name
	st.Targets, st.Healthy = c.Status.ExpectedMachines, c.Status.CurrentHealthy
	for _, m := range c.Status.UnhealthyMachines {
		st.Count(m.RemediationProgress)
	}
	return st
}
