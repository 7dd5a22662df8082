package mhc

import (
	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
)

// recentRemediations is the new status.recentRemediations, once execute has dropped the records of the
// requests it could not create: the memory, with the first request of every remediation in status as a
// start.
func (p *plan) recentRemediations() []v1alpha1.RecentRemediation {
	for _, um := range p.Status.UnhealthyMachines {
		if len(um.Remediations) > 0 {
			p.Backoff.Started(um.Name, um.Remediations[0].Started.Time)
		}
	}
	return p.Backoff.Status()
}

// recordBackoffMetrics counts the holds the plan began and sets the number of Machines held back.
func recordBackoffMetrics(check string, p plan) {
	held := 0
	if p.Backoff != nil {
		held = p.Backoff.Held()
	}
	backoff.MHCMetrics.Held.WithLabelValues(check).Set(float64(held))
	for _, e := range p.Events {
		if e.Reason == EventRemediationBackingOff {
			backoff.MHCMetrics.Holds.Inc()
		}
	}
}

// forgetBackoffMetrics deletes a deleted check's series.
func forgetBackoffMetrics(check string) {
	backoff.MHCMetrics.Held.DeleteLabelValues(check)
}
