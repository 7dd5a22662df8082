package nhc

import (
	"github.com/metalheal/metalheal/api/v1alpha1"
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
