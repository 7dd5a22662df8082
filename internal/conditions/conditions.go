package conditions

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Criterion describes an unhealthy condition: the target is unhealthy once a condition of Type has had
// Status for at least Duration. A negative Duration counts as zero.
type Criterion struct {
	Type     string
	Status   string
	Duration time.Duration
}

// Condition is the part of a Kubernetes condition that matching needs. NodeConditions converts a Node's.
type Condition struct {
	Type               string
	Status             string
	LastTransitionTime time.Time
}

// NodeConditions converts a Node's status conditions for Evaluate.
func NodeConditions(in []corev1.NodeCondition) []Condition {
	out := make([]Condition, 0, len(in))
	for _, c := range in {
		out = append(out, Condition{
			Type:               string(c.Type),
			Status:             string(c.Status),
			LastTransitionTime: c.LastTransitionTime.Time,
		})
	}
	return out
}

// MetaConditions converts an object's metav1 conditions (a Machine's, say) for Evaluate.
func MetaConditions(in []metav1.Condition) []Condition {
	out := make([]Condition, 0, len(in))
	for _, c := range in {
		out = append(out, Condition{Type: c.Type, Status: string(c.Status), LastTransitionTime: c.LastTransitionTime.Time})
	}
	return out
}

// Result is the outcome of Evaluate.
type Result struct {
	// Unhealthy is true when at least one criterion has expired.
	Unhealthy bool
	// Matched is the expired criterion; when several have expired, the one that expired first. Zero when
	// healthy.
	Matched Criterion
	// ExpiredAt is the instant Matched expired: the condition's LastTransitionTime plus the criterion's
	// Duration. Zero when healthy (and when the condition has no LastTransitionTime).
	ExpiredAt time.Time
	// NextCheck is the earliest instant at which a criterion that matches now but has not expired yet will
	// expire, or zero if there is none. It is reported even when the target is already unhealthy.
	NextCheck time.Time
}

// RequeueAfter returns how long after now NextCheck is, or 0 if there is no NextCheck. It is never
// negative.
func (r Result) RequeueAfter(now time.Time) time.Duration {
	if r.NextCheck.IsZero() {
		return 0
	}
	d := r.NextCheck.Sub(now)
	if d <= 0 {
		// Should not happen for a Result computed at now; requeue immediately rather than never.
		return time.Nanosecond
	}
	return d
}

// Evaluate matches conditions against criteria at now. A criterion has expired when
// now >= LastTransitionTime+Duration.
func Evaluate(conds []Condition, criteria []Criterion, now time.Time) Result {
	var r Result
	for _, crit := range criteria {
		d := max(crit.Duration, 0)
		for _, c := range conds {
			if c.Type != crit.Type || c.Status != crit.Status {
				continue
			}
			if c.LastTransitionTime.IsZero() {
				// Unknown since when: it has held forever (Cluster API semantics). It sorts before any
				// real expiry.
				if !r.Unhealthy || !r.ExpiredAt.IsZero() {
					r.Unhealthy, r.Matched, r.ExpiredAt = true, crit, time.Time{}
				}
				continue
			}
			expiry := c.LastTransitionTime.Add(d)
			if !now.Before(expiry) {
				if !r.Unhealthy || (!r.ExpiredAt.IsZero() && expiry.Before(r.ExpiredAt)) {
					r.Unhealthy, r.Matched, r.ExpiredAt = true, crit, expiry
				}
				continue
			}
			if r.NextCheck.IsZero() || expiry.Before(r.NextCheck) {
				r.NextCheck = expiry
			}
		}
	}
	return r
}
