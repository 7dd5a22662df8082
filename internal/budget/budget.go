package budget

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Policy is a health check's budget. At most one of MaxUnhealthy (optionally overridden by UnhealthyRange)
// and MinHealthy may be set.
type Policy struct {
	// MaxUnhealthy is the largest number of unhealthy targets at which remediation still happens.
	MaxUnhealthy *intstr.IntOrString
	// UnhealthyRange is "[min-max]"; when not empty it takes precedence over MaxUnhealthy.
	UnhealthyRange string
	// MinHealthy is the smallest number of healthy targets at which remediation still happens.
	MinHealthy *intstr.IntOrString
}

// Decision is the outcome of Evaluate.
type Decision struct {
	// Allowed is true when remediation may proceed.
	Allowed bool
	// Exceeded: more targets are unhealthy than the budget allows (a storm). Not Allowed and not Exceeded
	// is an unhealthyRange whose minimum is not reached: Cluster API remediates nothing then either, but
	// that is no storm.
	Exceeded bool
	// RemediationsAllowed is how many more targets may become unhealthy with remediation still allowed;
	// zero when not Allowed.
	RemediationsAllowed int32
	// Message explains the decision for a condition or an event, e.g. "3 of 10 targets unhealthy, at most
	// 2 allowed (maxUnhealthy 20%)".
	Message string
}

// InvalidValueError reports a malformed budget field.
type InvalidValueError struct {
	// Field is the field's JSON name: maxUnhealthy, unhealthyRange or minHealthy.
	Field string
	// Value is the rejected value.
	Value string
	// Reason says what is wrong with it.
	Reason string
}

func (e *InvalidValueError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

// Evaluate applies p to a pool of total targets, unhealthy of which are unhealthy. unhealthy is clamped to
// 0..total.
func Evaluate(p Policy, total, unhealthy int) (Decision, error) {
	total = max(total, 0)
	unhealthy = min(max(unhealthy, 0), total)
	healthy := total - unhealthy

	if p.MinHealthy != nil && (p.MaxUnhealthy != nil || p.UnhealthyRange != "") {
		return Decision{}, &InvalidValueError{Field: "minHealthy", Value: p.MinHealthy.String(),
			Reason: "cannot be combined with maxUnhealthy or unhealthyRange"}
	}

	switch {
	case p.UnhealthyRange != "":
		lo, hi, err := ParseUnhealthyRange(p.UnhealthyRange)
		if err != nil {
			return Decision{}, err
		}
		d := decide(unhealthy <= hi, hi-unhealthy,
			fmt.Sprintf("%d of %d targets unhealthy, allowed range %s (unhealthyRange)", unhealthy, total, p.UnhealthyRange))
		if unhealthy < lo {
			d.Allowed, d.RemediationsAllowed = false, 0
		}
		return d, nil

	case p.MaxUnhealthy != nil:
		maxU, err := scaled("maxUnhealthy", p.MaxUnhealthy, total, false)
		if err != nil {
			return Decision{}, err
		}
		return decide(unhealthy <= maxU, maxU-unhealthy,
			fmt.Sprintf("%d of %d targets unhealthy, at most %d allowed (maxUnhealthy %s)", unhealthy, total, maxU, p.MaxUnhealthy)), nil

	case p.MinHealthy != nil:
		minH, err := scaled("minHealthy", p.MinHealthy, total, true)
		if err != nil {
			return Decision{}, err
		}
		return decide(healthy >= minH, healthy-minH,
			fmt.Sprintf("%d of %d targets healthy, at least %d required (minHealthy %s)", healthy, total, minH, p.MinHealthy)), nil

	default:
		return decide(true, healthy, fmt.Sprintf("%d of %d targets unhealthy, no limit", unhealthy, total)), nil
	}
}

func decide(allowed bool, headroom int, msg string) Decision {
	if !allowed {
		return Decision{Exceeded: true, Message: msg}
	}
	return Decision{Allowed: true, RemediationsAllowed: int32(min(max(headroom, 0), math.MaxInt32)), Message: msg}
}

// scaled resolves an int-or-percent field against total, refusing negative integers and percentages
// outside 0%..100%.
func scaled(field string, v *intstr.IntOrString, total int, roundUp bool) (int, error) {
	if v.Type == intstr.String {
		s := v.StrVal
		pct, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
		if !strings.HasSuffix(s, "%") || err != nil {
			return 0, &InvalidValueError{Field: field, Value: s, Reason: "must be an integer or a whole percentage such as 40%"}
		}
		if pct < 0 || pct > 100 {
			return 0, &InvalidValueError{Field: field, Value: s, Reason: "percentage must be between 0% and 100%"}
		}
	} else if v.IntVal < 0 {
		return 0, &InvalidValueError{Field: field, Value: v.String(), Reason: "must not be negative"}
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, roundUp)
	if err != nil {
		return 0, &InvalidValueError{Field: field, Value: v.String(), Reason: err.Error()}
	}
	return n, nil
}

var rangeRE = regexp.MustCompile(`^\[([0-9]+)-([0-9]+)\]$`)

// ParseUnhealthyRange parses "[min-max]" with min <= max.
func ParseUnhealthyRange(s string) (lo, hi int, err error) {
	m := rangeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, &InvalidValueError{Field: "unhealthyRange", Value: s, Reason: `must look like "[min-max]", e.g. "[3-5]"`}
	}
	lo, errLo := strconv.Atoi(m[1])
	hi, errHi := strconv.Atoi(m[2])
	if errLo != nil || errHi != nil {
		return 0, 0, &InvalidValueError{Field: "unhealthyRange", Value: s, Reason: "bounds out of range"}
	}
	if lo > hi {
		return 0, 0, &InvalidValueError{Field: "unhealthyRange", Value: s, Reason: "min must not be greater than max"}
	}
	return lo, hi, nil
}
