package backoff

import (
	"slices"
	"time"
)

// MaxStarts bounds the start times kept per target: the API's bound on the status list. A target with
// more recent remediations than this keeps the newest; the wait has reached max long before.
const MaxStarts = 16

// Policy is a check's spec.remediationBackoff.
type Policy struct {
	// After is how many remediations within Window start without waiting; 0 turns the back-off off.
	After int
	// Window is how far back remediations count.
	Window time.Duration
	// Initial is the first wait, doubled for every further remediation in the window, at most Max.
	Initial, Max time.Duration
}

// Enabled reports whether the policy holds anything back.
func (p Policy) Enabled() bool {
	return p.After > 0 && p.Window > 0 && p.Initial > 0
}

// Decision is what Decide found.
type Decision struct {
	// Allowed: a new remediation may start now.
	Allowed bool
	// Until is when the hold ends (zero when Allowed).
	Until time.Time
	// Count is the number of remediations within the window now, Wait the wait they call for after the
	// last one (zero below After).
	Count int
	Wait  time.Duration
}

// Wait is the wait after the last start when count remediations started within the window.
func (p Policy) Wait(count int) time.Duration {
	if !p.Enabled() || count < p.After {
		return 0
	}
	w := p.Initial
	for i := p.After; i < count; i++ {
		if p.Max > 0 && w >= p.Max {
			break
		}
		w *= 2
	}
	if p.Max > 0 && w > p.Max {
		w = p.Max
	}
	return w
}

// Decide tells whether a new remediation of a target whose earlier remediations started at starts may
// start at now, and if not, the exact instant it may: the first instant at which the wait after the last
// start has passed, taking into account that older starts leave the window meanwhile (which shortens the
// wait). starts may be in any order and may include times outside the window.
func Decide(p Policy, starts []time.Time, now time.Time) Decision {
	if !p.Enabled() {
		return Decision{Allowed: true}
	}
	s := slices.Clone(starts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	first := Decision{Allowed: true}
	t := now
	for i := 0; i <= len(s); i++ { // each turn, one start more has left the window: bounded by len(s)
		in := within(s, t, p.Window)
		k := len(in)
		wait := p.Wait(k)
		if t.Equal(now) {
			first.Count, first.Wait = k, wait
		}
		if k < p.After {
			break
		}
		until := in[k-1].Add(wait)
		if !until.After(t) {
			break
		}
		// Held at t. The oldest start in the window leaves it at leaves; if that comes before until, the
		// wait may be shorter from then on: look again at that instant.
		leaves := in[0].Add(p.Window)
		if !leaves.Before(until) {
			first.Allowed, first.Until = false, until
			return first
		}
		first.Allowed, first.Until = false, leaves
		t = leaves
	}
	if t.Equal(now) {
		return first
	}
	first.Until = t
	return first
}

// within returns the starts s (sorted) in (t-window, t].
func within(s []time.Time, t time.Time, window time.Duration) []time.Time {
	from := t.Add(-window)
	lo := slices.IndexFunc(s, func(x time.Time) bool { return x.After(from) })
	if lo < 0 {
		return nil
	}
	hi := len(s)
	for hi > lo && s[hi-1].After(t) {
		hi--
	}
	return s[lo:hi]
}

// Record returns starts with start added (unless already there, to the second: the precision of a time in
// status), without the starts that left the window at now, oldest first, at most MaxStarts. A zero start
// adds nothing.
func Record(p Policy, starts []time.Time, start, now time.Time) []time.Time {
	out := make([]time.Time, 0, len(starts)+1)
	add := func(t time.Time) {
		t = t.Truncate(time.Second)
		if !t.After(now.Add(-p.Window)) || slices.ContainsFunc(out, t.Equal) {
			return
		}
		out = append(out, t)
	}
	for _, t := range starts {
		add(t)
	}
	if !start.IsZero() {
		add(start)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	if n := len(out); n > MaxStarts {
		out = out[n-MaxStarts:]
	}
	return out
}
