package engine

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/template"
)

// MaxRecords is how many steps a target's status remembers (the APIs' bound on
// unhealthyNodes[].remediations and unhealthyMachines[].remediations): the most recent ones.
const MaxRecords = 10

// Ref identifies a remediation request.
type Ref struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
}

// String names the request as "Kind namespace/name", as events and status.waitingFor say it.
func (r Ref) String() string { return r.Kind + " " + r.Namespace + "/" + r.Name }

// Step is one remediation step of a check: the kind of request its template makes, where, and how long
// it may take.
type Step struct {
	// GVK is the kind of the remediation request the step's template makes.
	GVK schema.GroupVersionKind
	// Namespace is the template's namespace, where its requests are made.
	Namespace string
	// Template is the template's name.
	Template string
	// Timeout ends the step when it passes; zero means never (a single remediationTemplate).
	Timeout time.Duration
	// Object is the template as the check read it (Templates); nil when it was not read, or cannot be used.
	Object *unstructured.Unstructured
}

// Ref is the reference to the step's template: its kind is the request kind's with "Template" after it,
// in the same group and version.
func (s Step) Ref() v1alpha1.TemplateReference {
	return v1alpha1.TemplateReference{APIVersion: s.GVK.GroupVersion().String(), Kind: s.GVK.Kind + "Template",
		Namespace: s.Namespace, Name: s.Template}
}

// Request is one of the check's remediation requests for a target, as the cache shows it.
type Request struct {
	Ref Ref
	// UID is the request's (deleting it is conditional on it: never a namesake made since).
	UID types.UID
	// TemplateName is the template the request was made from (its annotation), "" when it does not say.
	TemplateName string
	Created      time.Time
	// TimedOut: it carries the timed-out mark; TimedOutAt is the mark's time (zero when malformed).
	TimedOut   bool
	TimedOutAt time.Time
	// Failed: its remediator reports Succeeded=False.
	Failed bool
	// Processing is its Processing condition's status, "" when it has none (Unknown when unreadable).
	Processing metav1.ConditionStatus
	// Deleting: it has a deletion timestamp.
	Deleting bool
}

// Record is one step started for a target, the check's memory in status. Fields a kind's status does
// not keep are empty and match anything.
type Record struct {
	APIVersion, Kind, Namespace, Name, TemplateName string
	Started                                         time.Time
	// Ended is when the step ended (timed out, failed, or given up); zero while it runs.
	Ended time.Time
}

// Describes reports whether r is the record of request q.
func (r Record) Describes(q Request) bool {
	return r.Kind == q.Ref.Kind && orEqual(r.APIVersion, q.Ref.APIVersion) && orEqual(r.Namespace, q.Ref.Namespace) &&
		orEqual(r.Name, q.Ref.Name) && (r.TemplateName == "" || q.TemplateName == "" || r.TemplateName == q.TemplateName)
}

// of reports whether r was made by step s.
func (r Record) of(s Step) bool {
	return r.Kind == s.GVK.Kind && orEqual(r.APIVersion, s.GVK.GroupVersion().String()) && orEqual(r.Namespace, s.Namespace) &&
		orEqual(r.TemplateName, s.Template)
}

// orEqual: a recorded value ("" when not recorded) matches v.
func orEqual(recorded, v string) bool { return recorded == "" || recorded == v }

// Create asks for the request of Step (an index in the steps), named Name.
type Create struct {
	Step int
	Name string
	// First: the first request of a remediation (no step was started before): the gates for a new
	// remediation and the repeat back-off apply to it.
	First bool
	// Again: the current step's request vanished before its step ended, and is asked for again; the step's
	// timeout still runs from its start.
	Again bool
}

// Ending is the step that ended in this walk.
type Ending struct {
	Request Ref
	// Failed: its request reported Succeeded=False; otherwise its timeout passed or its step was removed
	// from the spec (Removed).
	Failed, Removed bool
	Timeout         time.Duration
	// Marked: the request is marked timed out (TimeOut). The last step's failed request is not: nothing
	// takes the host over from it, and a remediator that undoes its work on the mark (lifting a fence, say)
	// would leave a failed host unfenced with nothing to follow.
	Marked bool
}

// Walk is what Escalate decides for one target.
type Walk struct {
	// Records is the target's new history (oldest first), without the record of Create.
	Records []Record
	Create  *Create
	// TimeOut are requests to mark timed out; Delete are requests to delete.
	TimeOut, Delete []Ref
	// Ended is the step that ended now, nil if none.
	Ended *Ending
	// Exhausted: every step has ended (just now when Ended is set).
	Exhausted bool
	// WaitingFor names the ended step's request the next step waits for; WaitCheck is the earliest instant
	// a wait runs out, WaitUntil the latest (the next step starts then at the latest).
	WaitingFor           string
	WaitCheck, WaitUntil time.Time
	// Overdue are ended steps' requests that did not hand the host over within template.HandOverBound:
	// Create starts the next step without them.
	Overdue []Ref
	// NextStep is the step Create starts or a wait holds back (-1: none).
	NextStep int
	// Deadline is when the current step times out (zero: never, or no step under way).
	Deadline time.Time
}

// Next is the earliest instant the walk can change by the passage of time alone (zero: none).
func (w Walk) Next() time.Time {
	return Earliest(w.Deadline, w.WaitCheck)
}

// Escalate walks the remediation steps of one unhealthy target. records are the steps started so far
// (status), requests the check's requests for the target that exist. The current step is the last record
// not ended; it ends when its timeout passes, its request reports Succeeded=False, or its step is no
// longer in the spec. The next step is the first of the spec without a record; it starts once every ended
// step's request is finished with the host. A later step whose request would have the name of an earlier
// one's (same kind and namespace) gets a name of its own (template.RequestName); the earlier request is
// not deleted, it may still hold the host.
func Escalate(steps []Step, target string, records []Record, requests []Request, now time.Time) Walk {
	w := Walk{Records: Adopt(records, requests, now), NextStep: -1}
	for _, q := range requests {
		if q.Deleting && !q.TimedOut && !slices.ContainsFunc(w.Records, func(r Record) bool { return !r.Ended.IsZero() && r.Describes(q) }) {
			// Deleted (by someone) before its step ended: it still acts on the host until it is gone.
			return w
		}
	}
	if n := len(w.Records); n > 0 && w.Records[n-1].Ended.IsZero() {
		rec := &w.Records[n-1]
		i := slices.IndexFunc(steps, rec.of)
		q, found := find(requests, *rec)
		var timeout time.Duration
		if i >= 0 {
			timeout = steps[i].Timeout
		}
		end := &Ending{Request: q.Ref, Removed: i < 0, Timeout: timeout}
		switch {
		case i < 0:
		case found && q.Failed:
			end.Failed = true
		case timeout > 0 && !now.Before(rec.Started.Add(timeout)):
		case !found:
			w.Create = &Create{Step: i, Name: requestName(steps, i, target), Again: true}
			w.NextStep = i
			w.Deadline = deadline(rec.Started, timeout)
			return w
		default:
			w.Deadline = deadline(rec.Started, timeout)
			return w
		}
		rec.Ended = now
		if found {
			end.Marked = !(end.Failed && i == len(steps)-1)
			if end.Marked && !q.TimedOut && !q.Deleting {
				w.TimeOut = append(w.TimeOut, q.Ref)
			}
		}
		w.Ended = end
	}
	next := slices.IndexFunc(steps, func(s Step) bool { return !slices.ContainsFunc(w.Records, func(r Record) bool { return r.of(s) }) })
	if next < 0 {
		w.Exhausted = true
		return w
	}
	w.NextStep = next
	if w.waitForHandOver(requests, now) {
		return w
	}
	name := requestName(steps, next, target)
	for _, q := range requests {
		if q.Ref.Kind == steps[next].GVK.Kind && q.Ref.Namespace == steps[next].Namespace && q.Ref.Name == name {
			// Only a spec change leads here (a later step's name depends on the steps before it): an ended
			// step's request holds the name the next step wants. It is finished with the host (above), so it
			// goes first, and the next step starts once it is gone (its deletion brings the check back).
			if !q.Deleting {
				w.Delete = append(w.Delete, q.Ref)
			}
			w.Overdue = nil
			return w
		}
	}
	w.Create = &Create{Step: next, Name: name, First: len(w.Records) == 0}
	return w
}

// Adopt returns the target's records: those in status (copied), completed with the requests that exist
// but are not recorded (the status was lost, e.g. a write conflict after the create), each marked ended
// when its request carries the timed-out mark, oldest first, at most MaxRecords. An adopted step starts
// now, not at its request's creation: that is the API server's clock, and a step's timeout must never
// run out early because two clocks disagree.
func Adopt(records []Record, requests []Request, now time.Time) []Record {
	out := slices.Clone(records)
	sorted := slices.Clone(requests)
	slices.SortStableFunc(sorted, func(a, b Request) int { return a.Created.Compare(b.Created) })
	for _, q := range sorted { // in order of creation: adopted records keep it
		endedAt := now
		if !q.TimedOutAt.IsZero() {
			endedAt = q.TimedOutAt
		}
		i := slices.IndexFunc(out, func(r Record) bool { return r.Describes(q) })
		if i < 0 {
			r := Record{APIVersion: q.Ref.APIVersion, Kind: q.Ref.Kind, Namespace: q.Ref.Namespace, Name: q.Ref.Name,
				TemplateName: q.TemplateName, Started: now}
			if q.TimedOut {
				r.Ended = endedAt
			}
			out = append(out, r)
			continue
		}
		if out[i].Ended.IsZero() && q.TimedOut {
			out[i].Ended = endedAt
		}
	}
	slices.SortStableFunc(out, func(a, b Record) int { return a.Started.Compare(b.Started) })
	if n := len(out); n > MaxRecords {
		out = out[n-MaxRecords:]
	}
	return out
}

// find returns the existing request a record describes.
func find(requests []Request, rec Record) (Request, bool) {
	i := slices.IndexFunc(requests, rec.Describes)
	if i < 0 {
		return Request{Ref: Ref{APIVersion: rec.APIVersion, Kind: rec.Kind, Namespace: rec.Namespace, Name: rec.Name}}, false
	}
	return requests[i], true
}

// waitForHandOver holds the next step back while the request of an ended step is still acting on the
// host: it is finished with the host once it is gone, reports Processing=False, or has no Processing
// condition at all; one that does neither is waited for template.HandOverBound after it ended, then
// reported overdue. It reports whether the next step waits.
func (w *Walk) waitForHandOver(requests []Request, now time.Time) bool {
	for _, q := range requests {
		endedAt, ended := w.endedAt(q)
		if !ended {
			continue
		}
		switch state, until := template.HandOver(q.Processing, endedAt, now); state {
		case template.Holding:
			if w.WaitingFor == "" {
				w.WaitingFor = q.Ref.String()
			}
			w.WaitCheck = Earliest(w.WaitCheck, until)
			if until.After(w.WaitUntil) {
				w.WaitUntil = until
			}
		case template.Overdue:
			w.Overdue = append(w.Overdue, q.Ref)
		}
	}
	if w.WaitingFor == "" {
		return false
	}
	w.Overdue = nil
	return true
}

// endedAt tells whether request q has ended and when: its record's end, else its mark's time, else its
// creation (a malformed mark: the wait for it is bounded all the same).
func (w *Walk) endedAt(q Request) (time.Time, bool) {
	if i := slices.IndexFunc(w.Records, func(r Record) bool { return !r.Ended.IsZero() && r.Describes(q) }); i >= 0 {
		return w.Records[i].Ended, true
	}
	switch {
	case !q.TimedOut:
		return time.Time{}, false
	case q.TimedOutAt.IsZero():
		return q.Created, true
	}
	return q.TimedOutAt, true
}

// requestName is the name of the request step i makes for target (template.RequestName).
func requestName(steps []Step, i int, target string) string {
	keys := make([]template.StepKey, len(steps))
	for j, s := range steps {
		keys[j] = template.StepKey{Kind: s.GVK.GroupKind(), Namespace: s.Namespace, Template: s.Template}
	}
	return template.RequestName(target, keys, i)
}

func deadline(started time.Time, timeout time.Duration) time.Time {
	if timeout <= 0 {
		return time.Time{}
	}
	return started.Add(timeout)
}

// Earliest returns the earlier of two instants, ignoring zero ones.
func Earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}
