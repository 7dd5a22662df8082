package mhc

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/engine"
)

// blockedBackingOff: the Machine was remediated too often lately; its next remediation waits
// (remediationBackoff).
const blockedBackingOff blocker = engine.SkipBackingOff

// backingOff holds back the first request of a new remediation of a Machine remediated too often within
// the back-off's window (escalation steps and re-creations are never held): the request is not created,
// status.recentRemediations[].backoffUntil says until when, a Normal event says so once per hold, and the
// check looks again when the hold ends. Condition-based remediation (no template) is not held back.
func (p *plan) backingOff(mhc *v1alpha1.MachineHealthCheck, t *targetPlan, entry *v1alpha1.UnhealthyMachine) {
	if t.Create == nil || !t.Create.First {
		return
	}
	m := p.Backoff
	dec, isNew := m.Hold(t.Machine.Name)
	if dec.Allowed {
		return
	}
	t.Create, t.Blocked = nil, blockedBackingOff
	entry.Remediations = nil // escalate recorded the request it asked for
	entry.SkipReason, entry.SkipMessage = string(blockedBackingOff), m.HoldMessage(dec)
	p.NextCheck = earliest(p.NextCheck, dec.Until)
	if isNew {
		p.Events = append(p.Events, checkEvent{Regarding: t.Machine, Related: mhc, Type: corev1.EventTypeNormal,
			Reason: EventRemediationBackingOff, Note: fmt.Sprintf(
				"Machine is unhealthy again (%s) after %d remediations within %s: its next remediation starts at %s "+
					"(remediationBackoff)", t.Verdict.Reason, dec.Count, m.Policy.Window, dec.Until.UTC().Format(time.RFC3339))})
	}
}

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
