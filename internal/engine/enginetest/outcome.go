package enginetest

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Outcome is what a check decides from a Scenario, in neutral terms. An adapter fills every field from
// its plan; a Row's expected Outcome says which of them it holds the checker to (see Run).
type Outcome struct {
	// Creates are the requests asked for, TimeOuts those to mark timed out, Deletes those to delete.
	Creates, TimeOuts, Deletes []Ref
	// Skips are the skip reasons in status, by target (Excluded, OwnedByOtherCheck, ControlPlaneBusy,
	// LeaseHeldByOther, BackingOff, ...).
	Skips map[string]string
	// WaitingFor are the steps whose request the next step waits for (status waitingFor), by target.
	WaitingFor map[string]int
	// Exhausted are the targets whose last step ended in this pass.
	Exhausted []string
	// LeaseWrites are the Nodes whose lease the check writes (renews, retakes, takes over) besides the
	// lease a create takes; Releases those whose lease it lets go.
	LeaseWrites, Releases []string
	// Unconfirms are the Nodes whose confirmation the check removes: the remediation it confirmed is over.
	Unconfirms []string
	// Storm is StormActive's reason, "" when it is False; Restricted: RemediationAllowed is False.
	Storm      string
	Restricted bool
	// Events are the decisions the check reports (see EventKind), in any order.
	Events []Event
	// Next is when the check looks again by the passage of time alone; zero: nothing pending.
	Next time.Time
	// Records are the targets' step histories in status, without the record of a request created in this
	// pass (the engine's Walk.Records); HealthySince their conditionsHealthyTimestamp (zero: none).
	Records      map[string][]Record
	HealthySince map[string]time.Time
}

// Ref names a request by its target and its step.
type Ref struct {
	Target string
	Step   int
}

func (r Ref) String() string { return fmt.Sprintf("%s@%d", r.Target, r.Step) }

// EventKind is a decision reported by an event, whatever its reason is called in one kind.
type EventKind string

// The events both checkers decide (the events their execute emits for what it does, such as a request
// created or marked, are not decisions and not compared).
const (
	// StormBegan: the budget is exceeded (NodeHealthCheck RemediationShortCircuited, MachineHealthCheck
	// RemediationRestricted, Cluster API's name).
	StormBegan EventKind = "StormBegan"
	// StormCooling: the budget is met again, the cooldown runs (StormCooldown).
	StormCooling EventKind = "StormCooldown"
	// StormEnded: remediation resumes (StormEnded).
	StormEnded EventKind = "StormEnded"
	// Skipped: a gate skipped the target (NodeHealthCheck Skipped<Reason>, MachineHealthCheck
	// RemediationSkipped); its reason is in Skips.
	Skipped EventKind = "Skipped"
	// WouldRemediate: a check in dry run reports what it would start for the target (WouldRemediate); its
	// skip reason is DryRun.
	WouldRemediate EventKind = "WouldRemediate"
	// BackingOff: the back-off holds the target (RemediationBackingOff).
	BackingOff EventKind = "BackingOff"
	// WaitingForHandOver: the next step waits for an ended step's request (WaitingForHandOver).
	WaitingForHandOver EventKind = "WaitingForHandOver"
	// WaitingForConfirmation: a target healthy again keeps its remediation until a person confirms it
	// (WaitingForConfirmation).
	WaitingForConfirmation EventKind = "WaitingForConfirmation"
	// HandOverTimedOut: the next step starts without an ended request that did not hand over
	// (HandOverTimedOut).
	HandOverTimedOut EventKind = "HandOverTimedOut"
	// Disabled: the check can start no remediation (Disabled), e.g. a template is missing.
	Disabled EventKind = "Disabled"
	// Exhausted: the last step ended (RemediationsExhausted). Adapters report it in Outcome.Exhausted,
	// not as an event: the MachineHealthCheck emits it when it executes.
)

// Event is a decision reported about a target ("" for the check itself).
type Event struct {
	Kind   EventKind
	Target string
}

func (e Event) String() string {
	if e.Target == "" {
		return string(e.Kind)
	}
	return string(e.Kind) + "/" + e.Target
}

// normalized returns o with its lists sorted and its empty collections nil, so that two outcomes compare
// by content.
func (o Outcome) normalized() Outcome {
	sortRefs := func(rs []Ref) []Ref {
		if len(rs) == 0 {
			return nil
		}
		rs = slices.Clone(rs)
		slices.SortFunc(rs, func(a, b Ref) int { return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.Step, b.Step)) })
		return rs
	}
	sortStrings := func(s []string) []string {
		if len(s) == 0 {
			return nil
		}
		s = slices.Clone(s)
		slices.Sort(s)
		return s
	}
	o.Creates, o.TimeOuts, o.Deletes = sortRefs(o.Creates), sortRefs(o.TimeOuts), sortRefs(o.Deletes)
	o.Exhausted, o.LeaseWrites, o.Releases = sortStrings(o.Exhausted), sortStrings(o.LeaseWrites), sortStrings(o.Releases)
	o.Unconfirms = sortStrings(o.Unconfirms)
	if len(o.Skips) == 0 {
		o.Skips = nil
	}
	if len(o.WaitingFor) == 0 {
		o.WaitingFor = nil
	}
	if len(o.Events) == 0 {
		o.Events = nil
	} else {
		o.Events = slices.Clone(o.Events)
		slices.SortFunc(o.Events, func(a, b Event) int { return cmp.Compare(a.String(), b.String()) })
	}
	return o
}
