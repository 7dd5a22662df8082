package enginetest

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The steps of the rows: a power cycle, then a fence of another kind.
var (
	reboot = Step{Template: "reboot", APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediation"}
	fence  = Step{Template: "fence", APIVersion: "fence.example.com/v1", Kind: "FenceRemediation"}
)

// oneStep is a single remediationTemplate, without a timeout.
func oneStep() Policy { return Policy{Steps: []Step{reboot}} }

// twoSteps escalates from a 10-minute power cycle to a 20-minute fence.
func twoSteps() Policy {
	r, f := reboot, fence
	r.Timeout, f.Timeout = 10*time.Minute, 20*time.Minute
	return Policy{Steps: []Step{r, f}}
}

func at(d time.Duration) time.Time { return T0.Add(d) }

func budget(n int) *int { return &n }

func step(i int) *int { return &i }

// sick is a target whose Ready=False has held for an hour.
func sick(name string) Target { return Target{Name: name, NotReady: true, Since: at(-time.Hour)} }

// well is a target Ready for an hour.
func well(name string) Target { return Target{Name: name, Since: at(-time.Hour)} }

// controlPlane is an unhealthy control-plane target, failing since since.
func controlPlane(name string, since time.Time) Target {
	return Target{Name: name, NotReady: true, Since: since, ControlPlane: true}
}

// ownLease is the check's lease, just taken: it is renewed at T0+5m.
func ownLease() *Lease { return &Lease{Holder: Self, Until: at(LeaseDuration)} }

// remediating puts t under remediation by step 0 since started: its request, its record, the check's
// lease.
func remediating(t Target, started time.Time) Target {
	t.Requests = []Request{{Step: 0, Created: started}}
	t.Status = &Entry{Records: []Record{{Step: 0, Started: started}}}
	t.Lease = ownLease()
	return t
}

// healthyAgain is t, Ready again since since, still under remediation by step 0 since started.
func healthyAgain(name string, since, started time.Time) Target {
	t := remediating(well(name), started)
	t.Since = since
	return t
}

// handedOver is t whose step 0 (started at started) ended at ended, its request marked then and reporting
// processing, and whose step 1 has not started.
func handedOver(t Target, started, ended time.Time, processing metav1.ConditionStatus) Target {
	t.Requests = []Request{{Step: 0, Created: started, TimedOutAt: ended, Processing: processing}}
	t.Status = &Entry{Records: []Record{{Step: 0, Started: started, Ended: ended}}}
	t.Lease = ownLease()
	return t
}

// lastStep is t whose step 0 ran from T0-30m to T0-20m and whose step 1 runs since T0-20m, its request
// as given.
func lastStep(t Target, second Request) Target {
	second.Step, second.Created = 1, at(-20*time.Minute)
	t.Requests = []Request{{Step: 0, Created: at(-30 * time.Minute), TimedOutAt: at(-20 * time.Minute)}, second}
	t.Status = &Entry{Records: []Record{{Step: 0, Started: at(-30 * time.Minute), Ended: at(-20 * time.Minute)},
		{Step: 1, Started: at(-20 * time.Minute)}}}
	t.Lease = ownLease()
	return t
}

// Rows is the table: one behaviour both checkers promise per row.
func Rows() []Row {
	rows := []Row{
		// Storm: the unhealthy budget, and the cooldown after it.
		{Name: "storm: the budget exceeded, nothing new starts",
			Scenario: Scenario{Policy: withBudget(oneStep(), 1), Targets: []Target{sick("a"), sick("b"), well("c")}},
			Want:     Outcome{Storm: StormTooManyUnhealthy, Restricted: true, Events: []Event{{Kind: StormBegan}}}},
		{Name: "storm: still exceeded, said once",
			Scenario: Scenario{Policy: withBudget(oneStep(), 1), Conditions: Conditions{Storm: StormTooManyUnhealthy},
				Targets: []Target{known(sick("a")), known(sick("b")), well("c")}},
			Want: Outcome{Storm: StormTooManyUnhealthy, Restricted: true}},
		{Name: "storm: targets failing together count before their condition expires",
			Scenario: Scenario{Policy: withBudget(oneStep(), 1),
				Targets: []Target{sick("a"), {Name: "b", NotReady: true, Since: at(-time.Minute)}, well("c")}},
			Want: Outcome{Storm: StormTooManyUnhealthy, Restricted: true, Events: []Event{{Kind: StormBegan}},
				Next: at(ConditionTimeout - time.Minute)}},
		{Name: "storm: targets failing together, none for its whole timeout yet: the storm is said as it begins",
			Scenario: Scenario{Policy: withBudget(oneStep(), 1),
				Targets: []Target{{Name: "a", NotReady: true, Since: at(-time.Minute)}, {Name: "b", NotReady: true, Since: at(-time.Minute)}, well("c")}},
			Want: Outcome{Storm: StormTooManyUnhealthy, Restricted: true, Events: []Event{{Kind: StormBegan}},
				Next: at(ConditionTimeout - time.Minute)}},
		{Name: "storm: a running step that runs out is still marked timed out, the next step waits",
			Scenario: Scenario{Policy: withBudget(twoSteps(), 1),
				Targets: []Target{remediating(sick("a"), at(-10*time.Minute)), sick("b"), well("c")}},
			Want: Outcome{TimeOuts: []Ref{{"a", 0}}, Storm: StormTooManyUnhealthy, Restricted: true, Events: []Event{{Kind: StormBegan}},
				Records: map[string][]Record{"a": {{Step: 0, Started: at(-10 * time.Minute), Ended: T0}}},
				Next:    at(LeaseDuration / 2)}},
		{Name: "storm cooldown: the budget met again, nothing new starts until the cooldown ends",
			Scenario: Scenario{Policy: withCooldown(withBudget(oneStep(), 1), 5*time.Minute),
				Conditions: Conditions{Storm: StormTooManyUnhealthy}, Targets: []Target{known(sick("a")), well("b"), well("c")}},
			Want: Outcome{Storm: StormCooldown, Events: []Event{{Kind: StormCooling}}, Next: at(5 * time.Minute)}},
		{Name: "storm cooldown: still cooling down, said once",
			Scenario: Scenario{Policy: withCooldown(withBudget(oneStep(), 1), 5*time.Minute),
				Conditions: Conditions{Storm: StormCooldown, AllowedSince: at(-time.Minute)},
				Targets:    []Target{known(sick("a")), well("b"), well("c")}},
			Want: Outcome{Storm: StormCooldown, Next: at(4 * time.Minute)}},
		{Name: "storm cooldown: over, a target still unhealthy is remediated",
			Scenario: Scenario{Policy: withCooldown(withBudget(oneStep(), 1), 5*time.Minute),
				Conditions: Conditions{Storm: StormCooldown, AllowedSince: at(-5 * time.Minute)},
				Targets:    []Target{known(sick("a")), well("b"), well("c")}},
			Want: Outcome{Creates: []Ref{{"a", 0}}, Events: []Event{{Kind: StormEnded}}}},

		// Disabled: a template missing disables the check, the same for both kinds.
		{Name: "disabled: a template missing, nothing new starts, a running step that runs out is still marked timed out",
			Scenario: Scenario{Policy: templateMissing(twoSteps()),
				Targets: []Target{remediating(sick("a"), at(-10*time.Minute)), sick("b"), well("c")}},
			Want: Outcome{TimeOuts: []Ref{{"a", 0}}, Events: []Event{{Kind: Disabled}},
				Records: map[string][]Record{"a": {{Step: 0, Started: at(-10 * time.Minute), Ended: T0}}},
				Next:    at(LeaseDuration / 2)}},

		// healthyDelay.
		{Name: "healthyDelay: a target healthy again keeps its request until the delay passes",
			Scenario: Scenario{Policy: withHealthyDelay(oneStep(), 2*time.Minute),
				Targets: []Target{healthyAgain("a", at(-30*time.Second), at(-10*time.Minute))}},
			Want: Outcome{HealthySince: map[string]time.Time{"a": T0}, Next: at(2 * time.Minute)}},
		{Name: "healthyDelay: passed, the request is deleted",
			Scenario: Scenario{Policy: withHealthyDelay(oneStep(), 2*time.Minute),
				Targets: []Target{healthySince(healthyAgain("a", at(-3*time.Minute), at(-10*time.Minute)), at(-2*time.Minute))}},
			Want: Outcome{Deletes: []Ref{{"a", 0}}, Records: map[string][]Record{"a": {{Step: 0, Started: at(-10 * time.Minute)}}},
				HealthySince: map[string]time.Time{"a": at(-2 * time.Minute)}, Next: at(LeaseDuration / 2)}},
		{Name: "healthyDelay: passed, its request still being deleted: the entry is kept and nothing is said or counted again",
			Scenario: Scenario{Policy: withBackoff(withHealthyDelay(oneStep(), 2*time.Minute)),
				Targets: []Target{recent(healthySince(deleting(healthyAgain("a", at(-4*time.Minute), at(-10*time.Minute))), at(-3*time.Minute)),
					at(-10*time.Minute))}},
			Want: Outcome{Records: map[string][]Record{"a": {{Step: 0, Started: at(-10 * time.Minute)}}},
				HealthySince: map[string]time.Time{"a": at(-3 * time.Minute)}, Next: at(LeaseDuration / 2)}},
		{Name: "healthyDelay: negative, its request still being deleted and the confirmation removed: no second wait for one",
			Scenario: Scenario{Policy: withHealthyDelay(oneStep(), -time.Second),
				Targets: []Target{healthySince(deleting(healthyAgain("a", at(-time.Hour), at(-2*time.Hour))), at(-time.Hour))}},
			Want: Outcome{HealthySince: map[string]time.Time{"a": at(-time.Hour)}, Next: at(LeaseDuration / 2)}},
		{Name: "healthyDelay: failing again while the ended remediation's request is being deleted: nothing starts until it is gone",
			Scenario: Scenario{Policy: withHealthyDelay(oneStep(), 2*time.Minute),
				Targets: []Target{healthySince(deleting(remediating(sick("a"), at(-2*time.Hour))), at(-90*time.Minute))}},
			Want: Outcome{Records: map[string][]Record{"a": {{Step: 0, Started: at(-2 * time.Hour)}}},
				HealthySince: map[string]time.Time{"a": at(-90 * time.Minute)}, Next: at(LeaseDuration / 2)}},
		{Name: "healthyDelay: failing again once the ended remediation's request is gone: a new remediation, through the back-off",
			Scenario: Scenario{Policy: withBackoff(withHealthyDelay(oneStep(), 2*time.Minute)),
				Targets: []Target{recent(healthySince(requestsGone(remediating(sick("a"), at(-8*time.Minute))), at(-6*time.Minute)),
					at(-8*time.Minute))}},
			Want: Outcome{Skips: map[string]string{"a": "BackingOff"}, Events: []Event{{BackingOff, "a"}}, Releases: []string{"a"},
				Next: at(2 * time.Minute)}},
		{Name: "healthyDelay: negative, a target healthy again keeps its request until a person confirms it",
			Scenario: Scenario{Policy: withHealthyDelay(oneStep(), -time.Second),
				Targets: []Target{healthyAgain("a", at(-30*time.Second), at(-10*time.Minute))}},
			Want: Outcome{HealthySince: map[string]time.Time{"a": T0}, Events: []Event{{WaitingForConfirmation, "a"}},
				Next: at(LeaseDuration / 2)}},
		{Name: "healthyDelay: negative, a person's confirmation ends it, the request is deleted and then the confirmation",
			Scenario: Scenario{Policy: withHealthyDelay(oneStep(), -time.Second),
				Targets: []Target{confirmed(healthySince(healthyAgain("a", at(-time.Hour), at(-2*time.Hour)), at(-time.Hour)))}},
			Want: Outcome{Deletes: []Ref{{"a", 0}}, Unconfirms: []string{"a"}, Next: at(LeaseDuration / 2)}},
		{Name: "healthyDelay: the confirmation is removed once the requests it confirmed are gone",
			Scenario: Scenario{Policy: withHealthyDelay(oneStep(), -time.Second), Targets: []Target{confirmed(Target{Name: "a", Since: at(-time.Hour),
				Status: &Entry{Records: []Record{{Step: 0, Started: at(-2 * time.Hour)}}, HealthySince: at(-time.Hour)}})}},
			Want: Outcome{Unconfirms: []string{"a"}}},
		{Name: "healthyDelay: unhealthy again within the delay, the request is kept and the delay forgotten",
			Scenario: Scenario{Policy: withHealthyDelay(oneStep(), 2*time.Minute),
				Targets: []Target{healthySince(remediating(Target{Name: "a", NotReady: true, Since: at(-6 * time.Minute)}, at(-10*time.Minute)), at(-time.Minute))}},
			Want: Outcome{HealthySince: map[string]time.Time{"a": {}}, Next: at(LeaseDuration / 2)}},
		{Name: "healthyDelay: a condition failing for less than its timeout does not reset the delay",
			Scenario: Scenario{Policy: withHealthyDelay(oneStep(), 2*time.Minute),
				Targets: []Target{healthySince(remediating(Target{Name: "a", NotReady: true, Since: at(-time.Minute)}, at(-10*time.Minute)), at(-90*time.Second))}},
			Want: Outcome{HealthySince: map[string]time.Time{"a": at(-90 * time.Second)}, Next: at(30 * time.Second)}},

		// Node leases held by someone else.
		{Name: "lease: held by someone else, the target is skipped and looked at a second after it runs out",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{leased(sick("a"), "node-maintenance", at(3*time.Minute))}},
			Want: Outcome{Skips: map[string]string{"a": "LeaseHeldByOther"}, Events: []Event{{Skipped, "a"}},
				Next: at(3*time.Minute + time.Second)}},
		{Name: "lease: someone else's expired lease does not hold",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{leased(sick("a"), "node-maintenance", at(-time.Second))}},
			Want:     Outcome{Creates: []Ref{{"a", 0}}}},

		// The check's own node lease.
		{Name: "lease: renewed at half-time while a request lives",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{leased(remediating(sick("a"), at(-10*time.Minute)), Self, at(LeaseDuration/2))}},
			Want:     Outcome{LeaseWrites: []string{"a"}}},
		{Name: "lease: not renewed before half-time, looked at again then",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{leased(remediating(sick("a"), at(-10*time.Minute)), Self, at(8*time.Minute))}},
			Want:     Outcome{Next: at(3 * time.Minute)}},
		{Name: "lease: taken over from the remediator of the check's own request",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{leased(remediating(sick("a"), at(-time.Minute)), OwnRemediator, at(9*time.Minute))}},
			Want:     Outcome{LeaseWrites: []string{"a"}}},
		{Name: "lease: taken by someone else during a remediation, left to them",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{leased(remediating(sick("a"), at(-time.Minute)), "node-maintenance", at(9*time.Minute))}},
			Want:     Outcome{}},
		{Name: "lease: released once the check's requests are gone",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{{Name: "a", Since: at(-10 * time.Minute), Lease: &Lease{Holder: Self, Until: at(5 * time.Minute)},
				Status: &Entry{Records: []Record{{Step: 0, Started: at(-20 * time.Minute)}}, HealthySince: at(-10 * time.Minute)}}}},
			Want: Outcome{Releases: []string{"a"}}},

		// Control-plane targets one at a time.
		{Name: "control plane: two unhealthy, one request, the other ControlPlaneBusy",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{controlPlane("cp-a", at(-2*time.Hour)), controlPlane("cp-b", at(-time.Hour))}},
			Want: Outcome{Creates: []Ref{{"cp-a", 0}}, Skips: map[string]string{"cp-b": "ControlPlaneBusy"},
				Events: []Event{{Skipped, "cp-b"}}}},
		{Name: "control plane: the one that failed first goes first",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{controlPlane("cp-a", at(-time.Hour)), controlPlane("cp-b", at(-2*time.Hour))}},
			Want: Outcome{Creates: []Ref{{"cp-b", 0}}, Skips: map[string]string{"cp-a": "ControlPlaneBusy"},
				Events: []Event{{Skipped, "cp-a"}}}},
		{Name: "control plane: one whose lease someone else holds counts as busy",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{
				leased(controlPlane("cp-a", at(-2*time.Hour)), "node-maintenance", at(time.Hour)), controlPlane("cp-b", at(-time.Hour))}},
			Want: Outcome{Skips: map[string]string{"cp-a": "LeaseHeldByOther", "cp-b": "ControlPlaneBusy"},
				Events: []Event{{Skipped, "cp-a"}, {Skipped, "cp-b"}}, Next: at(time.Hour + time.Second)}},
		{Name: "control plane: one under remediation holds the others back",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{
				remediating(controlPlane("cp-a", at(-2*time.Hour)), at(-time.Minute)), controlPlane("cp-b", at(-time.Hour))}},
			Want: Outcome{Skips: map[string]string{"cp-b": "ControlPlaneBusy"}, Events: []Event{{Skipped, "cp-b"}},
				Next: at(LeaseDuration / 2)}},
		{Name: "control plane: one another check remediates holds ours back",
			Scenario: Scenario{Policy: oneStep(), BusyElsewhere: []string{"cp-x"}, Targets: []Target{controlPlane("cp-b", at(-time.Hour))}},
			Want:     Outcome{Skips: map[string]string{"cp-b": "ControlPlaneBusy"}, Events: []Event{{Skipped, "cp-b"}}}},
		{Name: "control plane: workers are not held back",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{remediating(controlPlane("cp-a", at(-2*time.Hour)), at(-time.Minute)), sick("w")}},
			Want:     Outcome{Creates: []Ref{{"w", 0}}, Next: at(LeaseDuration / 2)}},

		// Overlapping checks.
		{Name: "overlap: an older check that claims the target owns it",
			Scenario: Scenario{Policy: oneStep(), Peers: []Peer{{Name: "older", Created: at(-2 * time.Hour), Claims: []string{"a"}}},
				Targets: []Target{sick("a")}},
			Want: Outcome{Skips: map[string]string{"a": "OwnedByOtherCheck"}, Events: []Event{{Skipped, "a"}}}},
		{Name: "overlap: of two checks of one age, the smaller name owns the target",
			Scenario: Scenario{Policy: oneStep(), Peers: []Peer{{Name: "aaa", Created: at(-time.Hour), Claims: []string{"a"}}},
				Targets: []Target{sick("a")}},
			Want: Outcome{Skips: map[string]string{"a": "OwnedByOtherCheck"}, Events: []Event{{Skipped, "a"}}}},
		{Name: "overlap: a newer check does not own the target",
			Scenario: Scenario{Policy: oneStep(), Peers: []Peer{{Name: "newer", Created: T0, Claims: []string{"a"}}},
				Targets: []Target{sick("a")}},
			Want: Outcome{Creates: []Ref{{"a", 0}}}},
		{Name: "overlap: an older check that does not select the target owns nothing",
			Scenario: Scenario{Policy: oneStep(), Peers: []Peer{{Name: "older", Created: at(-2 * time.Hour)}}, Targets: []Target{sick("a")}},
			Want:     Outcome{Creates: []Ref{{"a", 0}}}},
		{Name: "overlap: the check already remediating the target keeps it from an older one",
			Scenario: Scenario{Policy: oneStep(), Peers: []Peer{{Name: "older", Created: at(-2 * time.Hour), Claims: []string{"a"}}},
				Targets: []Target{remediating(sick("a"), at(-time.Minute))}},
			Want: Outcome{Next: at(LeaseDuration / 2)}},
		{Name: "overlap: a newer check already remediating the target keeps it",
			Scenario: Scenario{Policy: oneStep(), Peers: []Peer{{Name: "newer", Created: T0, Claims: []string{"a"}, Remediating: []string{"a"}}},
				Targets: []Target{sick("a")}},
			Want: Outcome{Skips: map[string]string{"a": "OwnedByOtherCheck"}, Events: []Event{{Skipped, "a"}}}},

		// Repeat back-off.
		{Name: "back-off: a target remediated too often waits until the hold ends",
			Scenario: Scenario{Policy: withBackoff(oneStep()), Targets: []Target{recent(sick("a"), at(-5*time.Minute))}},
			Want: Outcome{Skips: map[string]string{"a": "BackingOff"}, Events: []Event{{BackingOff, "a"}},
				Next: at(5 * time.Minute)}},
		{Name: "back-off: the next escalation step is not held",
			Scenario: Scenario{Policy: withBackoff(twoSteps()), Targets: []Target{recent(remediating(sick("a"), at(-10*time.Minute)), at(-10*time.Minute))}},
			Want:     Outcome{TimeOuts: []Ref{{"a", 0}}, Creates: []Ref{{"a", 1}}}, AnyNext: true},

		// The exclude label.
		{Name: "excluded: a target with the exclude label is not remediated",
			Scenario: Scenario{Policy: oneStep(), Targets: []Target{excluded(sick("a"))}},
			Want:     Outcome{Skips: map[string]string{"a": "Excluded"}, Events: []Event{{Skipped, "a"}}}},

		// Dry run: decide everything, start nothing.
		{Name: "dry run: a target it would remediate is reported, nothing is created and no lease taken",
			Scenario: Scenario{Policy: dryRun(oneStep()), Targets: []Target{sick("a")}},
			Want:     Outcome{Skips: map[string]string{"a": "DryRun"}, Events: []Event{{WouldRemediate, "a"}}}},
		{Name: "dry run: the gates still apply (one control-plane target at a time, then the dry run)",
			Scenario: Scenario{Policy: dryRun(oneStep()), Targets: []Target{controlPlane("cp-a", at(-2*time.Hour)), controlPlane("cp-b", at(-time.Hour))}},
			Want: Outcome{Skips: map[string]string{"cp-a": "DryRun", "cp-b": "ControlPlaneBusy"},
				Events: []Event{{WouldRemediate, "cp-a"}, {Skipped, "cp-b"}}}},

		// Escalation (engine.Escalate), every case.
		{Name: "escalation: a step within its timeout waits, looked at again when it runs out",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{remediating(sick("a"), at(-8*time.Minute))}},
			Want:     Outcome{Next: at(2 * time.Minute)}},
		{Name: "escalation: the step's timeout passes, its request is marked and the next step starts",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{remediating(sick("a"), at(-10*time.Minute))}},
			Want: Outcome{TimeOuts: []Ref{{"a", 0}}, Creates: []Ref{{"a", 1}},
				Records: map[string][]Record{"a": {{Step: 0, Started: at(-10 * time.Minute), Ended: T0}}}},
			AnyNext: true},
		{Name: "escalation: Succeeded=False ends the step early, its request is marked and the next step starts",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{failed(remediating(sick("a"), at(-time.Minute)))}},
			Want: Outcome{TimeOuts: []Ref{{"a", 0}}, Creates: []Ref{{"a", 1}},
				Records: map[string][]Record{"a": {{Step: 0, Started: at(-time.Minute), Ended: T0}}}},
			AnyNext: true},
		{Name: "escalation: the last step's Succeeded=False is not marked, the remediation is exhausted",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{lastStep(sick("a"), Request{Failed: true})}},
			Want: Outcome{Exhausted: []string{"a"}, Next: at(LeaseDuration / 2),
				Records: map[string][]Record{"a": {{Step: 0, Started: at(-30 * time.Minute), Ended: at(-20 * time.Minute)},
					{Step: 1, Started: at(-20 * time.Minute), Ended: T0}}}}},
		{Name: "escalation: the last step's timeout passes, its request is marked, the remediation is exhausted",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{lastStep(sick("a"), Request{})}},
			Want: Outcome{TimeOuts: []Ref{{"a", 1}}, Exhausted: []string{"a"}, Next: at(LeaseDuration / 2),
				Records: map[string][]Record{"a": {{Step: 0, Started: at(-30 * time.Minute), Ended: at(-20 * time.Minute)},
					{Step: 1, Started: at(-20 * time.Minute), Ended: T0}}}}},
		{Name: "escalation: hand-over, the next step waits while the ended step's request reports Processing=True",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{handedOver(sick("a"), at(-11*time.Minute), at(-time.Minute), metav1.ConditionTrue)}},
			Want: Outcome{WaitingFor: map[string]int{"a": 0}, Events: []Event{{WaitingForHandOver, "a"}},
				Next: at(4 * time.Minute)}},
		{Name: "escalation: hand-over, the wait is reported once",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{waiting(handedOver(sick("a"), at(-11*time.Minute), at(-time.Minute), metav1.ConditionTrue))}},
			Want:     Outcome{WaitingFor: map[string]int{"a": 0}, Next: at(4 * time.Minute)}},
		{Name: "escalation: hand-over overdue, the next step starts at the bound with a warning",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{handedOver(sick("a"), at(-15*time.Minute), at(-5*time.Minute), metav1.ConditionTrue)}},
			Want:     Outcome{Creates: []Ref{{"a", 1}}, Events: []Event{{HandOverTimedOut, "a"}}}, AnyNext: true},
		{Name: "escalation: hand-over done, Processing=False starts the next step at once",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{handedOver(sick("a"), at(-11*time.Minute), at(-time.Minute), metav1.ConditionFalse)}},
			Want:     Outcome{Creates: []Ref{{"a", 1}}}, AnyNext: true},
		{Name: "escalation: a vanished current request is asked for again, its step's start kept",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{vanished(sick("a"), at(-3*time.Minute))}},
			Want: Outcome{Creates: []Ref{{"a", 0}}, Next: at(7 * time.Minute),
				Records: map[string][]Record{"a": {{Step: 0, Started: at(-3 * time.Minute)}}}}},
		{Name: "escalation: a request the status lost is adopted as started now",
			Scenario: Scenario{Policy: twoSteps(), Targets: []Target{unrecorded(remediating(sick("a"), at(-3*time.Minute)))}},
			Want: Outcome{Next: at(LeaseDuration / 2),
				Records: map[string][]Record{"a": {{Step: 0, Started: T0}}}}},
	}
	for i := range rows {
		s := &rows[i].Scenario
		if s.Now.IsZero() {
			s.Now = T0
		}
		if s.Created.IsZero() {
			s.Created = at(-time.Hour)
		}
	}
	return rows
}

func withBudget(p Policy, n int) Policy { p.MaxUnhealthy = budget(n); return p }

func withCooldown(p Policy, d time.Duration) Policy { p.StormCooldown = d; return p }

func withHealthyDelay(p Policy, d time.Duration) Policy { p.HealthyDelay = d; return p }

func dryRun(p Policy) Policy { p.DryRun = true; return p }

func templateMissing(p Policy) Policy { p.TemplateMissing = true; return p }

// withBackoff starts holding back at once: the first remediation within 6 hours waits 10 minutes after
// the one before.
func withBackoff(p Policy) Policy {
	p.Backoff = &Backoff{After: 1, Window: 6 * time.Hour, Initial: 10 * time.Minute, Max: 40 * time.Minute}
	return p
}

// known is t with a status entry: the check's last pass saw it unhealthy.
func known(t Target) Target {
	if t.Status == nil {
		t.Status = &Entry{}
	}
	return t
}

func healthySince(t Target, since time.Time) Target {
	e := *t.Status
	e.HealthySince = since
	t.Status = &e
	return t
}

func leased(t Target, holder string, until time.Time) Target {
	t.Lease = &Lease{Holder: holder, Until: until}
	return t
}

func recent(t Target, starts ...time.Time) Target {
	t.RecentStarts = starts
	return t
}

func confirmed(t Target) Target {
	t.Confirmed = true
	return t
}

func excluded(t Target) Target {
	t.Excluded = true
	return t
}

// deleting is t whose requests are being deleted (a finalizer holds them).
func deleting(t Target) Target {
	rs := append([]Request(nil), t.Requests...)
	for i := range rs {
		rs[i].Deleting = true
	}
	t.Requests = rs
	return t
}

// requestsGone is t whose requests are gone; its status still records them.
func requestsGone(t Target) Target {
	t.Requests = nil
	return t
}

// failed is t whose last request reports Succeeded=False.
func failed(t Target) Target {
	rs := append([]Request(nil), t.Requests...)
	rs[len(rs)-1].Failed = true
	t.Requests = rs
	return t
}

// waiting is t whose status already says what its next step waits for (the last pass reported it).
func waiting(t Target) Target {
	e := *t.Status
	e.WaitingFor = step(0)
	t.Status = &e
	return t
}

// vanished is t whose step 0 started at started and whose request is gone before the step ended.
func vanished(t Target, started time.Time) Target {
	t.Status = &Entry{Records: []Record{{Step: 0, Started: started}}}
	return t
}

// unrecorded is t without its status entry: the write that recorded its request was lost.
func unrecorded(t Target) Target {
	t.Status = nil
	return t
}
