package engine

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/budget"
)

// TestDisableEnable: Disabled is news (the adapter's warning) when the check becomes disabled, or for
// another reason, never for a new message alone; Enabled when a disabled check works again.
func TestDisableEnable(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	disabled := func(reason, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionTrue, Reason: reason, Message: msg}}
	}
	enabled := []metav1.Condition{{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAsExpected}}
	for name, tc := range map[string]struct {
		conds   []metav1.Condition
		disable string // the reason, "" to enable
		want    bool
	}{
		"no condition yet, disabled: news":        {disable: "TemplateNotFound", want: true},
		"enabled, disabled: news":                 {conds: enabled, disable: "TemplateNotFound", want: true},
		"disabled, for the same reason: not news": {conds: disabled("TemplateNotFound", "an older message"), disable: "TemplateNotFound"},
		"disabled, for another reason: news":      {conds: disabled("TemplateInvalid", "m"), disable: "TemplateNotFound", want: true},
		"disabled, enabled: news":                 {conds: disabled("TemplateNotFound", "m"), want: true},
		"enabled, enabled: not news":              {conds: enabled},
		"no condition yet, enabled: not news":     {},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			conds := append([]metav1.Condition(nil), tc.conds...)
			if tc.disable != "" {
				g.Expect(Disable(&conds, 3, tc.disable, "msg", now)).To(Equal(tc.want))
				g.Expect(meta.FindStatusCondition(conds, v1alpha1.ConditionDisabled)).To(And(HaveField("Status", metav1.ConditionTrue),
					HaveField("Reason", tc.disable), HaveField("Message", "msg"), HaveField("ObservedGeneration", int64(3))))
				return
			}
			g.Expect(Enable(&conds, 3, "works", now)).To(Equal(tc.want))
			g.Expect(meta.FindStatusCondition(conds, v1alpha1.ConditionDisabled)).To(And(HaveField("Status", metav1.ConditionFalse),
				HaveField("Message", "works")))
		})
	}
}

// TestDecideCheckWideEvents: the check-wide transitions are said once each, the same for both kinds, as a
// check lives through them: disabled, enabled, paused, resumed, a storm that begins, cools down and ends.
// A budget that cannot be used disables the check.
func TestDecideCheckWideEvents(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	within := budget.Decision{Allowed: true, Message: "1 of 10 unhealthy"}
	exceeded := budget.Decision{Exceeded: true, Message: "6 of 10 unhealthy"}
	var conds []metav1.Condition
	pass := func(at time.Duration, in CheckWideInput) CheckWide {
		in.Conditions, in.Generation, in.Works, in.Cooldown, in.Now = conds, 1, "templates readable", time.Minute, t0.Add(at)
		if in.Budget.Message == "" && in.BudgetErr == nil {
			in.Budget = within
		}
		cw := DecideCheckWide(in)
		conds = cw.Conditions
		return cw
	}
	reasons := func(cw CheckWide) []string {
		var out []string
		for _, ev := range cw.Events {
			out = append(out, ev.Reason)
		}
		return out
	}
	missing := &Cause{Reason: v1alpha1.ReasonTemplateNotFound, Message: "template rack-a not found"}

	g.Expect(reasons(pass(0, CheckWideInput{Disabled: missing}))).To(Equal([]string{EventDisabled}))
	g.Expect(reasons(pass(time.Second, CheckWideInput{Disabled: missing}))).To(BeEmpty(), "said once")
	cw := pass(2*time.Second, CheckWideInput{})
	g.Expect(reasons(cw)).To(Equal([]string{EventEnabled}))
	g.Expect(cw.Events[0].Note).To(ContainSubstring("templates readable"))
	cw = pass(3*time.Second, CheckWideInput{Paused: []string{"Cluster c1 is paused"}})
	g.Expect(reasons(cw)).To(Equal([]string{EventPaused}))
	g.Expect(cw.Events[0].Note).To(Equal("No new remediation starts (paused: Cluster c1 is paused)"))
	g.Expect(reasons(pass(4*time.Second, CheckWideInput{}))).To(Equal([]string{EventUnpaused}))

	cw = pass(5*time.Second, CheckWideInput{Budget: exceeded})
	g.Expect(reasons(cw)).To(Equal([]string{EventRemediationShortCircuited}))
	g.Expect(cw.Events[0].Normal).To(BeFalse(), "a storm is a warning")
	g.Expect(reasons(pass(6*time.Second, CheckWideInput{Budget: exceeded}))).To(BeEmpty())
	g.Expect(reasons(pass(7*time.Second, CheckWideInput{}))).To(Equal([]string{EventStormCooldown}))
	g.Expect(reasons(pass(7*time.Second+time.Minute, CheckWideInput{}))).To(Equal([]string{EventStormEnded}))

	cw = pass(2*time.Minute, CheckWideInput{BudgetErr: errors.New(`maxUnhealthy "abc" is not a number or a percentage`)})
	g.Expect(cw.Disabled).To(HaveField("Reason", v1alpha1.ReasonInvalidBudget))
	g.Expect(reasons(cw)).To(Equal([]string{EventDisabled}))
}

// TestDecideCheckWideBelowRange: a budget short of its unhealthyRange's minimum allows nothing, as in
// Cluster API, but it is no storm (a healthy pool under "[3-5]" would otherwise be in one for good); a
// storm that falls below the minimum ends at once, having no transition to count a cooldown from.
func TestDecideCheckWideBelowRange(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	below := budget.Decision{Message: "0 of 10 targets unhealthy, allowed range [3-5] (unhealthyRange)"}
	exceeded := budget.Decision{Exceeded: true, Message: "6 of 10 targets unhealthy, allowed range [3-5] (unhealthyRange)"}
	var conds []metav1.Condition
	pass := func(at time.Duration, b budget.Decision) CheckWide {
		cw := DecideCheckWide(CheckWideInput{Conditions: conds, Generation: 1, Works: "ok", Budget: b, Cooldown: time.Minute, Now: t0.Add(at)})
		conds = cw.Conditions
		return cw
	}
	cw := pass(0, below)
	g.Expect(cw.Storm.Active()).To(BeFalse())
	g.Expect(cw.Events).To(BeEmpty())
	g.Expect(meta.IsStatusConditionFalse(cw.Conditions, v1alpha1.ConditionRemediationAllowed)).To(BeTrue())
	g.Expect(meta.IsStatusConditionFalse(cw.Conditions, v1alpha1.ConditionStormActive)).To(BeTrue())

	g.Expect(pass(time.Second, exceeded).Events).To(ConsistOf(HaveField("Reason", EventRemediationShortCircuited)))
	cw = pass(2*time.Second, below)
	g.Expect(cw.Storm.Active()).To(BeFalse(), "no cooldown below the minimum")
	g.Expect(cw.Events).To(ConsistOf(HaveField("Reason", EventStormEnded)))
}
