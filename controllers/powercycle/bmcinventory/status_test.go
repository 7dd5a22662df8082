package bmcinventory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/pkg/bmc"
)

var bmcT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// bmcSteady is a status that shows a healthy check of generation 2 at when.
func bmcSteady(when time.Time) *v1alpha1.BMC {
	checked := metav1.NewTime(when)
	return &v1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{UID: "u1", Generation: 2},
		Status: v1alpha1.BMCStatus{PowerState: v1alpha1.PowerOn, LastChecked: &checked, ObservedGeneration: 2,
			Conditions: []metav1.Condition{
				{Type: v1alpha1.ConditionReachable, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCheckSucceeded},
				{Type: v1alpha1.ConditionCredentialsValid, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCheckSucceeded},
			}},
	}
}

func TestBMCCheckDue(t *testing.T) {
	const interval = 5 * time.Minute
	phase := bmcPhase("u1", interval)
	// u1's first slot at least interval/2 after bmcT0, and its slot in the interval that starts at bmcT0+1h.
	slotAfterT0 := bmcSlotAfter(phase, bmcT0, interval)
	slotFromHour := bmcNextSlot(phase, bmcT0.Add(time.Hour), interval)

	next := bmcT0.Add(4 * time.Minute)
	last := &bmcCheckRecord{uid: "u1", generation: 2, secretVersion: "100", healthy: true, next: next}
	same := bmcCheckRecord{uid: "u1", generation: 2, secretVersion: "100"}
	withStatus := func(mutate func(b *v1alpha1.BMC)) *v1alpha1.BMC {
		b := bmcSteady(bmcT0)
		mutate(b)
		return b
	}
	tests := map[string]struct {
		last     *bmcCheckRecord
		cur      bmcCheckRecord
		bmc      *v1alpha1.BMC
		now      time.Time
		wantDue  bool
		wantNext time.Time // when not due
	}{
		// This process checked it.
		"checked: before its slot":        {last: last, cur: same, now: bmcT0, wantNext: next},
		"checked: a second before":        {last: last, cur: same, now: next.Add(-time.Second), wantNext: next},
		"checked: its slot":               {last: last, cur: same, now: next, wantDue: true},
		"checked: a requeue that is late": {last: last, cur: same, now: next.Add(time.Hour), wantDue: true},
		"checked: spec edited": {last: last, cur: bmcCheckRecord{uid: "u1", generation: 3, secretVersion: "100"},
			now: bmcT0, wantDue: true},
		"checked: Secret changed (rotation)": {last: last, cur: bmcCheckRecord{uid: "u1", generation: 2, secretVersion: "101"},
			now: bmcT0, wantDue: true},
		"checked: Secret deleted": {last: last, cur: bmcCheckRecord{uid: "u1", generation: 2, secretVersion: ""},
			now: bmcT0, wantDue: true},
		"checked: CA bundle changed": {last: last, cur: bmcCheckRecord{uid: "u1", generation: 2, secretVersion: "100", caBundleVersion: "ConfigMap/site-ca@7"},
			now: bmcT0, wantDue: true},
		"checked: recreated under that name": {last: last, cur: bmcCheckRecord{uid: "u2", generation: 2, secretVersion: "100"},
			now: bmcT0, wantDue: true},
		"checked: found unhealthy": {last: &bmcCheckRecord{uid: "u1", generation: 2, secretVersion: "100", next: next},
			cur: same, now: bmcT0, wantDue: true},

		// This process has not checked it: the status is all there is (a new BMC, or a restart).
		"new: no status": {cur: same, bmc: &v1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{UID: "u1", Generation: 1}},
			now: bmcT0, wantDue: true},
		"new: status of an older spec": {cur: same, bmc: withStatus(func(b *v1alpha1.BMC) { b.Generation = 3 }),
			now: bmcT0, wantDue: true},
		"new: no lastChecked": {cur: same, bmc: withStatus(func(b *v1alpha1.BMC) { b.Status.LastChecked = nil }),
			now: bmcT0, wantDue: true},
		"restart: unreachable": {cur: same, bmc: withStatus(func(b *v1alpha1.BMC) { b.Status.Conditions[0].Status = metav1.ConditionFalse }),
			now: bmcT0, wantDue: true},
		"restart: credentials refused": {cur: same, bmc: withStatus(func(b *v1alpha1.BMC) { b.Status.Conditions[1].Status = metav1.ConditionFalse }),
			now: bmcT0, wantDue: true},
		"restart: credentials unknown": {cur: same, bmc: withStatus(func(b *v1alpha1.BMC) { b.Status.Conditions[1].Status = metav1.ConditionUnknown }),
			now: bmcT0, wantDue: true},
		"restart: a condition missing": {cur: same, bmc: withStatus(func(b *v1alpha1.BMC) { b.Status.Conditions = b.Status.Conditions[:1] }),
			now: bmcT0, wantDue: true},
		"restart: healthy, just checked: its slot after lastChecked": {cur: same, bmc: bmcSteady(bmcT0),
			now: bmcT0.Add(10 * time.Second), wantNext: slotAfterT0},
		"restart: healthy, at its slot": {cur: same, bmc: bmcSteady(bmcT0), now: slotAfterT0, wantDue: true},
		"restart: healthy, lastChecked long ago: its next slot from now, not at once": {cur: same, bmc: bmcSteady(bmcT0),
			now: bmcT0.Add(time.Hour), wantNext: slotFromHour, wantDue: slotFromHour.Equal(bmcT0.Add(time.Hour))},
		"restart: lastChecked in the future: at most 1.5 intervals away": {cur: same, bmc: bmcSteady(bmcT0.Add(24 * time.Hour)),
			now: bmcT0, wantNext: slotAfterT0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			b := tc.bmc
			if b == nil {
				b = bmcSteady(bmcT0)
			}
			due, next := bmcCheckDue(tc.last, tc.cur, b, tc.now, interval)
			g.Expect(due).To(Equal(tc.wantDue))
			if !tc.wantDue {
				g.Expect(next).To(BeTemporally("==", tc.wantNext))
				g.Expect(next).To(BeTemporally(">", tc.now))
			}
		})
	}
}

func TestBMCSlotAfter(t *testing.T) {
	t0 := bmcT0 // a multiple of 5 minutes and of an hour since the epoch
	tests := map[string]struct {
		phase    time.Duration
		c        time.Time
		interval time.Duration
		want     time.Time
	}{
		"phase 0, checked at 0":                   {phase: 0, c: t0, interval: 5 * time.Minute, want: t0.Add(5 * time.Minute)},
		"phase 1m, checked at 0: skips the slot":  {phase: time.Minute, c: t0, interval: 5 * time.Minute, want: t0.Add(6 * time.Minute)},
		"phase 3m, checked at 0":                  {phase: 3 * time.Minute, c: t0, interval: 5 * time.Minute, want: t0.Add(3 * time.Minute)},
		"exactly interval/2 later (lower bound)":  {phase: 150 * time.Second, c: t0, interval: 5 * time.Minute, want: t0.Add(150 * time.Second)},
		"just under 1.5 intervals (upper bound)":  {phase: 150*time.Second - 1, c: t0, interval: 5 * time.Minute, want: t0.Add(450*time.Second - 1)},
		"checked in its slot: one interval later": {phase: 4 * time.Minute, c: t0.Add(4 * time.Minute), interval: 5 * time.Minute, want: t0.Add(9 * time.Minute)},
		"checked late: back in its slot":          {phase: 4 * time.Minute, c: t0.Add(4*time.Minute + 20*time.Second), interval: 5 * time.Minute, want: t0.Add(9 * time.Minute)},
		"nanosecond phase":                        {phase: 61*time.Second + 7, c: t0, interval: 5 * time.Minute, want: t0.Add(6*time.Minute + time.Second + 7)},
		"hourly interval": {phase: 10 * time.Minute, c: t0.Add(50 * time.Minute), interval: time.Hour,
			want: t0.Add(2*time.Hour + 10*time.Minute)},
		"before the epoch": {phase: time.Minute, c: time.Date(1969, 12, 31, 23, 55, 0, 0, time.UTC), interval: 5 * time.Minute,
			want: time.Date(1970, 1, 1, 0, 1, 0, 0, time.UTC)},
		"another time zone, same instants": {phase: 3 * time.Minute, c: t0.In(time.FixedZone("UTC+5:30", 5*3600+1800)),
			interval: 5 * time.Minute, want: t0.Add(3 * time.Minute)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(bmcSlotAfter(tc.phase, tc.c, tc.interval)).To(BeTemporally("==", tc.want))
		})
	}
}

// Whatever the phase and the time of the last check, the next is in the BMC's slot, between interval/2
// and 1.5×interval later.
func TestBMCSlotAfterBounds(t *testing.T) {
	g := NewWithT(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, interval := range []time.Duration{time.Second, 5 * time.Minute, 7*time.Minute + 13*time.Millisecond, time.Hour} {
		for range 2000 {
			phase := time.Duration(rng.Int64N(int64(interval)))
			c := bmcT0.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
			next := bmcSlotAfter(phase, c, interval)
			g.Expect(next.Sub(c)).To(BeNumerically(">=", interval/2), "interval %s, phase %s, c %s", interval, phase, c)
			g.Expect(next.Sub(c)).To(BeNumerically("<", interval+interval/2), "interval %s, phase %s, c %s", interval, phase, c)
			g.Expect(time.Duration(next.UnixNano() % int64(interval))).To(Equal(phase))
		}
	}
}

func TestBMCPhase(t *testing.T) {
	g := NewWithT(t)
	g.Expect(bmcPhase("0b9a3e4c-6f1d-4c2a-9a57-2f3c1d0e8b11", 5*time.Minute)).
		To(Equal(bmcPhase("0b9a3e4c-6f1d-4c2a-9a57-2f3c1d0e8b11", 5*time.Minute)), "deterministic")
	g.Expect(bmcPhase("u1", 0)).To(BeZero())

	uids := map[string]func(i int, rng *rand.Rand) types.UID{
		"random UIDs": func(_ int, rng *rand.Rand) types.UID {
			return types.UID(fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x",
				rng.Uint32(), rng.Uint32N(1<<16), rng.Uint32N(1<<12), 0x8000|rng.Uint32N(1<<14), rng.Uint64N(1<<48)))
		},
		"UIDs that differ in one digit": func(i int, _ *rand.Rand) types.UID {
			return types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		},
	}
	const n, buckets = 1000, 10
	for name, uid := range uids {
		for _, interval := range []time.Duration{5 * time.Minute, time.Hour} {
			t.Run(fmt.Sprintf("%s, %s", name, interval), func(t *testing.T) {
				g := NewWithT(t)
				rng := rand.New(rand.NewPCG(3, 4))
				// A thundering herd: all n BMCs checked within 100 s of start-up.
				start := bmcT0.Add(17 * time.Second)
				var count [buckets]int
				slots := map[time.Duration]int{}
				for i := range n {
					u := uid(i, rng)
					phase := bmcPhase(u, interval)
					g.Expect(phase).To(And(BeNumerically(">=", 0), BeNumerically("<", interval)))
					g.Expect(phase%(interval/bmcSlotsPerInterval)).To(BeZero(), "checks are grouped on %d instants an interval", bmcSlotsPerInterval)
					slots[phase]++
					c := start.Add(time.Duration(i) * 100 * time.Second / n)
					second := bmcSlotAfter(phase, c, interval)
					third := bmcSlotAfter(phase, second, interval)
					g.Expect(third.Sub(second)).To(Equal(interval), "at steady state, one check per interval")
					count[time.Duration(second.UnixNano()%int64(interval))*buckets/interval]++
				}
				for b, k := range count {
					g.Expect(k).To(BeNumerically("<=", 2*n/buckets), "bucket %d of %v holds %d checks", b, count, k)
					g.Expect(k).To(BeNumerically(">=", n/buckets/2), "bucket %d of %v holds %d checks", b, count, k)
				}
				// Every group is used, none is more than twice its share.
				g.Expect(slots).To(HaveLen(bmcSlotsPerInterval))
				for phase, k := range slots {
					g.Expect(k).To(BeNumerically("<=", 2*n/bmcSlotsPerInterval), "the group at %v holds %d checks", phase, k)
				}
			})
		}
	}
}

func TestBMCRefreshAge(t *testing.T) {
	g := NewWithT(t)
	g.Expect(bmcRefreshAge(5 * time.Minute)).To(Equal(30 * time.Minute))
	g.Expect(bmcRefreshAge(2 * time.Hour)).To(Equal(2 * time.Hour))
}

func TestBMCReportedStatus(t *testing.T) {
	const refresh = 30 * time.Minute
	ok := bmcAssess(bmcForStatusTest(), bmc.PowerStateOn, nil, time.Second)
	off := bmcAssess(bmcForStatusTest(), bmc.PowerStateOff, nil, time.Second)
	unreachable := bmcAssess(bmcForStatusTest(), "", bmcDriverErr(bmc.ErrUnreachable, "connection refused"), time.Second)
	reset := bmcAssess(bmcForStatusTest(), "", bmcDriverErr(bmc.ErrUnreachable, "connection reset"), time.Second)

	// reported is the status a written check of a, at when, leaves.
	reported := func(a bmcAssessment, when time.Time) v1alpha1.BMCStatus {
		st, write := bmcReportedStatus(v1alpha1.BMCStatus{}, 2, a, when, refresh)
		if !write {
			t.Fatal("a first check must be written")
		}
		return st
	}
	tests := map[string]struct {
		old       v1alpha1.BMCStatus
		a         bmcAssessment
		now       time.Time
		wantWrite bool
		// when written:
		wantTransition map[string]time.Time // lastTransitionTime by condition type
	}{
		"first check": {a: ok, now: bmcT0, wantWrite: true,
			wantTransition: map[string]time.Time{v1alpha1.ConditionReachable: bmcT0, v1alpha1.ConditionCredentialsValid: bmcT0}},
		"nothing new": {old: reported(ok, bmcT0), a: ok, now: bmcT0.Add(5 * time.Minute)},
		"nothing new, just under the refresh age": {old: reported(ok, bmcT0), a: ok, now: bmcT0.Add(refresh - time.Second)},
		"nothing new, but lastChecked is as old as the refresh age": {old: reported(ok, bmcT0), a: ok, now: bmcT0.Add(refresh),
			wantWrite: true, wantTransition: map[string]time.Time{v1alpha1.ConditionReachable: bmcT0, v1alpha1.ConditionCredentialsValid: bmcT0}},
		"nothing new, but lastChecked is in the future": {old: reported(ok, bmcT0.Add(time.Hour)), a: ok, now: bmcT0, wantWrite: true},
		"power state changed (and the message that shows it)": {old: reported(ok, bmcT0), a: off, now: bmcT0.Add(5 * time.Minute),
			wantWrite: true, wantTransition: map[string]time.Time{v1alpha1.ConditionReachable: bmcT0, v1alpha1.ConditionCredentialsValid: bmcT0}},
		"still unreachable, same message": {old: reported(unreachable, bmcT0), a: unreachable, now: bmcT0.Add(5 * time.Minute)},
		"still unreachable, another message": {old: reported(unreachable, bmcT0), a: reset, now: bmcT0.Add(5 * time.Minute),
			wantWrite: true, wantTransition: map[string]time.Time{v1alpha1.ConditionReachable: bmcT0, v1alpha1.ConditionCredentialsValid: bmcT0}},
		"became unreachable": {old: reported(ok, bmcT0), a: unreachable, now: bmcT0.Add(5 * time.Minute), wantWrite: true,
			wantTransition: map[string]time.Time{v1alpha1.ConditionReachable: bmcT0.Add(5 * time.Minute),
				v1alpha1.ConditionCredentialsValid: bmcT0.Add(5 * time.Minute)}},
		"spec changed, same result": {old: func() v1alpha1.BMCStatus {
			st := reported(ok, bmcT0)
			st.ObservedGeneration = 1
			return st
		}(), a: ok, now: bmcT0.Add(time.Minute), wantWrite: true},
		"a condition's observedGeneration behind": {old: func() v1alpha1.BMCStatus {
			st := reported(ok, bmcT0)
			st.Conditions[1].ObservedGeneration = 1
			return st
		}(), a: ok, now: bmcT0.Add(time.Minute), wantWrite: true},
		"a condition removed by hand": {old: func() v1alpha1.BMCStatus {
			st := reported(ok, bmcT0)
			st.Conditions = st.Conditions[:1]
			return st
		}(), a: ok, now: bmcT0.Add(time.Minute), wantWrite: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			before := tc.old.DeepCopy()
			st, write := bmcReportedStatus(tc.old, 2, tc.a, tc.now, refresh)
			g.Expect(tc.old).To(Equal(*before), "the old status is not modified")
			g.Expect(write).To(Equal(tc.wantWrite))
			if !write {
				g.Expect(st).To(Equal(tc.old))
				return
			}
			g.Expect(st.LastChecked.Time).To(BeTemporally("==", tc.now))
			g.Expect(st.PowerState).To(Equal(tc.a.power))
			g.Expect(st.ObservedGeneration).To(Equal(int64(2)))
			wantConditions := []metav1.Condition{tc.a.reachable, tc.a.credentials}
			if tc.a.protection.Type != "" {
				wantConditions = append(wantConditions, tc.a.protection)
			}
			g.Expect(st.Conditions).To(HaveLen(len(wantConditions)))
			for _, want := range wantConditions {
				c := meta.FindStatusCondition(st.Conditions, want.Type)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(want.Status))
				g.Expect(c.Reason).To(Equal(want.Reason))
				g.Expect(c.Message).To(Equal(want.Message))
				g.Expect(c.ObservedGeneration).To(Equal(int64(2)))
				if at, ok := tc.wantTransition[want.Type]; ok {
					g.Expect(c.LastTransitionTime.Time).To(BeTemporally("==", at), "lastTransitionTime of %s", want.Type)
				}
			}
		})
	}
}

func TestBMCCheckResult(t *testing.T) {
	tests := map[string]struct {
		state bmc.PowerState
		err   error
		want  string
	}{
		"healthy":        {state: bmc.PowerStateOn, want: v1alpha1.ReasonCheckSucceeded},
		"wrong password": {err: bmcDriverErr(bmc.ErrAuthentication, "401"), want: v1alpha1.ReasonAuthenticationFailed},
		"Secret missing": {err: bmcAccessErr(bmcaccess.ErrSecretNotFound, "gone"), want: v1alpha1.ReasonSecretNotFound},
		"unreachable":    {err: bmcDriverErr(bmc.ErrUnreachable, "refused"), want: v1alpha1.ReasonBMCUnreachable},
		"timeout":        {err: bmcDriverErr(bmc.ErrTimeout, "deadline"), want: v1alpha1.ReasonBMCTimeout},
		"bad address":    {err: bmcAccessErr(bmcaccess.ErrInvalidAddress, "bad"), want: v1alpha1.ReasonInvalidAddress},
		"bundle missing": {err: bmcAccessErr(bmcaccess.ErrCABundleNotFound, "gone"), want: v1alpha1.ReasonCABundleNotFound},
		"bundle invalid": {err: bmcAccessErr(bmcaccess.ErrCABundleInvalid, "garbage"), want: v1alpha1.ReasonCABundleInvalid},
		"untrusted certificate": {err: &bmc.Error{Driver: "redfish", Operation: "PowerState", Kind: bmc.ErrUnreachable,
			Err: &bmc.CertificateError{Err: errors.New("x509: certificate signed by unknown authority")}},
			want: v1alpha1.ReasonCertificateVerificationFailed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(bmcCheckResult(bmcAssess(bmcForStatusTest(), tc.state, tc.err, time.Second))).To(Equal(tc.want))
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

// The reconciler refuses to start half-wired.
func TestBMCReconcilerSetupNeedsItsDependencies(t *testing.T) {
	g := NewWithT(t)
	err := (&Reconciler{}).SetupWithManager(context.Background(), nil)
	g.Expect(err).To(MatchError(ContainSubstring("needs a Client, an Access, a Recorder and a Clock")))
}

// TestBMCCredentialsProtection: seen from anyone on the network path between the manager and a BMC. An
// address that sends the credentials in clear (redfish+http, ironic:// without TLS), or over TLS to
// whoever answers (verification disabled), hands them to that person; the BMC's conditions must say so,
// whatever the check found, beside Reachable and CredentialsValid.
func TestBMCCredentialsProtection(t *testing.T) {
	tests := map[string]struct {
		address    string
		insecure   bool
		err        error
		wantStatus metav1.ConditionStatus
		wantReason string
		wantInMsg  string
	}{
		"redfish over plain http": {address: "redfish+http://10.0.0.5/redfish/v1/Systems/1",
			wantStatus: metav1.ConditionFalse, wantReason: v1alpha1.ReasonPlainHTTP, wantInMsg: "redfish+https"},
		"idrac-redfish over plain http": {address: "idrac-redfish+http://10.0.0.5",
			wantStatus: metav1.ConditionFalse, wantReason: v1alpha1.ReasonPlainHTTP},
		"ironic, http by default": {address: "ironic://ironic.example.com:6385/2b5f1c9e-7b7e-4b5e-9a43-6f1e0d3c1a11",
			wantStatus: metav1.ConditionFalse, wantReason: v1alpha1.ReasonPlainHTTP, wantInMsg: "ironic+https"},
		"ironic, http by default, the BMC unreachable": {address: "ironic://ironic.example.com/node-1",
			err:        &bmc.Error{Driver: "ironic", Operation: "PowerState", Kind: bmc.ErrUnreachable, Err: errors.New("connection refused")},
			wantStatus: metav1.ConditionFalse, wantReason: v1alpha1.ReasonPlainHTTP},
		"redfish over https, certificate not verified": {address: "redfish://10.0.0.5/redfish/v1/Systems/1", insecure: true,
			wantStatus: metav1.ConditionFalse, wantReason: v1alpha1.ReasonCertificateNotVerified, wantInMsg: "caBundleRef"},
		"redfish over https, verified": {address: "redfish://10.0.0.5/redfish/v1/Systems/1",
			wantStatus: metav1.ConditionTrue, wantReason: v1alpha1.ReasonTLSVerified},
		"ironic over https, verified": {address: "ironic+https://ironic.example.com/node-1",
			wantStatus: metav1.ConditionTrue, wantReason: v1alpha1.ReasonTLSVerified},
		"ipmi": {address: "ipmi://10.0.0.5",
			wantStatus: metav1.ConditionTrue, wantReason: v1alpha1.ReasonIPMISession},
		"an address that does not parse": {address: "redfish://10.0.0.256/", err: errors.New("invalid"),
			wantStatus: metav1.ConditionUnknown, wantReason: v1alpha1.ReasonInvalidAddress},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			b := &v1alpha1.BMC{
				ObjectMeta: metav1.ObjectMeta{Name: "bmc-1", Namespace: "metalheal-system", Generation: 2},
				Spec: v1alpha1.BMCSpec{NodeName: "worker-1", Address: tc.address, DisableCertificateVerification: tc.insecure,
					CredentialsSecretRef: v1alpha1.SecretReference{Name: "bmc-1-creds"}},
			}
			st, write := bmcReportedStatus(v1alpha1.BMCStatus{}, 2, bmcAssess(b, bmc.PowerStateOn, tc.err, time.Minute), bmcT0, time.Hour)
			g.Expect(write).To(BeTrue())
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionCredentialsProtected)
			g.Expect(c).NotTo(BeNil(), "the BMC's conditions say nothing of how its credentials travel")
			g.Expect(c.Status).To(Equal(tc.wantStatus))
			g.Expect(c.Reason).To(Equal(tc.wantReason))
			g.Expect(c.Message).To(ContainSubstring(tc.wantInMsg))
			g.Expect(c.ObservedGeneration).To(Equal(int64(2)))
		})
	}
}
