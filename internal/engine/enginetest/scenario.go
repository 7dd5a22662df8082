package enginetest

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// T0 is now in every row: times are fixed, so a row decides the same way on every run.
var T0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// The checks' constants, the same for both kinds: adapters build their inputs with them.
const (
	// ConditionTimeout is how long Ready=False must hold before a target is unhealthy (the check's one
	// unhealthy condition).
	ConditionTimeout = 5 * time.Minute
	// LeaseDuration is how long the check takes a node lease for; it renews it at half-time.
	LeaseDuration = 10 * time.Minute
)

// CheckName is the check's name in both kinds (the overlapping rule orders checks of one age by name).
const CheckName = "self"

// Lease holders a scenario names without knowing the kind's identities; an adapter maps them.
const (
	// Self is the check itself ("NodeHealthCheck.remediation.metalheal.io-<name>" or the
	// MachineHealthCheck's).
	Self = "<self>"
	// OwnRemediator is the remediator of the target's first request ("<RequestKind>-<request name>"),
	// which may take the lease before the check does.
	OwnRemediator = "<own remediator>"
)

// The StormActive reasons a scenario and an outcome name (v1alpha1's).
const (
	StormTooManyUnhealthy = "TooManyUnhealthy"
	StormCooldown         = "StormCooldown"
)

// Scenario is what one check observes at Now: its policy, its targets, the other checks.
type Scenario struct {
	// Now is T0 unless a row says otherwise.
	Now    time.Time
	Policy Policy
	// Created is when the check was created (the overlapping rule's age): an hour before T0 unless a row
	// says otherwise.
	Created time.Time
	// Conditions are the check's conditions as its last pass left them.
	Conditions Conditions
	Targets    []Target
	// Peers are the other checks of the same kind that may select the targets.
	Peers []Peer
	// BusyElsewhere are control-plane targets another check is remediating now (observe reads them from
	// the other checks' status).
	BusyElsewhere []string
}

// Policy is a check's spec, as far as the shared rules read it.
type Policy struct {
	// Steps are the remediation steps in order; one step without a timeout is a single
	// remediationTemplate, anything else escalatingRemediations.
	Steps []Step
	// MaxUnhealthy is the budget as a number of targets; nil allows every target (100%).
	MaxUnhealthy *int
	// StormCooldown is stormCooldownDuration, HealthyDelay healthyDelay (negative: until a person confirms
	// the target healthy).
	StormCooldown, HealthyDelay time.Duration
	// Backoff is remediationBackoff; nil leaves the API's default.
	Backoff *Backoff
	// DryRun is spec.dryRun: decide everything, start nothing.
	DryRun bool
	// TemplateMissing: a step's template does not exist, so the check is disabled (Disabled=True,
	// TemplateNotFound): it reads and reports its targets and ends the steps under way, starting nothing.
	TemplateMissing bool
}

// Step is one remediation step: its template and the kind of request the template makes.
type Step struct {
	// Template is the template's name.
	Template string
	// APIVersion and Kind are the request's; the template's kind is Kind+"Template".
	APIVersion, Kind string
	// Timeout ends the step; zero never does.
	Timeout time.Duration
}

// Backoff is remediationBackoff.
type Backoff struct {
	After                int
	Window, Initial, Max time.Duration
}

// Conditions are the check's previous conditions, as the storm rule reads them.
type Conditions struct {
	// Storm is StormActive's reason (StormTooManyUnhealthy or StormCooldown); "" means the check has no
	// conditions yet.
	Storm string
	// AllowedSince is when RemediationAllowed last turned True; zero: it is False.
	AllowedSince time.Time
}

// Target is a Node (NodeHealthCheck) or a Machine and its Node (MachineHealthCheck).
type Target struct {
	Name string
	// NotReady: its Ready condition is False since Since; otherwise True since Since. A target is
	// unhealthy for the check once Ready=False has held for ConditionTimeout.
	NotReady bool
	Since    time.Time
	// ControlPlane: the target is a control-plane one (its Node's role label; a Machine's control-plane
	// label and controller).
	ControlPlane bool
	// Excluded: its Node carries remediation.medik8s.io/exclude-from-remediation=true.
	Excluded bool
	// Confirmed: a person confirmed its Node healthy (remediation.medik8s.io/manually-confirmed-healthy).
	Confirmed bool
	// Requests are the check's remediation requests for the target that exist.
	Requests []Request
	// Status is the target's entry in the check's status as the last pass left it; nil when it has none.
	Status *Entry
	// Lease is its Node's lease; nil when there is none.
	Lease *Lease
	// RecentStarts are the starts of its recent remediations (status.recentRemediations), for the back-off.
	RecentStarts []time.Time
}

// Request is one of the check's remediation requests.
type Request struct {
	// Step is the index of the step that made it.
	Step    int
	Created time.Time
	// TimedOutAt is the time of its timed-out mark; zero when it has none.
	TimedOutAt time.Time
	// Failed: its remediator reports Succeeded=False.
	Failed bool
	// Processing is its Processing condition's status; "" when it has none.
	Processing metav1.ConditionStatus
	// Deleting: it has a deletion timestamp.
	Deleting bool
}

// Entry is a target's status entry (status.unhealthyNodes[] or status.unhealthyMachines[]).
type Entry struct {
	// Records are the steps started, oldest first.
	Records []Record
	// HealthySince is conditionsHealthyTimestamp; zero when it has none.
	HealthySince time.Time
	// WaitingFor is the step whose request the next step waits for (waitingFor); nil: none.
	WaitingFor *int
}

// Record is one step started for a target.
type Record struct {
	Step    int
	Started time.Time
	// Ended is when the step ended (timedOut); zero while it runs.
	Ended time.Time
}

// Lease is a node lease: who holds it (a name, Self or OwnRemediator) and until when.
type Lease struct {
	Holder string
	Until  time.Time
}

// Peer is another check of the same kind.
type Peer struct {
	Name    string
	Created time.Time
	// Claims are the targets it selects (and, having the check's conditions, finds unhealthy alike).
	Claims []string
	// Remediating are the targets it has requests for.
	Remediating []string
}

// BusyControlPlane is what observe hands the decision, in both kinds, as the control-plane targets that
// are busy besides the check's own: those another check remediates (BusyElsewhere), and those whose
// lease someone other than the check validly holds (node maintenance draining it, say).
func (s Scenario) BusyControlPlane() []string {
	busy := slices.Clone(s.BusyElsewhere)
	for _, t := range s.Targets {
		if t.ControlPlane && t.Lease != nil && t.Lease.Holder != Self && !s.Now.After(t.Lease.Until) {
			busy = append(busy, t.Name)
		}
	}
	slices.Sort(busy)
	return slices.Compact(busy)
}

// Selects reports whether peer p selects target.
func (p Peer) Selects(target string) bool { return slices.Contains(p.Claims, target) }

// Remediates reports whether peer p has requests for target.
func (p Peer) Remediates(target string) bool { return slices.Contains(p.Remediating, target) }

// RequestOf returns the target's request made by step, if there is one.
func (t Target) RequestOf(step int) (Request, bool) {
	i := slices.IndexFunc(t.Requests, func(q Request) bool { return q.Step == step })
	if i < 0 {
		return Request{}, false
	}
	return t.Requests[i], true
}
