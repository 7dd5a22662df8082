package powercycle

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// The BMC inventory's decisions are pure functions of what was observed and the time: when to check,
// what a check means for the status, and which event a change deserves.

// bmcCheckRecord is what the controller remembers of its last check of one BMC: what it checked (the BMC's
// UID and generation, its Secret's resourceVersion) and when.
type bmcCheckRecord struct {
	uid           types.UID
	generation    int64
	secretVersion string
	at            time.Time
}

// bmcCheckDue says whether a BMC whose current state is cur must be checked now, given the last check this
// process made of it (nil if none): yes when there was none, when the BMC's spec or its Secret changed
// since, or once interval has passed. Otherwise it returns how long until the next check is due.
func bmcCheckDue(last *bmcCheckRecord, cur bmcCheckRecord, now time.Time, interval time.Duration) (bool, time.Duration) {
	if last == nil || last.uid != cur.uid || last.generation != cur.generation || last.secretVersion != cur.secretVersion {
		return true, 0
	}
	next := last.at.Add(interval)
	if !now.Before(next) {
		return true, 0
	}
	return false, next.Sub(now)
}

// bmcAssessment is what one check means for a BMC's status. The conditions carry type, status, reason and
// message; the caller stamps times and generations.
type bmcAssessment struct {
	power       v1alpha1.PowerState
	reachable   metav1.Condition
	credentials metav1.Condition
}

// Bounds, in bytes, of a condition message (the API allows 32768; an admin reads far fewer) and of an
// event note (events.k8s.io refuses more than 1024).
const (
	bmcMaxMessage = 1024
	bmcMaxNote    = 1024
)

// bmcAssess interprets a check of b: the power state read, or the error that kept it from being read (from
// bmcaccess, for a BMC that could not be turned into a driver, or from the driver). timeout is the
// check's bound, for the message.
func bmcAssess(b *v1alpha1.BMC, state bmc.PowerState, err error, timeout time.Duration) bmcAssessment {
	secret := b.Spec.CredentialsSecretRef.Name
	reachable := func(s metav1.ConditionStatus, reason, format string, args ...any) metav1.Condition {
		return bmcCondition(v1alpha1.ConditionReachable, s, reason, fmt.Sprintf(format, args...))
	}
	credentials := func(s metav1.ConditionStatus, reason, format string, args ...any) metav1.Condition {
		return bmcCondition(v1alpha1.ConditionCredentialsValid, s, reason, fmt.Sprintf(format, args...))
	}
	notChecked := func(reason, why string) metav1.Condition {
		return credentials(metav1.ConditionUnknown, reason, "Not checked: %s", why)
	}
	a := bmcAssessment{power: v1alpha1.PowerUnknown}
	cause := bmcDescribe(err)

	switch reason := bmcaccess.Reason(err); {
	case err == nil:
		a.power = bmcPowerState(state)
		a.reachable = reachable(metav1.ConditionTrue, v1alpha1.ReasonCheckSucceeded, "The BMC answered: the host is %s", a.power)
		a.credentials = credentials(metav1.ConditionTrue, v1alpha1.ReasonCheckSucceeded, "The BMC accepted the credentials in Secret %q", secret)

	case reason == v1alpha1.ReasonAuthenticationFailed:
		a.reachable = reachable(metav1.ConditionTrue, v1alpha1.ReasonCheckSucceeded, "The BMC answered, but refused the credentials (see CredentialsValid)")
		a.credentials = credentials(metav1.ConditionFalse, reason,
			"The BMC refused the username or password in Secret %q: fix them there; the BMC is checked again as soon as the Secret changes (%s)", secret, cause)

	case reason == v1alpha1.ReasonSecretNotFound:
		a.reachable = reachable(metav1.ConditionUnknown, reason, "Not checked: the credentials Secret is missing")
		a.credentials = credentials(metav1.ConditionFalse, reason,
			"Create Secret %q in namespace %q with the keys username and password (%s)", secret, b.Namespace, cause)

	case reason == v1alpha1.ReasonInvalidCredentials:
		a.reachable = reachable(metav1.ConditionUnknown, reason, "Not checked: the credentials Secret is incomplete")
		a.credentials = credentials(metav1.ConditionFalse, reason,
			"Secret %q must hold non-empty keys username and password (%s)", secret, cause)

	case reason == v1alpha1.ReasonInvalidAddress:
		a.reachable = reachable(metav1.ConditionFalse, reason, "Fix spec.address (%s)", cause)
		a.credentials = notChecked(reason, "the address is invalid")

	case reason == v1alpha1.ReasonUnsupported:
		a.reachable = reachable(metav1.ConditionFalse, reason, "The BMC cannot be used as addressed (%s)", cause)
		a.credentials = notChecked(reason, "the BMC cannot be used as addressed")

	case reason == v1alpha1.ReasonBMCTimeout:
		a.reachable = reachable(metav1.ConditionFalse, reason, "The BMC did not answer within %s (%s)", timeout, cause)
		a.credentials = notChecked(reason, "the BMC did not answer")

	default: // unreachable, or an error no driver should return
		a.reachable = reachable(metav1.ConditionFalse, v1alpha1.ReasonBMCUnreachable, "The BMC did not answer (%s)", cause)
		a.credentials = notChecked(v1alpha1.ReasonBMCUnreachable, "the BMC did not answer")
	}
	return a
}

func bmcCondition(t string, s metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: truncateUTF8(message, bmcMaxMessage)}
}

// truncateUTF8 shortens s to at most n bytes, on a rune boundary, marking the cut with an ellipsis.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// bmcDescribe is the part of err worth showing on the BMC itself: an access error without the "BMC ns/name"
// it is about.
func bmcDescribe(err error) string {
	var accessErr *bmcaccess.Error
	if errors.As(err, &accessErr) && accessErr.Err != nil {
		return accessErr.Err.Error()
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

func bmcPowerState(s bmc.PowerState) v1alpha1.PowerState {
	switch s {
	case bmc.PowerStateOn:
		return v1alpha1.PowerOn
	case bmc.PowerStateOff:
		return v1alpha1.PowerOff
	default:
		return v1alpha1.PowerUnknown
	}
}

// bmcProblem returns the False condition among Reachable and CredentialsValid that explains what is wrong
// (Reachable first: an unreachable BMC cannot judge credentials), or nil when nothing is False.
func bmcProblem(reachable, credentials *metav1.Condition) *metav1.Condition {
	for _, c := range []*metav1.Condition{reachable, credentials} {
		if c != nil && c.Status == metav1.ConditionFalse {
			return c
		}
	}
	return nil
}

// bmcEvent is an event to emit about a BMC.
type bmcEvent struct {
	kind   string // corev1.EventTypeNormal or corev1.EventTypeWarning
	reason string
	note   string
}

// bmcTransitionEvent returns the event a change of the BMC's state deserves, or nil: a Warning when a new
// problem appears (or the problem changes), a Normal event when a problem clears. A first check that
// finds nothing wrong, and a check that finds what the last one found, say nothing.
func bmcTransitionEvent(oldReachable, oldCredentials *metav1.Condition, a bmcAssessment) *bmcEvent {
	before := bmcProblem(oldReachable, oldCredentials)
	after := bmcProblem(&a.reachable, &a.credentials)
	switch {
	case before == nil && after == nil:
		return nil
	case after == nil:
		return &bmcEvent{kind: corev1.EventTypeNormal, reason: EventBMCRecovered,
			note: fmt.Sprintf("The BMC answers and accepts its credentials again (was %s); the host is %s", before.Reason, a.power)}
	case before != nil && before.Type == after.Type && before.Reason == after.Reason:
		return nil
	}
	var reason string
	switch after.Reason {
	case v1alpha1.ReasonBMCUnreachable, v1alpha1.ReasonBMCTimeout:
		reason = EventBMCUnreachable
	case v1alpha1.ReasonAuthenticationFailed, v1alpha1.ReasonSecretNotFound, v1alpha1.ReasonInvalidCredentials:
		reason = EventBMCCredentialsInvalid
	default:
		reason = EventBMCMisconfigured
	}
	return &bmcEvent{kind: corev1.EventTypeWarning, reason: reason, note: truncateUTF8(after.Reason+": "+after.Message, bmcMaxNote)}
}
