package backoff

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(minutes ...int) []time.Time {
	out := make([]time.Time, 0, len(minutes))
	for _, m := range minutes {
		out = append(out, t0.Add(time.Duration(m)*time.Minute))
	}
	return out
}

func TestDecide(t *testing.T) {
	std := Policy{After: 1, Window: 24 * time.Hour, Initial: 10 * time.Minute, Max: 40 * time.Minute}
	tests := map[string]struct {
		policy  Policy
		starts  []time.Time
		now     int // minutes after t0
		allowed bool
		until   int // minutes after t0, when held
		count   int
	}{
		"off: never held":                       {policy: Policy{}, starts: at(0, 1, 2), now: 3, allowed: true},
		"no history":                            {policy: std, now: 0, allowed: true},
		"first repeat waits initial":            {policy: std, starts: at(0), now: 5, until: 10, count: 1},
		"first repeat after initial":            {policy: std, starts: at(0), now: 10, allowed: true, count: 1},
		"second repeat waits twice initial":     {policy: std, starts: at(0, 10), now: 15, until: 30, count: 2},
		"third repeat waits four times initial": {policy: std, starts: at(0, 10, 30), now: 31, until: 70, count: 3},
		"capped at max":                         {policy: std, starts: at(0, 10, 30, 70), now: 71, until: 110, count: 4},
		"order of starts does not matter":       {policy: std, starts: at(30, 0, 10), now: 31, until: 70, count: 3},
		"below after: no wait": {policy: Policy{After: 3, Window: time.Hour, Initial: 10 * time.Minute, Max: time.Hour},
			starts: at(0, 5), now: 6, allowed: true, count: 2},
		"at after: initial": {policy: Policy{After: 3, Window: time.Hour, Initial: 10 * time.Minute, Max: time.Hour},
			starts: at(0, 5, 8), now: 9, until: 18, count: 3},
		"starts outside the window do not count": {policy: Policy{After: 1, Window: time.Hour, Initial: 10 * time.Minute, Max: time.Hour},
			starts: at(0, 10, 70), now: 75, until: 80, count: 1},
		// At 25: three starts in the window, wait 40m after 20 (until 60). At 60 the start at 0 leaves the
		// window: two remain, wait 20m after 20, already past: the hold ends when the start at 0 leaves.
		"an old start leaving the window ends the hold early": {
			policy: Policy{After: 1, Window: time.Hour, Initial: 10 * time.Minute, Max: 2 * time.Hour},
			starts: at(0, 10, 20), now: 25, until: 60, count: 3},
		"a start in the future (clock skew) is ignored": {policy: std, starts: at(100), now: 5, allowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			now := t0.Add(time.Duration(tc.now) * time.Minute)
			got := Decide(tc.policy, tc.starts, now)
			if got.Allowed != tc.allowed {
				t.Fatalf("Allowed = %v, want %v (%+v)", got.Allowed, tc.allowed, got)
			}
			if !tc.allowed {
				if want := t0.Add(time.Duration(tc.until) * time.Minute); !got.Until.Equal(want) {
					t.Errorf("Until = %s, want %s", got.Until.Sub(t0), want.Sub(t0))
				}
			} else if !got.Until.IsZero() {
				t.Errorf("Until = %s on an allowed decision", got.Until)
			}
			if got.Count != tc.count {
				t.Errorf("Count = %d, want %d", got.Count, tc.count)
			}
		})
	}
}

// TestLoop runs a target that fails again the instant it may be remediated: the requests go out at the
// configured growing intervals.
func TestLoop(t *testing.T) {
	p := Policy{After: 1, Window: 24 * time.Hour, Initial: 10 * time.Minute, Max: 40 * time.Minute}
	var starts []time.Time
	now := t0
	var gaps []time.Duration
	for range 6 {
		d := Decide(p, starts, now)
		if !d.Allowed {
			now = d.Until
			if d = Decide(p, starts, now); !d.Allowed {
				t.Fatalf("still held at the end of the hold: %+v", d)
			}
		}
		if n := len(starts); n > 0 {
			gaps = append(gaps, now.Sub(starts[n-1]))
		}
		starts = Record(p, starts, now, now)
	}
	want := []time.Duration{10 * time.Minute, 20 * time.Minute, 40 * time.Minute, 40 * time.Minute, 40 * time.Minute}
	if len(gaps) != len(want) {
		t.Fatalf("gaps = %v, want %v", gaps, want)
	}
	for i := range want {
		if gaps[i] != want[i] {
			t.Errorf("gaps = %v, want %v", gaps, want)
			break
		}
	}
}

func TestRecord(t *testing.T) {
	p := Policy{After: 1, Window: time.Hour, Initial: time.Minute, Max: time.Hour}
	tests := map[string]struct {
		starts []time.Time
		start  time.Time
		now    int
		want   []time.Time
	}{
		"adds":                            {starts: at(0), start: t0.Add(10 * time.Minute), now: 10, want: at(0, 10)},
		"same second once":                {starts: at(10), start: t0.Add(10*time.Minute + 300*time.Millisecond), now: 10, want: at(10)},
		"prunes outside the window":       {starts: at(0, 30), start: t0.Add(70 * time.Minute), now: 70, want: at(30, 70)},
		"zero start adds nothing, sorted": {starts: at(30, 20), now: 40, want: at(20, 30)},
		"bounded": {starts: at(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16), start: t0.Add(17 * time.Minute), now: 17,
			want: at(2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Record(p, tc.starts, tc.start, t0.Add(time.Duration(tc.now)*time.Minute))
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if !got[i].Equal(tc.want[i]) {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// The defaults for objects stored before the field existed are the API's (api/v1alpha1 TestDefaultsAreApplied).
func TestPolicyOfNilIsTheAPIDefault(t *testing.T) {
	want := Policy{After: 3, Window: 6 * time.Hour, Initial: 15 * time.Minute, Max: 2 * time.Hour}
	if got := PolicyOf(nil); got != want {
		t.Errorf("PolicyOf(nil) = %+v, want %+v", got, want)
	}
}

// TestMemoryKeepsAHoldNotLookedAt: a hold in status that a decision does not look at (the target held back
// by a storm) stays in status until it ends, so that looking at it again after the storm is no new hold
// (no second event, no second count).
func TestMemoryKeepsAHoldNotLookedAt(t *testing.T) {
	p := &v1alpha1.RemediationBackoff{After: ptr.To[int32](1)}
	starts := []metav1.Time{metav1.NewTime(t0), metav1.NewTime(t0.Add(5 * time.Minute))}
	m := NewMemory(PolicyOf(p), nil, t0.Add(6*time.Minute))
	m.Started("a", starts[0].Time)
	m.Started("a", starts[1].Time)
	d, isNew := m.Hold("a")
	if d.Allowed || !isNew {
		t.Fatalf("first look: %+v new=%v, want a new hold", d, isNew)
	}
	status := m.Status()

	during := NewMemory(PolicyOf(p), status, t0.Add(7*time.Minute)) // the storm: Hold is not asked
	kept := during.Status()
	if len(kept) != 1 || kept[0].BackoffUntil == nil || !kept[0].BackoffUntil.Equal(status[0].BackoffUntil) {
		t.Fatalf("status during the storm = %+v, want the hold kept (%v)", kept, status[0].BackoffUntil)
	}
	after := NewMemory(PolicyOf(p), kept, t0.Add(8*time.Minute))
	if d, isNew := after.Hold("a"); d.Allowed || isNew {
		t.Fatalf("after the storm: %+v new=%v, want the same hold, not new", d, isNew)
	}
	ended := NewMemory(PolicyOf(p), kept, status[0].BackoffUntil.Add(time.Second)).Status()
	if len(ended) != 1 || ended[0].BackoffUntil != nil {
		t.Fatalf("status once the hold ended = %+v, want no backoffUntil", ended)
	}
}
