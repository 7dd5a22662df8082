package bmcinventory

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/eventnote"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// The BMC inventory's decisions are pure functions of what was observed and the time: when to check,
// what a check means for the status, and which event a change deserves.

// bmcCheckRecord is what the controller remembers of one BMC: what it last checked (the BMC's UID and
// generation, its Secret's resourceVersion, its CA bundle's version), whether the BMC was healthy then,
// and when it is next due. A BMC this process has not checked yet, but whose status shows a healthy check
// of its spec (the manager restarted), is remembered as it is with the slot it was given.
type bmcCheckRecord struct {
	uid           types.UID
	generation    int64
	secretVersion string
	// caBundleVersion is bmcaccess.Inputs.CABundleVersion: empty without a spec.caBundleRef.
	caBundleVersion string
	healthy         bool
	next            time.Time
}

// bmcSlotsPerInterval is how many instants of each check interval the periodic checks are grouped on.
// Checks spread one by one over the interval (17 a second at 5,000 BMCs and 5 minutes) wake the manager
// for each: a timer of its queue, a worker, a connection, and the manager goes idle again in between.
// Grouped on 30 instants (every 10 s at 5 minutes), a group's checks run together and the manager wakes
// once for them. Each BMC is still checked once an interval, and the BMCs, each its own machine, see no
// difference.
const bmcSlotsPerInterval = 30

// bmcPhase is the BMC's place in every check interval: one of bmcSlotsPerInterval offsets in
// [0, interval), evenly apart, chosen by a hash of its UID. The periodic checks of a BMC happen at the
// instants whose time modulo interval is its phase, so N BMCs spread their checks evenly over the
// interval, in groups of about N/bmcSlotsPerInterval, instead of all coming due together.
func bmcPhase(uid types.UID, interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	sum := sha256.Sum256([]byte(uid))
	// hash × slots / 2^64: uniform over the slots without the bias of a modulo.
	slot, _ := bits.Mul64(binary.BigEndian.Uint64(sum[:8]), bmcSlotsPerInterval)
	return time.Duration(int64(slot) * int64(interval) / bmcSlotsPerInterval)
}

// bmcNextSlot is the first instant at or after t whose time modulo interval (counted from the Unix
// epoch) is phase.
func bmcNextSlot(phase time.Duration, t time.Time, interval time.Duration) time.Time {
	if interval <= 0 {
		return t
	}
	offset := time.Duration(t.UnixNano() % int64(interval))
	if offset < 0 {
		offset += interval
	}
	wait := phase - offset
	if wait < 0 {
		wait += interval
	}
	return t.Add(wait)
}

// bmcSlotAfter is when a BMC checked at c is checked next: its first slot at least interval/2 after c.
// Two periodic checks of a BMC are thus between interval/2 and 1.5×interval apart, and one interval
// apart once every BMC runs in its slot.
func bmcSlotAfter(phase time.Duration, c time.Time, interval time.Duration) time.Time {
	return bmcNextSlot(phase, c.Add(interval/2), interval)
}

// bmcHealthy says whether conditions say the BMC answers and accepts its credentials.
func bmcHealthy(conditions []metav1.Condition) bool {
	return meta.IsStatusConditionTrue(conditions, v1alpha1.ConditionReachable) &&
		meta.IsStatusConditionTrue(conditions, v1alpha1.ConditionCredentialsValid)
}

// bmcCheckDue says whether b, whose current state is cur, must be checked now, and otherwise when its next
// check is due. last is what this process remembers of it (nil if nothing).
//
// A BMC is checked at once when it was never checked (no status.lastChecked, or a status that describes
// an older spec), when its spec, its Secret or its CA bundle changed since the last check, or when the last
// check found it unhealthy (an administrator fixing it wants to see the result). Otherwise it is checked
// when the next slot planned after its last check comes (bmcSlotAfter). When this process has not checked it yet
// (the manager just started), status.lastChecked stands for the last check; since lastChecked is only
// refreshed every bmcRefreshAge, that slot is often past: the BMC then waits for its next slot from now,
// so that a restart spreads its checks over one interval instead of re-checking every BMC at once.
func bmcCheckDue(last *bmcCheckRecord, cur bmcCheckRecord, b *v1alpha1.BMC, now time.Time, interval time.Duration) (bool, time.Time) {
	if !bmcKnownGood(last, cur, b) {
		return true, now
	}
	if last != nil {
		return !now.Before(last.next), last.next
	}
	phase := bmcPhase(cur.uid, interval)
	next := bmcSlotAfter(phase, bmcNotAfter(b.Status.LastChecked.Time, now), interval)
	if next.Before(now) {
		next = bmcNextSlot(phase, now, interval)
	}
	return !now.Before(next), next
}

// bmcKnownGood says whether b's last check, by this process (last) or before it started (the status),
// found it healthy, and nothing changed since: its next check is a periodic one, not news.
func bmcKnownGood(last *bmcCheckRecord, cur bmcCheckRecord, b *v1alpha1.BMC) bool {
	if last != nil {
		return last.uid == cur.uid && last.generation == cur.generation && last.secretVersion == cur.secretVersion &&
			last.caBundleVersion == cur.caBundleVersion && last.healthy
	}
	st := b.Status
	return st.LastChecked != nil && st.ObservedGeneration == b.Generation && bmcHealthy(st.Conditions)
}

// bmcNotAfter is t, or now when t is later: a check stamped in the future (a clock that went back, or
// another replica's clock) must not postpone the next one by more than 1.5×interval.
func bmcNotAfter(t, now time.Time) time.Time {
	if t.After(now) {
		return now
	}
	return t
}

// StatusRefreshAge is how old status.lastChecked may grow before a check that found nothing new
// writes it anyway (at least the check interval): often enough that lastChecked shows the inventory is
// alive, rarely enough that 5,000 healthy BMCs cost the API server a few writes per second, not one per
// check.
const StatusRefreshAge = 30 * time.Minute

// bmcRefreshAge is StatusRefreshAge, or interval if that is longer.
func bmcRefreshAge(interval time.Duration) time.Duration {
	return max(StatusRefreshAge, interval)
}

// bmcReportedStatus is the status that reports assessment a of b's generation, made at now, and whether
// it must be written: when something an administrator reads changed (a condition's status, reason,
// message or observedGeneration, the power state, status.observedGeneration), or when lastChecked is
// missing, older than refreshAge, or in the future. Otherwise the write is skipped, and lastChecked keeps
// the time of the last check that was written. A condition keeps its lastTransitionTime unless its status
// changes.
func bmcReportedStatus(old v1alpha1.BMCStatus, generation int64, a bmcAssessment, now time.Time, refreshAge time.Duration) (v1alpha1.BMCStatus, bool) {
	st := *old.DeepCopy()
	changed := st.PowerState != a.power || st.ObservedGeneration != generation
	checkedAt := metav1.NewTime(now)
	st.PowerState = a.power
	st.ObservedGeneration = generation
	for _, c := range []metav1.Condition{a.reachable, a.credentials, a.protection} {
		if c.Type == "" {
			continue // an assessment that says nothing of it
		}
		c.ObservedGeneration, c.LastTransitionTime = generation, checkedAt
		if meta.SetStatusCondition(&st.Conditions, c) {
			changed = true
		}
	}
	stale := st.LastChecked == nil || now.Sub(st.LastChecked.Time) >= refreshAge || st.LastChecked.After(now)
	if !changed && !stale {
		return old, false
	}
	st.LastChecked = &checkedAt
	return st, true
}

// bmcCheckResult is the result label of a check in Checks: the reason of the condition that says what
// is wrong, or CheckSucceeded.
func bmcCheckResult(a bmcAssessment) string {
	if p := bmcProblem(&a.reachable, &a.credentials); p != nil {
		return p.Reason
	}
	return a.reachable.Reason
}

// bmcAssessment is what one check means for a BMC's status. The conditions carry type, status, reason and
// message; the caller stamps times and generations.
type bmcAssessment struct {
	power       v1alpha1.PowerState
	reachable   metav1.Condition
	credentials metav1.Condition
	// protection is CredentialsProtected: how the spec sends the credentials, whatever the check found.
	protection metav1.Condition
}

// healthy says whether the check found the BMC answering and accepting its credentials.
func (a bmcAssessment) healthy() bool {
	return a.reachable.Status == metav1.ConditionTrue && a.credentials.Status == metav1.ConditionTrue
}

// Bounds, in bytes, of a condition message (the API allows 32768; an admin reads far fewer) and of an
// event note (events.k8s.io refuses more).
const (
	bmcMaxMessage = 1024
	bmcMaxNote    = eventnote.MaxBytes
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

	case reason == v1alpha1.ReasonCABundleNotFound:
		a.reachable = reachable(metav1.ConditionFalse, reason,
			"Not checked: the CA bundle that spec.caBundleRef names is missing; create it, with the PEM certificates "+
				"of the authority that signed the BMC's certificate (%s)", cause)
		a.credentials = notChecked(reason, "the CA bundle is missing")

	case reason == v1alpha1.ReasonCABundleInvalid:
		a.reachable = reachable(metav1.ConditionFalse, reason,
			"Not checked: the CA bundle that spec.caBundleRef names holds no usable certificate; put the PEM "+
				"certificates (-----BEGIN CERTIFICATE-----) of the authority that signed the BMC's certificate there (%s)", cause)
		a.credentials = notChecked(reason, "the CA bundle is invalid")

	case reason == v1alpha1.ReasonCertificateVerificationFailed:
		a.reachable = reachable(metav1.ConditionFalse, reason, "%s (%s)", bmcCertificateAdvice(b), cause)
		a.credentials = notChecked(reason, "the BMC's certificate did not verify")

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
	a.protection = bmcCredentialsProtection(b)
	return a
}

// bmcCredentialsProtection is the BMC's CredentialsProtected condition: whether its address and spec send
// the credentials where only the BMC can read them. Plain HTTP sends the Redfish login or basic-auth header
// and Ironic's basic auth readable to anyone on the path (and to whoever answers for the BMC's name);
// HTTPS without certificate verification sends them encrypted, to whoever answers.
func bmcCredentialsProtection(b *v1alpha1.BMC) metav1.Condition {
	cond := func(s metav1.ConditionStatus, reason, format string, args ...any) metav1.Condition {
		return bmcCondition(v1alpha1.ConditionCredentialsProtected, s, reason, fmt.Sprintf(format, args...))
	}
	addr, err := bmc.ParseAddress(b.Spec.Address)
	switch {
	case err != nil:
		return cond(metav1.ConditionUnknown, v1alpha1.ReasonInvalidAddress, "Not known: spec.address is invalid")
	case addr.Transport == "":
		return cond(metav1.ConditionTrue, v1alpha1.ReasonIPMISession,
			"IPMI authenticates in an RMCP+ session: the password itself is not sent")
	case addr.Transport == bmc.TransportHTTP:
		secure := strings.TrimSuffix(addr.Scheme, "+http") + "+https"
		return cond(metav1.ConditionFalse, v1alpha1.ReasonPlainHTTP,
			"The credentials in Secret %q are sent over plain HTTP (%s://), readable by anyone on the network path: "+
				"use %s:// if the BMC serves HTTPS", b.Spec.CredentialsSecretRef.Name, addr.Scheme, secure)
	case b.Spec.DisableCertificateVerification:
		return cond(metav1.ConditionFalse, v1alpha1.ReasonCertificateNotVerified,
			"The credentials in Secret %q are sent over TLS to whoever answers at the BMC's address: its certificate is not "+
				"verified (spec.disableCertificateVerification); set spec.caBundleRef to the authority that signed it instead",
			b.Spec.CredentialsSecretRef.Name)
	default:
		return cond(metav1.ConditionTrue, v1alpha1.ReasonTLSVerified, "The credentials are sent over TLS to the BMC whose certificate was verified")
	}
}

// bmcCertificateAdvice says how to fix a BMC whose certificate did not verify: name the authority that
// signed it, or fix the bundle already named, or (the admin's choice) stop verifying.
func bmcCertificateAdvice(b *v1alpha1.BMC) string {
	if ref := b.Spec.CABundleRef; ref != nil {
		return fmt.Sprintf("TLS certificate verification failed against the CA bundle in %s %q (key %q): put the certificate of "+
			"the authority that signed the BMC's certificate there, or set spec.disableCertificateVerification: true "+
			"instead of spec.caBundleRef", ref.Kind, ref.Name, ref.KeyOrDefault())
	}
	return fmt.Sprintf("TLS certificate verification failed: set spec.caBundleRef to a Secret or ConfigMap in namespace %q "+
		"holding the CA bundle that signed the BMC's certificate, or set spec.disableCertificateVerification: true", b.Namespace)
}

func bmcCondition(t string, s metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: eventnote.Truncate(message, bmcMaxMessage)}
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
	return &bmcEvent{kind: corev1.EventTypeWarning, reason: reason, note: eventnote.Truncate(after.Reason+": "+after.Message, bmcMaxNote)}
}
