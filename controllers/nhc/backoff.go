package nhc

import (
	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/engine"
)

// SkipBackingOff: the Node was remediated too often lately; its next remediation waits (remediationBackoff).
const SkipBackingOff = engine.SkipBackingOff

// recentRemediations is the new status.recentRemediations: the memory, with the first request of every
// remediation in the plan's entries (execute has recorded what it created) as a start.
// A plan not made by decide (no memory) keeps the check's list.
func (p *plan) recentRemediations(check *v1alpha1.NodeHealthCheck) []v1alpha1.RecentRemediation {
	m := p.Backoff
	if m == nil {
		return check.Status.RecentRemediations
	}
	for name, e := range p.Entries {
		if len(e.Remediations) > 0 {
			m.Started(name, e.Remediations[0].Started.Time)
		}
	}
	return m.Status()
}

// recordBackoffMetrics counts the holds this decision began and sets the number of Nodes held back.
func recordBackoffMetrics(check string, p *plan) {
	held := 0
	if p.Backoff != nil {
		held = p.Backoff.Held()
	}
	backoff.NHCMetrics.Held.WithLabelValues(check).Set(float64(held))
	for _, reason := range p.Skipped {
		if reason == SkipBackingOff {
			backoff.NHCMetrics.Holds.Inc()
		}
	}
}

// forgetBackoffMetrics deletes a deleted check's series.
func forgetBackoffMetrics(check string) {
	backoff.NHCMetrics.Held.DeleteLabelValues(check)
}
