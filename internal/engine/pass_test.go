package engine

import (
	"cmp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/gates"
)

// TestPassAdmitsInOrderOfExpiry: of two control-plane targets only one starts, the one whose criterion
// expired first; a step of a remediation under way goes before any new one.
func TestPassAdmitsInOrderOfExpiry(t *testing.T) {
	cp := func(name string, expired time.Time, records ...Record) Target {
		return Target{Name: name, Subject: "Node " + name, Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, NodeName: name,
			CPKey: name, ExpiredAt: expired, Status: v1alpha1.RemediationProgress{Remediations: StatusRecords(records)}}
	}
	for name, tc := range map[string]struct {
		targets []Target
		want    string
	}{
		"the first to fail": {targets: []Target{cp("cp-b", ago(time.Minute)), cp("cp-a", ago(time.Second))}, want: "cp-b"},
		"by name on a tie":  {targets: []Target{cp("cp-b", ago(time.Minute)), cp("cp-a", ago(time.Minute))}, want: "cp-a"},
		"a step under way first": {targets: []Target{cp("cp-a", ago(time.Hour)),
			cp("cp-b", ago(time.Second), rec(reboot, ago(11*time.Minute), ago(time.Minute)))}, want: "cp-b"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			p := &Pass{Steps: []Step{reboot, metal3}, Now: walkT0, Gate: Gate{Admission: gates.NewAdmission("self", nil, nil, walkT0)}}
			var outs []*Outcome
			for _, tg := range tc.targets {
				outs = append(outs, p.Unhealthy(tg))
			}
			p.Admit()
			for _, o := range outs {
				if o.Target.Name == tc.want {
					g.Expect(o.Create).NotTo(BeNil())
					continue
				}
				g.Expect(o.Create).To(BeNil())
				g.Expect(o.Skip).To(HaveField("Reason", gates.SkipControlPlaneBusy))
				g.Expect(o.Events).To(ConsistOf(HaveField("Note", ContainSubstring("not remediated"))))
			}
		})
	}
}

// TestPassHoldsAndExcludes: a held target ends its steps and starts nothing; an excluded one says why,
// once.
func TestPassHoldsAndExcludes(t *testing.T) {
	g := NewWithT(t)
	p := &Pass{Steps: []Step{reboot, metal3}, Now: walkT0, Gate: Gate{Admission: gates.NewAdmission("self", nil, nil, walkT0)}}
	running := v1alpha1.RemediationProgress{Remediations: StatusRecords([]Record{rec(reboot, ago(10*time.Minute), time.Time{})})}
	held := p.Unhealthy(Target{Name: "held", Subject: "Node held", Held: true, Status: running, Requests: []Request{req(reboot, ago(10*time.Minute))}})
	excluded := p.Unhealthy(Target{Name: "excluded", Subject: "Node excluded", Excluded: true})
	again := p.Unhealthy(Target{Name: "again", Subject: "Node again", Excluded: true,
		Status: v1alpha1.RemediationProgress{SkipReason: SkipExcluded, SkipMessage: gates.ExcludedMessage()}})
	p.Admit()
	g.Expect(held.Walk.TimeOut).To(HaveLen(1), "its step ends")
	g.Expect(held.Events).To(ConsistOf(HaveField("Reason", EventRemediationTimedOut)))
	g.Expect(held.Create).To(BeNil())
	g.Expect(held.Skip).To(BeNil(), "the check says why it is held")
	g.Expect(excluded.Skip).To(HaveField("Reason", SkipExcluded))
	g.Expect(excluded.NewSkip).To(BeTrue())
	g.Expect(again.Skip).To(HaveField("Reason", SkipExcluded))
	g.Expect(again.Events).To(BeEmpty(), "said once")
}

// TestPassHealthy: a target healthy again keeps its requests and its lease for healthyDelay, or until a
// person confirms it when the delay is negative (said once); then they are deleted and the confirmation
// goes with them.
func TestPassHealthy(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w"}}
	for name, tc := range map[string]struct {
		since         time.Time
		delay         time.Duration
		confirmed     bool
		requests      []Request
		wantHold      bool
		wantDelete    int
		wantUnconfirm bool
		wantEvents    []string
		wantNext      time.Time
	}{
		"no delay: deleted at once":       {requests: []Request{req(reboot, ago(time.Hour))}, wantDelete: 1, wantEvents: []string{EventRemediationFinished}},
		"one already going: not again":    {requests: []Request{req(reboot, ago(time.Hour), deleting)}},
		"within the delay: held":          {since: ago(time.Minute), delay: 5 * time.Minute, requests: []Request{req(reboot, ago(time.Hour))}, wantHold: true, wantNext: walkT0.Add(4 * time.Minute)},
		"the delay over: deleted":         {since: ago(5 * time.Minute), delay: 5 * time.Minute, requests: []Request{req(reboot, ago(time.Hour))}, wantDelete: 1, wantEvents: []string{EventRemediationFinished}},
		"negative: held, said once":       {delay: -time.Second, requests: []Request{req(reboot, ago(time.Hour))}, wantHold: true, wantEvents: []string{EventWaitingForConfirmation}},
		"negative, later: held, silently": {since: ago(time.Hour), delay: -time.Second, requests: []Request{req(reboot, ago(time.Hour))}, wantHold: true},
		"confirmed: deleted, unconfirmed": {since: ago(time.Hour), delay: -time.Second, confirmed: true, requests: []Request{req(reboot, ago(time.Hour))},
			wantDelete: 1, wantUnconfirm: true, wantEvents: []string{EventRemediationFinished}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			p := &Pass{Now: walkT0, Holder: "self", Leases: map[string]gates.Lease{"w": {Holder: "self", Until: walkT0.Add(9 * time.Minute)}},
				LeaseDuration: 10 * time.Minute}
			o := p.Healthy(Target{Name: "w", Subject: "Node w", Node: node, NodeName: "w", Requests: tc.requests}, tc.since, tc.delay, tc.confirmed)
			g.Expect(o.Hold).To(Equal(tc.wantHold))
			g.Expect(o.HealthySince).To(Equal(cmp.Or(tc.since, walkT0)))
			g.Expect(o.Delete).To(HaveLen(tc.wantDelete))
			g.Expect(o.Unconfirm).To(Equal(tc.wantUnconfirm))
			var reasons []string
			for _, ev := range o.Events {
				reasons = append(reasons, ev.Reason)
			}
			g.Expect(reasons).To(Equal(tc.wantEvents))
			if tc.wantHold {
				// The lease, renewed at half-time (4m from now), is kept: the pass looks again then at the latest.
				g.Expect(p.Next).To(Equal(Earliest(tc.wantNext, walkT0.Add(4*time.Minute))))
			}
		})
	}
}
