package nhc

import (
	"fmt"
	"time"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/engine"
)

// SkipBackingOff: the Node was remediated too often lately; its next remediation waits (remediationBackoff).
const SkipBackingOff = engine.SkipBackingOff

// backingOff holds back the first request of a new remediation of a Node remediated too often within the
// back-off's window: the Node's status says so with the hold's end (recentRemediations[].backoffUntil), a
// Normal event says so once per hold, and the check looks again when it ends. It reports whether the Node
// waits.
func (d *decider) backingOff(e, prev *v1alpha1.UnhealthyNode, why string) bool {
	m := d.p.Backoff
	dec, isNew := m.Hold(e.Name)
	if dec.Allowed {
		return false
	}
	d.p.at(dec.Until)
	until := dec.Until.UTC().Format(time.RFC3339)
	e.SkipReason, e.SkipMessage = SkipBackingOff, m.HoldMessage(dec)
	if isNew || prev == nil || prev.SkipReason != SkipBackingOff {
		d.p.Skipped = append(d.p.Skipped, SkipBackingOff)
		d.p.Events = append(d.p.Events, normal(EventRemediationBackingOff, actionSkip, e.Name, fmt.Sprintf(
			"Node %s is unhealthy again (%s) after %d remediations within %s: its next remediation starts at %s "+
				"(remediationBackoff)", e.Name, why, dec.Count, m.Policy.Window, until)))
	}
	return true
}

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
