package engine

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/budget"
	"github.com/metalheal/metalheal/internal/gates"
)

// CheckWideInput is what the check-wide conditions are decided from.
type CheckWideInput struct {
	// Conditions are the check's conditions as its status has them.
	Conditions []metav1.Condition
	Generation int64
	// Paused are the reasons no new remediation may start (pauseRequests, a paused Cluster); none: not
	// paused.
	Paused []string
	// Budget is the unhealthy budget's decision; BudgetErr when the budget cannot be used (the check is
	// disabled then, which the adapter reports).
	Budget    budget.Decision
	BudgetErr error
	// Cooldown is stormCooldownDuration.
	Cooldown time.Duration
	// Disabled says why no remediation can start (nil: the check works, which Works says).
	Disabled *Cause
	Works    string
	Now      time.Time
}

// The check-wide events, the same for both kinds.
const (
	// EventDisabled (Warning): no remediation can start (the Disabled condition says why); EventEnabled
	// (Normal): the check works again.
	EventDisabled = "Disabled"
	EventEnabled  = "Enabled"
	// EventPaused (Normal): no new remediation starts; EventUnpaused (Normal): remediation resumes.
	EventPaused   = "Paused"
	EventUnpaused = "Unpaused"
	// EventRemediationShortCircuited (Warning): the unhealthy budget is exceeded, a storm begins;
	// EventStormCooldown (Normal): the budget is met again, remediation resumes after
	// stormCooldownDuration; EventStormEnded (Normal): the storm is over, remediation resumes.
	EventRemediationShortCircuited = "RemediationShortCircuited"
	EventStormCooldown             = "StormCooldown"
	EventStormEnded                = "StormEnded"
)

// CheckWide is the check-wide part of a decision, the same for both kinds: the Disabled, Paused,
// RemediationAllowed and StormActive conditions, and the events of their transitions, which the adapter
// reports.
type CheckWide struct {
	Conditions []metav1.Condition
	// Storm is StormActive's decision: while the budget is exceeded, and stormCooldownDuration after it is
	// met again (from RemediationAllowed's last transition to True), no new remediation starts.
	Storm gates.Storm
	// Disabled is why no remediation can start: the input's, or a budget that cannot be used.
	Disabled *Cause
	// Events are the transitions' events, in order: Disabled or Enabled, Paused or Unpaused, the storm's.
	Events []Event
}

// DecideCheckWide sets the check-wide conditions from the check's Disabled cause, the pause requests and
// the budget's decision, with the events of their transitions.
func DecideCheckWide(in CheckWideInput) CheckWide {
	prev := in.Conditions
	out := CheckWide{Conditions: make([]metav1.Condition, len(prev)), Disabled: in.Disabled}
	copy(out.Conditions, prev)
	if out.Disabled == nil && in.BudgetErr != nil {
		out.Disabled = &Cause{Reason: v1alpha1.ReasonInvalidBudget, Message: in.BudgetErr.Error()}
	}
	event := func(reason string, normal bool, note string) {
		out.Events = append(out.Events, Event{Reason: reason, Normal: normal, Note: note})
	}
	switch {
	case out.Disabled != nil && Disable(&out.Conditions, in.Generation, out.Disabled.Reason, out.Disabled.Message, in.Now):
		event(EventDisabled, false, "No remediation can start: "+out.Disabled.Message)
	case out.Disabled == nil && Enable(&out.Conditions, in.Generation, in.Works, in.Now):
		event(EventEnabled, true, "The check works again: "+in.Works)
	}
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&out.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: in.Generation, LastTransitionTime: metav1.NewTime(in.Now)})
	}
	wasPaused := meta.IsStatusConditionTrue(prev, v1alpha1.ConditionPaused)
	switch {
	case len(in.Paused) > 0:
		set(v1alpha1.ConditionPaused, metav1.ConditionTrue, v1alpha1.ReasonPauseRequested, "Paused: "+strings.Join(in.Paused, "; "))
		if !wasPaused {
			event(EventPaused, true, "No new remediation starts (paused: "+strings.Join(in.Paused, "; ")+")")
		}
	default:
		set(v1alpha1.ConditionPaused, metav1.ConditionFalse, v1alpha1.ReasonAsExpected, "Not paused")
		if wasPaused {
			event(EventUnpaused, true, "No longer paused: remediation resumes")
		}
	}

	// RemediationAllowed: the budget alone. Its last transition to True is when a storm ended.
	allowed := in.BudgetErr == nil && in.Budget.Allowed
	if allowed {
		set(v1alpha1.ConditionRemediationAllowed, metav1.ConditionTrue, v1alpha1.ReasonWithinBudget, in.Budget.Message)
	} else {
		msg := in.Budget.Message
		if in.BudgetErr != nil {
			msg = in.BudgetErr.Error()
		}
		set(v1alpha1.ConditionRemediationAllowed, metav1.ConditionFalse, v1alpha1.ReasonTooManyUnhealthy, msg)
	}

	var allowedSince time.Time
	if c := meta.FindStatusCondition(out.Conditions, v1alpha1.ConditionRemediationAllowed); c != nil && c.Status == metav1.ConditionTrue {
		allowedSince = c.LastTransitionTime.Time
	}
	// A storm is the budget exceeded. A budget short of its range's minimum (unhealthyRange) allows nothing
	// either, but it is no storm; and a storm that falls below that minimum ends without a cooldown, which
	// would have no transition to count from (RemediationAllowed stays False) and nothing to hold back.
	cooldown := in.Cooldown
	if in.BudgetErr == nil && !in.Budget.Allowed && !in.Budget.Exceeded {
		cooldown = 0
	}
	out.Storm = gates.EvaluateStorm(prev, in.BudgetErr == nil && in.Budget.Exceeded, in.Budget.Message, allowedSince, cooldown, in.Now)
	meta.SetStatusCondition(&out.Conditions, out.Storm.Condition(in.Generation, in.Now))
	switch {
	case out.Storm.Began:
		event(EventRemediationShortCircuited, false, out.Storm.Message)
	case out.Storm.Cooled:
		event(EventStormCooldown, true, out.Storm.Message)
	case out.Storm.Ended:
		event(EventStormEnded, true, "The remediation storm is over: remediation resumes")
	}
	return out
}

// Disable sets the check's Disabled condition True for reason (no remediation can start; message says
// why), and reports whether that is news, which the adapter's Disabled warning says: it was not True, or
// for another reason.
func Disable(conds *[]metav1.Condition, generation int64, reason, message string, now time.Time) bool {
	was := meta.FindStatusCondition(*conds, v1alpha1.ConditionDisabled)
	news := was == nil || was.Status != metav1.ConditionTrue || was.Reason != reason
	meta.SetStatusCondition(conds, metav1.Condition{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionTrue,
		Reason: reason, Message: message, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)})
	return news
}

// Enable sets the check's Disabled condition False (message says what works), and reports whether it was
// True, which the adapter's Enabled event says.
func Enable(conds *[]metav1.Condition, generation int64, message string, now time.Time) bool {
	was := meta.IsStatusConditionTrue(*conds, v1alpha1.ConditionDisabled)
	meta.SetStatusCondition(conds, metav1.Condition{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonAsExpected, Message: message, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)})
	return was
}
