package nhc

import (
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/metrics"
)

// RegisterStateMetrics reports every NodeHealthCheck's state gauges (internal/metrics: storm, budget,
// disabled, in-flight requests), read from reader (the manager's cache) at scrape time once elected is
// closed.
func RegisterStateMetrics(reader client.Reader, clk clock.PassiveClock, elected <-chan struct{}) {
	metrics.AddCheckKind(metrics.CheckerNHC, reader, clk, elected,
		func(l *v1alpha1.NodeHealthCheckList) []v1alpha1.NodeHealthCheck { return l.Items }, checkState)
}

// checkState is what c's status says now.
func checkState(c *v1alpha1.NodeHealthCheck, now time.Time) metrics.CheckState {
	st := metrics.FromConditions(c.Status.Conditions, c.Spec.StormCooldownDuration, now)
	st.Name = c.Name
	st.Targets, st.Healthy = c.Status.ObservedNodes, c.Status.HealthyNodes
	for _, u := range c.Status.UnhealthyNodes {
		st.Count(u.RemediationProgress)
	}
	return st
}
