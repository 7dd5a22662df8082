package gates

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func TestEvaluateStorm(t *testing.T) {
	storm := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionStormActive, Status: metav1.ConditionTrue, Reason: reason}}
	}
	cases := map[string]struct {
		prev         []metav1.Condition
		exceeded     bool
		allowedSince time.Time
		cooldown     time.Duration
		want         Storm
	}{
		"no storm": {want: Storm{}},
		"budget exceeded begins a storm": {exceeded: true,
			want: Storm{Reason: v1alpha1.ReasonTooManyUnhealthy, Message: "Remediation short-circuited: 3 > 2", Began: true}},
		"still exceeded: no new transition": {prev: storm(v1alpha1.ReasonTooManyUnhealthy), exceeded: true,
			want: Storm{Reason: v1alpha1.ReasonTooManyUnhealthy, Message: "Remediation short-circuited: 3 > 2"}},
		"budget met: the cooldown runs from RemediationAllowed's transition": {prev: storm(v1alpha1.ReasonTooManyUnhealthy),
			allowedSince: t0.Add(-time.Minute), cooldown: 10 * time.Minute,
			want: Storm{Reason: v1alpha1.ReasonStormCooldown, Until: t0.Add(9 * time.Minute), Cooled: true,
				Message: "The storm is over; remediation resumes at 2026-01-01T12:09:00Z (stormCooldownDuration)"}},
		"cooldown over": {prev: storm(v1alpha1.ReasonStormCooldown), allowedSince: t0.Add(-10 * time.Minute), cooldown: 10 * time.Minute,
			want: Storm{Ended: true}},
		"no cooldown: the storm ends with the budget": {prev: storm(v1alpha1.ReasonTooManyUnhealthy), allowedSince: t0,
			want: Storm{Ended: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(EvaluateStorm(tc.prev, tc.exceeded, "3 > 2", tc.allowedSince, tc.cooldown, t0)).To(Equal(tc.want))
		})
	}
}

func TestKeepLease(t *testing.T) {
	const self = "MachineHealthCheck-workers"
	cases := map[string]struct {
		lease     Lease
		from      []string
		wantWrite bool
		wantAt    time.Time
	}{
		"missing: take it":             {wantWrite: true},
		"expired: retake it":           {lease: Lease{Holder: self, Until: t0.Add(-time.Second)}, wantWrite: true},
		"ours, early: renew at half":   {lease: Lease{Holder: self, Until: t0.Add(8 * time.Minute)}, wantAt: t0.Add(3 * time.Minute)},
		"ours, past half: renew now":   {lease: Lease{Holder: self, Until: t0.Add(4 * time.Minute)}, wantWrite: true},
		"our request's remediator's":   {lease: Lease{Holder: "PowerCycleRemediation-m", Until: t0.Add(time.Hour)}, from: []string{"PowerCycleRemediation-m"}, wantWrite: true},
		"node-maintenance's: leave it": {lease: Lease{Holder: "node-maintenance", Until: t0.Add(time.Hour)}, from: []string{"PowerCycleRemediation-m"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			write, at := KeepLease(tc.lease, self, tc.from, 10*time.Minute, t0)
			g.Expect(write).To(Equal(tc.wantWrite))
			g.Expect(at).To(Equal(tc.wantAt))
		})
	}
}

func TestHeldByOther(t *testing.T) {
	g := NewWithT(t)
	retry, held := Lease{Holder: "node-maintenance", Until: t0.Add(time.Minute)}.HeldByOther("me", t0)
	g.Expect(held).To(BeTrue())
	g.Expect(retry).To(Equal(t0.Add(time.Minute + time.Second)))
	_, held = Lease{Holder: "me", Until: t0.Add(time.Minute)}.HeldByOther("me", t0)
	g.Expect(held).To(BeFalse())
	_, held = Lease{Holder: "node-maintenance", Until: t0.Add(-time.Nanosecond)}.HeldByOther("me", t0)
	g.Expect(held).To(BeFalse(), "expired")
}

func TestOwner(t *testing.T) {
	self := Contender{Name: "self", Created: t0, Claims: true}
	cases := map[string]struct {
		self  Contender
		peers []Contender
		want  string
	}{
		"alone":                                {self: self},
		"an older peer that claims it owns it": {self: self, peers: []Contender{{Name: "old", Created: t0.Add(-time.Hour), Claims: true}}, want: "old"},
		"an older peer that does not claim it": {self: self, peers: []Contender{{Name: "old", Created: t0.Add(-time.Hour)}}},
		"a newer peer":                         {self: self, peers: []Contender{{Name: "new", Created: t0.Add(time.Hour), Claims: true}}},
		"same age: the name decides":           {self: self, peers: []Contender{{Name: "a", Created: t0, Claims: true}}, want: "a"},
		"a newer peer already remediating keeps it": {self: self,
			peers: []Contender{{Name: "new", Created: t0.Add(time.Hour), Remediating: true}}, want: "new"},
		"self already remediating keeps it": {self: Contender{Name: "self", Created: t0, Claims: true, Remediating: true},
			peers: []Contender{{Name: "old", Created: t0.Add(-time.Hour), Claims: true}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(Owner(tc.self, tc.peers)).To(Equal(tc.want))
		})
	}
}

func TestControlPlaneBusy(t *testing.T) {
	g := NewWithT(t)
	g.Expect(ControlPlaneBusy(map[string]bool{}, "cp-0")).To(BeEmpty())
	g.Expect(ControlPlaneBusy(map[string]bool{"cp-0": true}, "cp-0")).To(BeEmpty(), "itself does not count")
	g.Expect(ControlPlaneBusy(map[string]bool{"cp-2": true, "cp-1": true}, "cp-0")).To(Equal("cp-1"))
	g.Expect(IsControlPlane(map[string]string{LabelMaster: ""})).To(BeTrue())
	g.Expect(IsControlPlane(map[string]string{"node-role.kubernetes.io/worker": ""})).To(BeFalse())
}
