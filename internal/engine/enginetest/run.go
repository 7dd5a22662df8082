package enginetest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
)

// Adapter runs one checker's pure decision on a Scenario.
type Adapter interface {
	// Decide builds the checker's input from s as its observe would, decides, and reads the Outcome from
	// the plan. It fails t only when it cannot build the input.
	Decide(t *testing.T, s Scenario) Outcome
	// KnownDrift names the rows this checker is known to fail, each with how it behaves instead and where
	// its outcome differs. Run holds the list to account (see Drift).
	KnownDrift() map[string]Drift
}

// Drift is a known difference of one checker on one row. Run still runs the row: the aspects the drift
// names must still differ (else it is fixed, and the drift must go), and every other aspect of the row
// must hold, so a drift masks nothing else.
type Drift struct {
	// Why says how the checker behaves instead.
	Why string
	// Differs are the aspects of the outcome that differ.
	Differs []Aspect
}

// Aspect is one part of an outcome a row compares.
type Aspect string

// The aspects of an outcome, as a failure names them.
const (
	AspectCreates      Aspect = "requests created"
	AspectTimeOuts     Aspect = "requests marked timed out"
	AspectDeletes      Aspect = "requests deleted"
	AspectSkips        Aspect = "skip reasons"
	AspectWaitingFor   Aspect = "steps waited for"
	AspectExhausted    Aspect = "targets whose last step ended"
	AspectLeaseWrites  Aspect = "leases written"
	AspectReleases     Aspect = "leases released"
	AspectUnconfirms   Aspect = "confirmations removed"
	AspectStorm        Aspect = "StormActive reason"
	AspectRestricted   Aspect = "RemediationAllowed is False"
	AspectEvents       Aspect = "events"
	AspectNext         Aspect = "next look"
	AspectRecords      Aspect = "status records"
	AspectHealthySince Aspect = "conditionsHealthyTimestamp"
)

// Row is one behaviour: a scenario and the outcome it must lead to.
type Row struct {
	Name     string
	Scenario Scenario
	// Want is the outcome. Every aspect is compared, except Records and HealthySince, compared only for
	// the targets Want lists, and Next when AnyNext is set.
	Want Outcome
	// AnyNext: the row makes no claim on Next. A pass that creates a request looks again when it sees the
	// request (its watch event); when the new step's timeout is reckoned, in that pass or the next one,
	// is the kind's business.
	AnyNext bool
}

// Run runs every row against the adapter's checker, one subtest per row.
func Run(t *testing.T, a Adapter) {
	rows := Rows()
	drifts := a.KnownDrift()
	for name := range drifts {
		if !slices.ContainsFunc(rows, func(r Row) bool { return r.Name == name }) {
			t.Errorf("KnownDrift names no row: %q", name)
		}
	}
	for _, row := range rows {
		t.Run(row.Name, func(t *testing.T) {
			drift, known := drifts[row.Name]
			if known {
				t.Logf("known drift: %s", drift.Why)
			}
			errs, logs := drift.judge(row.check(a.Decide(t, row.Scenario)))
			for _, l := range logs {
				t.Log(l)
			}
			for _, e := range errs {
				t.Error(e)
			}
		})
	}
}

// judge sorts a row's failures into errors and, for the aspects the drift names, logs; an aspect the
// drift names that does not differ is an error too.
func (d Drift) judge(failures []failure) (errs, logs []string) {
	differs := map[Aspect]bool{}
	for _, f := range failures {
		if !slices.Contains(d.Differs, f.aspect) {
			errs = append(errs, f.message)
			continue
		}
		differs[f.aspect] = true
		logs = append(logs, "known drift, not fixed yet: "+f.message)
	}
	for _, aspect := range d.Differs {
		if !differs[aspect] {
			errs = append(errs, fmt.Sprintf("known drift (%s): the %s no longer differ, remove %q from the adapter's KnownDrift",
				d.Why, aspect, aspect))
		}
	}
	return errs, logs
}

// failure is one aspect of an outcome that differs from the row's.
type failure struct {
	aspect  Aspect
	message string
}

// check compares got with the row's outcome and returns what differs.
func (r Row) check(got Outcome) []failure {
	var failures []failure
	var aspect Aspect
	g := gomega.NewGomega(func(message string, _ ...int) { failures = append(failures, failure{aspect, message}) })
	expect := func(a Aspect, actual, expected any, of ...string) {
		aspect = a
		g.Expect(actual).To(gomega.Equal(expected), strings.Join(append([]string{string(a)}, of...), " of "))
	}
	got, want := got.normalized(), r.Want.normalized()
	expect(AspectCreates, got.Creates, want.Creates)
	expect(AspectTimeOuts, got.TimeOuts, want.TimeOuts)
	expect(AspectDeletes, got.Deletes, want.Deletes)
	expect(AspectSkips, got.Skips, want.Skips)
	expect(AspectWaitingFor, got.WaitingFor, want.WaitingFor)
	expect(AspectExhausted, got.Exhausted, want.Exhausted)
	expect(AspectLeaseWrites, got.LeaseWrites, want.LeaseWrites)
	expect(AspectReleases, got.Releases, want.Releases)
	expect(AspectUnconfirms, got.Unconfirms, want.Unconfirms)
	expect(AspectStorm, got.Storm, want.Storm)
	expect(AspectRestricted, got.Restricted, want.Restricted)
	expect(AspectEvents, got.Events, want.Events)
	if !r.AnyNext {
		expect(AspectNext, stamp(got.Next), stamp(want.Next))
	}
	for _, target := range slices.Sorted(maps.Keys(want.Records)) {
		expect(AspectRecords, stampRecords(got.Records[target]), stampRecords(want.Records[target]), target)
	}
	for _, target := range slices.Sorted(maps.Keys(want.HealthySince)) {
		expect(AspectHealthySince, stamp(got.HealthySince[target]), stamp(want.HealthySince[target]), target)
	}
	return failures
}

// stamp writes an instant relative to T0, so that a failure reads "T0+5m0s", not a date.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	if d := t.Sub(T0); d < 0 {
		return "T0-" + (-d).String()
	}
	return "T0+" + t.Sub(T0).String()
}

func stampRecords(records []Record) []string {
	out := make([]string, 0, len(records))
	for _, r := range records {
		s := "step " + strconv.Itoa(r.Step) + " started " + stamp(r.Started)
		if !r.Ended.IsZero() {
			s += ", ended " + stamp(r.Ended)
		}
		out = append(out, s)
	}
	return out
}
