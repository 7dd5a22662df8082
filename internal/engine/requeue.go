package engine

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultResyncPeriod is how often a check is looked at again when nothing is pending: a safety net only
// (every deadline a decision knows of, a condition's expiry above all, is requeued at exactly), for what
// no watch reports (a lost event, a clock step).
const DefaultResyncPeriod = 60 * time.Second

// RequeueAfter is how long until a check is looked at again: at next, the earliest deadline its decision
// found (zero: none), at retry when that is set and sooner, and at the latest after resync; never less
// than a nanosecond (a deadline just passed is looked at again at once: zero would mean never).
func RequeueAfter(next, now time.Time, resync, retry time.Duration) time.Duration {
	d := resync
	if !next.IsZero() {
		d = min(d, next.Sub(now))
	}
	if retry > 0 {
		d = min(d, retry)
	}
	return max(d, time.Nanosecond)
}

// DurationOf is a spec's duration, zero when unset.
func DurationOf(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}
