package powercycle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/pkg/bmc"
)

var bmcT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBMCCheckDue(t *testing.T) {
	last := &bmcCheckRecord{uid: "u1", generation: 2, secretVersion: "100", at: bmcT0}
	same := bmcCheckRecord{uid: "u1", generation: 2, secretVersion: "100"}
	tests := map[string]struct {
		last     *bmcCheckRecord
		cur      bmcCheckRecord
		now      time.Time
		wantDue  bool
		wantWait time.Duration
	}{
		"never checked by this process":  {last: nil, cur: same, now: bmcT0, wantDue: true},
		"just checked":                   {last: last, cur: same, now: bmcT0, wantWait: 5 * time.Minute},
		"checked a minute ago":           {last: last, cur: same, now: bmcT0.Add(time.Minute), wantWait: 4 * time.Minute},
		"interval passed exactly":        {last: last, cur: same, now: bmcT0.Add(5 * time.Minute), wantDue: true},
		"interval passed long ago":       {last: last, cur: same, now: bmcT0.Add(time.Hour), wantDue: true},
		"spec edited":                    {last: last, cur: bmcCheckRecord{uid: "u1", generation: 3, secretVersion: "100"}, now: bmcT0, wantDue: true},
		"Secret changed (rotation)":      {last: last, cur: bmcCheckRecord{uid: "u1", generation: 2, secretVersion: "101"}, now: bmcT0, wantDue: true},
		"Secret deleted":                 {last: last, cur: bmcCheckRecord{uid: "u1", generation: 2, secretVersion: ""}, now: bmcT0, wantDue: true},
		"BMC recreated under that name":  {last: last, cur: bmcCheckRecord{uid: "u2", generation: 2, secretVersion: "100"}, now: bmcT0, wantDue: true},
		"clock stepped back (no change)": {last: last, cur: same, now: bmcT0.Add(-time.Minute), wantWait: 6 * time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			due, wait := bmcCheckDue(tc.last, tc.cur, tc.now, 5*time.Minute)
			g.Expect(due).To(Equal(tc.wantDue))
			g.Expect(wait).To(Equal(tc.wantWait))
		})
	}
}

func bmcForStatusTest() *v1alpha1.BMC {
	return &v1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Namespace: "metalheal-system", Name: "bmc-1"},
		Spec: v1alpha1.BMCSpec{NodeName: "worker-1", Address: "redfish://10.0.0.1/redfish/v1/Systems/1",
			CredentialsSecretRef: v1alpha1.SecretReference{Name: "bmc-1-creds"}},
	}
}

func bmcAccessErr(kind error, cause string) error {
	return &bmcaccess.Error{BMC: types.NamespacedName{Namespace: "metalheal-system", Name: "bmc-1"}, Kind: kind, Err: errors.New(cause)}
}

func bmcDriverErr(kind error, cause string) error {
	return &bmc.Error{Driver: "redfish", Operation: "PowerState", Kind: kind, Err: errors.New(cause)}
}

func TestBMCAssess(t *testing.T) {
	type want struct {
		power              v1alpha1.PowerState
		reachable          metav1.ConditionStatus
		reachableReason    string
		credentials        metav1.ConditionStatus
		credentialsReason  string
		credentialsMessage string // a substring
		reachableMessage   string // a substring
	}
	tests := map[string]struct {
		state bmc.PowerState
		err   error
		want  want
	}{
		"host on": {state: bmc.PowerStateOn, want: want{
			power: v1alpha1.PowerOn, reachable: metav1.ConditionTrue, reachableReason: v1alpha1.ReasonCheckSucceeded,
			credentials: metav1.ConditionTrue, credentialsReason: v1alpha1.ReasonCheckSucceeded,
			reachableMessage: "the host is On", credentialsMessage: `credentials in Secret "bmc-1-creds"`}},
		"host off": {state: bmc.PowerStateOff, want: want{
			power: v1alpha1.PowerOff, reachable: metav1.ConditionTrue, reachableReason: v1alpha1.ReasonCheckSucceeded,
			credentials: metav1.ConditionTrue, credentialsReason: v1alpha1.ReasonCheckSucceeded, reachableMessage: "the host is Off"}},
		"host in transition": {state: bmc.PowerStateUnknown, want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionTrue, reachableReason: v1alpha1.ReasonCheckSucceeded,
			credentials: metav1.ConditionTrue, credentialsReason: v1alpha1.ReasonCheckSucceeded}},
		"wrong password": {err: bmcDriverErr(bmc.ErrAuthentication, "401 invalid username or password"), want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionTrue, reachableReason: v1alpha1.ReasonCheckSucceeded,
			credentials: metav1.ConditionFalse, credentialsReason: v1alpha1.ReasonAuthenticationFailed,
			credentialsMessage: `refused the username or password in Secret "bmc-1-creds": fix them there`}},
		"Secret missing": {err: bmcAccessErr(bmcaccess.ErrSecretNotFound, `secret "bmc-1-creds" does not exist`), want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionUnknown, reachableReason: v1alpha1.ReasonSecretNotFound,
			credentials: metav1.ConditionFalse, credentialsReason: v1alpha1.ReasonSecretNotFound,
			credentialsMessage: `Create Secret "bmc-1-creds" in namespace "metalheal-system" with the keys username and password`}},
		"Secret incomplete": {err: bmcAccessErr(bmcaccess.ErrInvalidCredentials, "missing non-empty keys: password"), want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionUnknown, reachableReason: v1alpha1.ReasonInvalidCredentials,
			credentials: metav1.ConditionFalse, credentialsReason: v1alpha1.ReasonInvalidCredentials,
			credentialsMessage: "(missing non-empty keys: password)"}},
		"address invalid": {err: bmcAccessErr(bmcaccess.ErrInvalidAddress, "not a valid IPv4 address"), want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionFalse, reachableReason: v1alpha1.ReasonInvalidAddress,
			credentials: metav1.ConditionUnknown, credentialsReason: v1alpha1.ReasonInvalidAddress,
			reachableMessage: "Fix spec.address (not a valid IPv4 address)"}},
		"no driver for the address": {err: bmcAccessErr(bmc.ErrUnsupported, "no ipmi driver is registered"), want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionFalse, reachableReason: v1alpha1.ReasonUnsupported,
			credentials: metav1.ConditionUnknown, credentialsReason: v1alpha1.ReasonUnsupported}},
		"no such system": {err: bmcDriverErr(bmc.ErrUnsupported, "404"), want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionFalse, reachableReason: v1alpha1.ReasonUnsupported,
			credentials: metav1.ConditionUnknown, credentialsReason: v1alpha1.ReasonUnsupported}},
		"unreachable": {err: bmcDriverErr(bmc.ErrUnreachable, "connection refused"), want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionFalse, reachableReason: v1alpha1.ReasonBMCUnreachable,
			credentials: metav1.ConditionUnknown, credentialsReason: v1alpha1.ReasonBMCUnreachable,
			reachableMessage: "The BMC did not answer (redfish PowerState: bmc unreachable: connection refused)"}},
		"timeout": {err: bmcDriverErr(bmc.ErrTimeout, "context deadline exceeded"), want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionFalse, reachableReason: v1alpha1.ReasonBMCTimeout,
			credentials: metav1.ConditionUnknown, credentialsReason: v1alpha1.ReasonBMCTimeout,
			reachableMessage: "did not answer within 10s"}},
		"an error of no known kind": {err: errors.New("something odd"), want: want{
			power: v1alpha1.PowerUnknown, reachable: metav1.ConditionFalse, reachableReason: v1alpha1.ReasonBMCUnreachable,
			credentials: metav1.ConditionUnknown, credentialsReason: v1alpha1.ReasonBMCUnreachable}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			a := bmcAssess(bmcForStatusTest(), tc.state, tc.err, 10*time.Second)
			g.Expect(a.power).To(Equal(tc.want.power))
			g.Expect(a.reachable.Type).To(Equal(v1alpha1.ConditionReachable))
			g.Expect(a.reachable.Status).To(Equal(tc.want.reachable))
			g.Expect(a.reachable.Reason).To(Equal(tc.want.reachableReason))
			g.Expect(a.reachable.Message).To(ContainSubstring(tc.want.reachableMessage))
			g.Expect(a.credentials.Type).To(Equal(v1alpha1.ConditionCredentialsValid))
			g.Expect(a.credentials.Status).To(Equal(tc.want.credentials))
			g.Expect(a.credentials.Reason).To(Equal(tc.want.credentialsReason))
			g.Expect(a.credentials.Message).To(ContainSubstring(tc.want.credentialsMessage))
			g.Expect(a.reachable.Message).NotTo(ContainSubstring("BMC metalheal-system/bmc-1"), "the BMC does not name itself")
		})
	}
}

func TestBMCAssessBoundsTheMessage(t *testing.T) {
	g := NewWithT(t)
	a := bmcAssess(bmcForStatusTest(), "", bmcDriverErr(bmc.ErrUnreachable, strings.Repeat("é", 2000)), time.Second)
	g.Expect(len(a.reachable.Message)).To(BeNumerically("<=", bmcMaxMessage))
	g.Expect(utf8.ValidString(a.reachable.Message)).To(BeTrue())
	g.Expect(a.reachable.Message).To(HaveSuffix("…"))
}

func bmcCond(t, reason string, s metav1.ConditionStatus) *metav1.Condition {
	return &metav1.Condition{Type: t, Status: s, Reason: reason}
}

func TestBMCTransitionEvent(t *testing.T) {
	ok := bmcAssess(bmcForStatusTest(), bmc.PowerStateOn, nil, time.Second)
	authFailed := bmcAssess(bmcForStatusTest(), "", bmcDriverErr(bmc.ErrAuthentication, "401"), time.Second)
	unreachable := bmcAssess(bmcForStatusTest(), "", bmcDriverErr(bmc.ErrUnreachable, "refused"), time.Second)
	timeout := bmcAssess(bmcForStatusTest(), "", bmcDriverErr(bmc.ErrTimeout, "deadline"), time.Second)
	noSecret := bmcAssess(bmcForStatusTest(), "", bmcAccessErr(bmcaccess.ErrSecretNotFound, "gone"), time.Second)
	badAddress := bmcAssess(bmcForStatusTest(), "", bmcAccessErr(bmcaccess.ErrInvalidAddress, "bad"), time.Second)

	tests := map[string]struct {
		oldReachable, oldCredentials *metav1.Condition
		now                          bmcAssessment
		want                         *bmcEvent // note compared by prefix
	}{
		"first check, all good: silence": {now: ok},
		"still good: silence": {
			oldReachable:   &ok.reachable,
			oldCredentials: &ok.credentials,
			now:            ok,
		},
		"first check, wrong password": {
			now:  authFailed,
			want: &bmcEvent{kind: corev1.EventTypeWarning, reason: EventBMCCredentialsInvalid, note: "AuthenticationFailed: The BMC refused"},
		},
		"good, then unreachable": {
			oldReachable: &ok.reachable, oldCredentials: &ok.credentials, now: unreachable,
			want: &bmcEvent{kind: corev1.EventTypeWarning, reason: EventBMCUnreachable, note: "Unreachable: The BMC did not answer"},
		},
		"still unreachable: silence": {
			oldReachable: &unreachable.reachable, oldCredentials: &unreachable.credentials, now: unreachable,
		},
		"unreachable, then timing out: the problem changed": {
			oldReachable: &unreachable.reachable, oldCredentials: &unreachable.credentials, now: timeout,
			want: &bmcEvent{kind: corev1.EventTypeWarning, reason: EventBMCUnreachable, note: "Timeout: "},
		},
		"Secret missing": {
			now:  noSecret,
			want: &bmcEvent{kind: corev1.EventTypeWarning, reason: EventBMCCredentialsInvalid, note: "SecretNotFound: "},
		},
		"address invalid": {
			now:  badAddress,
			want: &bmcEvent{kind: corev1.EventTypeWarning, reason: EventBMCMisconfigured, note: "InvalidAddress: "},
		},
		"wrong password, then fixed: recovered": {
			oldReachable: &authFailed.reachable, oldCredentials: &authFailed.credentials, now: ok,
			want: &bmcEvent{kind: corev1.EventTypeNormal, reason: EventBMCRecovered, note: "The BMC answers and accepts its credentials again (was AuthenticationFailed); the host is On"},
		},
		"conditions written by hand as Unknown: silence": {
			oldReachable:   bmcCond(v1alpha1.ConditionReachable, "Whatever", metav1.ConditionUnknown),
			oldCredentials: bmcCond(v1alpha1.ConditionCredentialsValid, "Whatever", metav1.ConditionUnknown),
			now:            ok,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := bmcTransitionEvent(tc.oldReachable, tc.oldCredentials, tc.now)
			if tc.want == nil {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.kind).To(Equal(tc.want.kind))
			g.Expect(got.reason).To(Equal(tc.want.reason))
			g.Expect(got.note).To(HavePrefix(tc.want.note))
			g.Expect(len(got.note)).To(BeNumerically("<=", bmcMaxNote))
		})
	}
}

func TestTruncateUTF8(t *testing.T) {
	tests := map[string]struct {
		in   string
		n    int
		want string
	}{
		"short enough":            {"abc", 3, "abc"},
		"cut, with an ellipsis":   {"abcdef", 5, "ab…"},
		"never inside a rune":     {"aéééé", 6, "aé…"},
		"back to a rune start":    {"aéééé", 5, "a…"},
		"multi-byte on the bound": {"ééé", 6, "ééé"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(truncateUTF8(tc.in, tc.n)).To(Equal(tc.want))
		})
	}
}

// The reconciler refuses to start half-wired.
func TestBMCReconcilerSetupNeedsItsDependencies(t *testing.T) {
	g := NewWithT(t)
	err := (&BMCReconciler{}).SetupWithManager(context.Background(), nil)
	g.Expect(err).To(MatchError(ContainSubstring("needs a Client, an Access, a Recorder and a Clock")))
}
