package enginetest

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestParityRowsAreWellFormed: every row has a name of its own, and names only steps and targets its
// scenario has.
func TestParityRowsAreWellFormed(t *testing.T) {
	g := NewWithT(t)
	names := map[string]bool{}
	for _, r := range Rows() {
		g.Expect(names).NotTo(HaveKey(r.Name), "two rows named %q", r.Name)
		names[r.Name] = true
		s := r.Scenario
		g.Expect(s.Now).To(Equal(T0), r.Name)
		targets := map[string]bool{}
		for _, tg := range s.Targets {
			targets[tg.Name] = true
			for _, q := range tg.Requests {
				g.Expect(q.Step).To(BeNumerically("<", len(s.Policy.Steps)), "%s: a request of step %d", r.Name, q.Step)
			}
			if tg.Status != nil {
				for _, rec := range tg.Status.Records {
					g.Expect(rec.Step).To(BeNumerically("<", len(s.Policy.Steps)), "%s: a record of step %d", r.Name, rec.Step)
				}
			}
		}
		for _, ref := range append(append(append([]Ref(nil), r.Want.Creates...), r.Want.TimeOuts...), r.Want.Deletes...) {
			g.Expect(targets).To(HaveKey(ref.Target), r.Name)
			g.Expect(ref.Step).To(BeNumerically("<", len(s.Policy.Steps)), r.Name)
		}
		for name := range r.Want.Skips {
			g.Expect(targets).To(HaveKey(name), r.Name)
		}
	}
}

// TestParityCheckReportsEveryDifference: a row holds a checker to each aspect of its outcome, and names
// the aspect that differs.
func TestParityCheckReportsEveryDifference(t *testing.T) {
	g := NewWithT(t)
	aspects := func(fs []failure) []Aspect {
		var out []Aspect
		for _, f := range fs {
			out = append(out, f.aspect)
		}
		return out
	}
	g.Expect(aspects(Row{Want: Outcome{Creates: []Ref{{"a", 0}}}}.check(Outcome{Creates: []Ref{{"a", 1}}}))).To(Equal([]Aspect{AspectCreates}))
	g.Expect(aspects(Row{Want: Outcome{Skips: map[string]string{"a": "Excluded"}}}.check(Outcome{}))).To(Equal([]Aspect{AspectSkips}))
	g.Expect(aspects(Row{Want: Outcome{Events: []Event{{Skipped, "a"}}}}.check(Outcome{Events: []Event{{Skipped, "a"}, {Skipped, "a"}}}))).
		To(Equal([]Aspect{AspectEvents}), "an event twice is not an event once")
	g.Expect(aspects(Row{Want: Outcome{Next: T0}}.check(Outcome{}))).To(Equal([]Aspect{AspectNext}))
	g.Expect(Row{Want: Outcome{Next: T0}, AnyNext: true}.check(Outcome{})).To(BeEmpty())
	g.Expect(Row{}.check(Outcome{Records: map[string][]Record{"a": {{}}}})).To(BeEmpty(), "records only of the targets the row lists")
	g.Expect(aspects(Row{Want: Outcome{Records: map[string][]Record{"a": {{Started: T0}}}}}.check(Outcome{}))).To(Equal([]Aspect{AspectRecords}))
	g.Expect(aspects(Row{Want: Outcome{HealthySince: map[string]time.Time{"a": {}}}}.check(Outcome{HealthySince: map[string]time.Time{"a": T0}}))).
		To(Equal([]Aspect{AspectHealthySince}), "a zero HealthySince wants none")
	g.Expect(Row{Want: Outcome{Storm: StormCooldown}}.check(Outcome{Storm: StormCooldown, LeaseWrites: []string{}})).To(BeEmpty(),
		"an empty list is no list")
}

// TestParityDriftMasksOnlyWhatItNames: a known drift excuses the aspects it names, and only while they
// differ.
func TestParityDriftMasksOnlyWhatItNames(t *testing.T) {
	g := NewWithT(t)
	row := Row{Want: Outcome{Creates: []Ref{{"a", 0}}, Skips: map[string]string{"b": "ControlPlaneBusy"}}}
	drift := Drift{Why: "admits in another order", Differs: []Aspect{AspectCreates, AspectSkips}}

	errs, logs := drift.judge(row.check(Outcome{Creates: []Ref{{"b", 0}}, Skips: map[string]string{"a": "ControlPlaneBusy"}}))
	g.Expect(errs).To(BeEmpty(), "the drift as known")
	g.Expect(logs).To(HaveLen(2))

	errs, _ = drift.judge(row.check(Outcome{Creates: []Ref{{"b", 0}}, Skips: map[string]string{"a": "ControlPlaneBusy"}, Storm: StormCooldown}))
	g.Expect(errs).To(ConsistOf(ContainSubstring(string(AspectStorm))), "an aspect the drift does not name")

	errs, _ = drift.judge(row.check(Outcome{Creates: []Ref{{"b", 0}}, Skips: map[string]string{"b": "ControlPlaneBusy"}}))
	g.Expect(errs).To(ConsistOf(ContainSubstring("no longer differ")), "half fixed: the drift must shrink")

	errs, _ = Drift{}.judge(row.check(Outcome{}))
	g.Expect(errs).To(HaveLen(2), "no drift: every difference is an error")
}
