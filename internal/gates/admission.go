package gates

import (
	"time"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// Skip reasons of Admission, the same for both kinds of check.
const (
	SkipControlPlaneBusy = "ControlPlaneBusy"
	SkipLeaseHeldByOther = v1alpha1.ReasonLeaseHeldByOther
)

// Admission applies the gates a new remediation passes last, target by target in the order a check
// offers them (the order their criteria expired): a control-plane target only while no other
// control-plane target is busy (remediated by any check, held by anyone's lease, or admitted earlier in
// this decision), and only a target whose Node's lease nobody else holds.
type Admission struct {
	holder string
	leases map[string]Lease
	busy   map[string]bool
	now    time.Time
}

// NewAdmission starts a decision: holder is the check's lease holder identity, leases the node leases by
// Node, busy the control-plane targets already busy.
func NewAdmission(holder string, leases map[string]Lease, busy []string, now time.Time) *Admission {
	a := &Admission{holder: holder, leases: leases, busy: map[string]bool{}, now: now}
	for _, b := range busy {
		a.busy[b] = true
	}
	return a
}

// Busy marks a control-plane target busy (one this check remediates already).
func (a *Admission) Busy(key string) { a.busy[key] = true }

// Admit decides for one target: cpKey names it for the one-at-a-time rule ("" for a worker), node is its
// Node ("" when it has none). It returns "" when the target may start (a control-plane one is busy from
// then on), else the skip reason and message, and when to look again (a held lease's end; zero otherwise).
func (a *Admission) Admit(cpKey, node string) (reason, message string, retry time.Time) {
	if other := ControlPlaneBusy(a.busy, cpKey); cpKey != "" && other != "" {
		return SkipControlPlaneBusy, ControlPlaneBusyMessage("node", other), time.Time{}
	}
	if node != "" {
		l := a.leases[node]
		if retry, held := l.HeldByOther(a.holder, a.now); held {
			return SkipLeaseHeldByOther, l.HeldMessage(), retry
		}
	}
	if cpKey != "" {
		a.busy[cpKey] = true
	}
	return "", "", time.Time{}
}
