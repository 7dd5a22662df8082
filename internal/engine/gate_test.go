package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/gates"
)

// TestGateOrder: a new start passes the overlapping rule, the back-off (a new remediation only), the
// control-plane and lease admission, then dry run, in that order, for both kinds.
func TestGateOrder(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	owned := func() (string, string) { return SkipOwnedByOtherCheck, "MachineHealthCheck older owns this Machine" }
	// A remediation a minute ago, after 1: the next one waits 15m.
	recent := []v1alpha1.RecentRemediation{{Name: "t", Starts: []metav1.Time{metav1.NewTime(now.Add(-time.Minute))}}}
	for name, tc := range map[string]struct {
		start     Start
		busy      []string
		leases    map[string]gates.Lease
		dryRun    bool
		want      string
		wantRetry time.Time
	}{
		"nothing refuses":                   {start: Start{Target: "t", Node: "n"}},
		"owned by another check":            {start: Start{Target: "t", Node: "n", Owner: owned, First: true}, want: SkipOwnedByOtherCheck},
		"owned before held back":            {start: Start{Target: "t", Node: "n", Owner: owned, First: true}, busy: []string{"t"}, want: SkipOwnedByOtherCheck},
		"a new remediation is held back":    {start: Start{Target: "t", Node: "n", First: true}, want: SkipBackingOff, wantRetry: now.Add(14 * time.Minute)},
		"the next step is never held back":  {start: Start{Target: "t", Node: "n"}},
		"held back before control plane":    {start: Start{Target: "t", Node: "n", CPKey: "n", First: true}, busy: []string{"other"}, want: SkipBackingOff, wantRetry: now.Add(14 * time.Minute)},
		"another control-plane target busy": {start: Start{Target: "t", Node: "n", CPKey: "n"}, busy: []string{"other"}, want: gates.SkipControlPlaneBusy},
		"the lease held by someone else": {start: Start{Target: "t", Node: "n"}, leases: map[string]gates.Lease{"n": {Holder: "maintenance", Until: now.Add(time.Hour)}},
			want: gates.SkipLeaseHeldByOther, wantRetry: now.Add(time.Hour + time.Second)},
		"dry run, last":           {start: Start{Target: "t", Node: "n", WouldDo: "Dry run: would"}, dryRun: true, want: SkipDryRun},
		"dry run after admission": {start: Start{Target: "t", Node: "n", CPKey: "n"}, busy: []string{"other"}, dryRun: true, want: gates.SkipControlPlaneBusy},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			memory := backoff.NewMemory(backoff.Policy{After: 1, Window: time.Hour, Initial: 15 * time.Minute, Max: time.Hour}, recent, now)
			gate := Gate{Admission: gates.NewAdmission("self", tc.leases, tc.busy, now), Backoff: memory, DryRun: tc.dryRun}
			r := gate.Start(tc.start)
			if tc.want == "" {
				g.Expect(r).To(BeNil())
				return
			}
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Reason).To(Equal(tc.want))
			g.Expect(r.Retry).To(Equal(tc.wantRetry))
			if tc.want == SkipDryRun {
				g.Expect(r.Message).To(Equal(tc.start.WouldDo))
			}
		})
	}
}

// TestSkipEvent: a skip's event comes once per reason and message, a back-off hold's once per hold; a
// dry run's and a hold's are Normal events of their own reasons, the others the kind's warnings.
func TestSkipEvent(t *testing.T) {
	until := time.Date(2030, 1, 1, 12, 15, 0, 0, time.UTC)
	lease := Skip{Reason: gates.SkipLeaseHeldByOther, Message: `The node's lease is held by "maintenance"`}
	hold := Skip{Reason: SkipBackingOff, Message: "held", Hold: &backoff.Decision{Until: until, Count: 3}, Window: 6 * time.Hour}
	for name, tc := range map[string]struct {
		r                   Skip
		prevReason, prevMsg string
		want                *Event
	}{
		"a new skip":                   {r: lease, want: &Event{Note: `Node w-1 is unhealthy (Ready=False for 5m0s) but is not remediated: The node's lease is held by "maintenance"`}},
		"the same skip again: nothing": {r: lease, prevReason: lease.Reason, prevMsg: lease.Message},
		"the same reason, a new message": {r: lease, prevReason: lease.Reason, prevMsg: "other",
			want: &Event{Note: `Node w-1 is unhealthy (Ready=False for 5m0s) but is not remediated: The node's lease is held by "maintenance"`}},
		"a dry run": {r: Skip{Reason: SkipDryRun, Message: "Dry run: would"},
			want: &Event{Reason: EventWouldRemediate, Normal: true, Note: "Node w-1 is unhealthy (Ready=False for 5m0s): Dry run: would"}},
		"a hold": {r: hold, want: &Event{Reason: EventRemediationBackingOff, Normal: true, Note: "Node w-1 is unhealthy again (Ready=False for 5m0s) " +
			"after 3 remediations within 6h0m0s: its next remediation starts at 2030-01-01T12:15:00Z (remediationBackoff)"}},
		"the same hold again: nothing": {r: hold, prevReason: hold.Reason, prevMsg: hold.Message},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(tc.r.Event(tc.prevReason, tc.prevMsg, "Node w-1", "Ready=False for 5m0s")).To(Equal(tc.want))
		})
	}
}

// TestLeasedControlPlane: a control-plane Node is busy while someone else validly holds its lease; the
// check's own lease, an expired one and a worker's are not.
func TestLeasedControlPlane(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	ls := map[string]gates.Lease{
		"cp-b":   {Holder: "node-maintenance", Until: now.Add(time.Minute)},
		"cp-a":   {Holder: "PowerCycleRemediation-cp-a", Until: now.Add(time.Minute)},
		"cp-own": {Holder: "self", Until: now.Add(time.Minute)},
		"cp-old": {Holder: "node-maintenance", Until: now.Add(-time.Minute)},
		"w-0":    {Holder: "node-maintenance", Until: now.Add(time.Minute)},
	}
	isCP := func(_ context.Context, n string) (bool, error) { return n[:3] == "cp-", nil }
	g.Expect(LeasedControlPlane(t.Context(), ls, "self", now, isCP)).To(Equal([]string{"cp-a", "cp-b"}))
	boom := errors.New("boom")
	_, err := LeasedControlPlane(t.Context(), ls, "self", now, func(context.Context, string) (bool, error) { return false, boom })
	g.Expect(err).To(MatchError(boom))
}
