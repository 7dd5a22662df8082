package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/gates"
)

// EventRemediationBackingOff (Normal) says once per hold that a target's next remediation waits out the
// repeat back-off (remediationBackoff), with the hold's end.
const EventRemediationBackingOff = "RemediationBackingOff"

// Gate applies, target by target in the order their criteria expired, the gates a new start passes once a
// target's walk asks for one (a first request, the next escalation step, a request asked for again, or a
// Machine's hand-over to its owner) and neither the check (paused, disabled, a storm) nor the target (the
// exclude label) holds it back. The order is the same for both kinds: the overlapping rule, the repeat
// back-off (a new remediation only), control-plane targets one at a time and the Node's lease
// (gates.Admission), and dry run.
type Gate struct {
	Admission *gates.Admission
	Backoff   *backoff.Memory
	DryRun    bool
}

// Start is a new start Gate decides.
type Start struct {
	// Target names the target (its back-off memory); Node is its Node ("" without one); CPKey names it
	// under the one-control-plane-at-a-time rule ("" for a target that is not a control-plane one).
	Target, Node, CPKey string
	// Owner says whether the target is another's: another check owns it (the overlapping rule, which
	// leaves a target the check remediates already to it), or the request the check would create. It
	// returns the skip reason and message, "" when the start is the check's. Nil: always the check's.
	Owner func() (reason, message string)
	// First: a new remediation, which the back-off may hold.
	First bool
	// WouldDo is what a check in dry run says it would have done (WouldCreate, WouldHandToOwner).
	WouldDo string
}

// Start decides one start: nil lets it go ahead (a control-plane target is busy from then on).
func (g Gate) Start(s Start) *Skip {
	if s.Owner != nil {
		if reason, msg := s.Owner(); reason != "" {
			return &Skip{Reason: reason, Message: msg}
		}
	}
	if s.First && g.Backoff != nil {
		if dec, isNew := g.Backoff.Hold(s.Target); !dec.Allowed {
			return &Skip{Reason: SkipBackingOff, Message: g.Backoff.HoldMessage(dec), Retry: dec.Until, Hold: &dec, NewHold: isNew,
				Window: g.Backoff.Policy.Window}
		}
	}
	if reason, msg, retry := g.Admission.Admit(s.CPKey, s.Node); reason != "" {
		return &Skip{Reason: reason, Message: msg, Retry: retry}
	}
	if g.DryRun {
		return &Skip{Reason: SkipDryRun, Message: s.WouldDo}
	}
	return nil
}

// Event is an event about a target a decision asks for.
type Event struct {
	// Reason is the event's reason; "" for a skip, which each kind reports under its own reasons.
	Reason string
	Normal bool
	Note   string
}

// Event is the event of a skip of subject ("Node worker-1", "Machine"), unhealthy for why, whose status
// said prevReason and prevMessage before: once per reason and message, and once per back-off hold (nil
// when the status said so already). A back-off hold and a dry run are Normal events of their own reasons.
func (r Skip) Event(prevReason, prevMessage, subject, why string) *Event {
	if !r.NewHold && prevReason == r.Reason && prevMessage == r.Message {
		return nil
	}
	switch {
	case r.Hold != nil:
		return &Event{Reason: EventRemediationBackingOff, Normal: true, Note: fmt.Sprintf(
			"%s is unhealthy again (%s) after %d remediations within %s: its next remediation starts at %s (remediationBackoff)",
			subject, why, r.Hold.Count, r.Window, r.Hold.Until.UTC().Format(time.RFC3339))}
	case r.Reason == SkipDryRun:
		return &Event{Reason: EventWouldRemediate, Normal: true, Note: fmt.Sprintf("%s is unhealthy (%s): %s", subject, why, r.Message)}
	}
	return &Event{Note: fmt.Sprintf("%s is unhealthy (%s) but is not remediated: %s", subject, why, r.Message)}
}

// RecordBackoff sets, in a kind's back-off series (backoff.NHCMetrics, backoff.MHCMetrics), how many
// targets the check's back-off memory holds back now (nil: none) and counts the holds its pass began.
func RecordBackoff(m backoff.Metrics, check string, memory *backoff.Memory, began int) {
	held := 0
	if memory != nil {
		held = memory.Held()
	}
	m.Held.WithLabelValues(check).Set(float64(held))
	m.Holds.Add(float64(began))
}

// LeasedControlPlane are the control-plane Nodes whose lease someone other than holder holds at now (node
// maintenance, a remediator, another check), in order: one control-plane Node down at a time, whoever
// took it down. isCP reads a Node's role (false for a Node gone).
func LeasedControlPlane(ctx context.Context, leases map[string]gates.Lease, holder string, now time.Time,
	isCP func(context.Context, string) (bool, error)) ([]string, error) {
	var out []string
	for node, l := range leases {
		if _, held := l.HeldByOther(holder, now); !held {
			continue
		}
		if cp, err := isCP(ctx, node); err != nil {
			return nil, err
		} else if cp {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out, nil
}
