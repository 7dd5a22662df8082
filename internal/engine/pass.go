package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/template"
)

// The events of a target's walk, the same reasons for both kinds.
const (
	// EventRemediationTimedOut (Warning): a step ran out of time, or left the spec; its request is marked.
	EventRemediationTimedOut = "RemediationTimedOut"
	// EventRemediationFailed (Warning): a step's request reported Succeeded=False (Ending.Marked says
	// whether it is marked).
	EventRemediationFailed = "RemediationFailed"
	// EventRemediationsExhausted (Warning): the last step ended and the target is still unhealthy.
	EventRemediationsExhausted = "RemediationsExhausted"
	// EventWaitingForHandOver (Normal): the next step waits until the ended step's request is finished
	// with the host; once per request waited for.
	EventWaitingForHandOver = "WaitingForHandOver"
	// EventHandOverTimedOut (Warning): an ended step's request did not hand the host over within
	// template.HandOverBound; the next step starts anyway.
	EventHandOverTimedOut = "HandOverTimedOut"
	// EventWaitingForConfirmation (Normal): a target is healthy again and, healthyDelay being negative, its
	// remediation waits for a person to confirm it (v1alpha1.AnnotationConfirmedHealthy).
	EventWaitingForConfirmation = "WaitingForConfirmation"
	// EventRemediationFinished (Normal): a target is healthy again; its requests are deleted.
	EventRemediationFinished = "RemediationFinished"
)

// Pass is one decision of a check about its unhealthy targets, the same for both kinds: per target the
// escalation walk and its events, the Node's lease kept while the check's requests live, and the target's
// new start, which Admit puts through the gates (Gate) in the order the targets' criteria expired. It
// performs no I/O: the adapter writes what the outcomes ask for.
type Pass struct {
	Steps []Step
	Now   time.Time
	Gate  Gate
	// Holder is the check's lease holder identity, Leases the node leases by Node (nil: none were read,
	// and none is kept), LeaseDuration how long the check takes one for.
	Holder        string
	Leases        map[string]gates.Lease
	LeaseDuration time.Duration
	// Next is the earliest instant the decision can change by the passage of time alone (zero: none).
	Next time.Time
	// Holds counts the back-off holds the pass began (their event says so), for RecordBackoff.
	Holds int

	starts []*Outcome
}

// Target is one unhealthy target of a check, as its adapter read it.
type Target struct {
	// Name is the target's (its status entry's, the base of its requests' names); Subject names it in
	// events ("Node worker-1", "Machine").
	Name, Subject string
	// Node is the target's Node, whose lease the check holds while it remediates (nil: none, or gone);
	// NodeName its name, CPKey its key under the one-control-plane-at-a-time rule ("" when it is not a
	// control-plane target).
	Node            *corev1.Node
	NodeName, CPKey string
	// Why it is unhealthy, and when its criterion expired (zero: no such instant).
	Why       string
	ExpiredAt time.Time
	// Held: nothing new starts for the target (the check is disabled, paused, in a storm or its cooldown;
	// the kind's own reasons); its steps under way still end. Excluded: its Node carries the exclude label.
	Held, Excluded bool
	// Requests are the check's requests for the target; Status is its status entry before the pass
	// (empty: none), whose records are its steps as its status remembers them.
	Requests []Request
	Status   v1alpha1.RemediationProgress
	// Owner is Start.Owner: whether another check owns the target, or the request the step would create.
	Owner func() (reason, message string)
}

// Outcome is what a pass decides for one target.
type Outcome struct {
	Target Target
	Walk   Walk
	// Create is the request to create, admitted by the gates (nil: none, or Skip says why not).
	Create *Create
	Skip   *Skip
	// NewSkip: Skip differs from what the status said (the skipped metric counts it).
	NewSkip bool
	// Hold: a target healthy again keeps its requests, healthy since HealthySince; Delete are its requests
	// to delete once it is not held, Unconfirm: a person's confirmation goes with them (Healthy).
	Hold         bool
	HealthySince time.Time
	Delete       []Ref
	Unconfirm    bool
	// Lease: the check's lease on the target's Node is written (renewed at half-time, retaken, or taken
	// over From the remediators of its requests).
	Lease bool
	From  []string
	// Events are the target's events, in order.
	Events []Event
	// Entry is the target's status entry after the pass: its records, the step it waits for and its skip
	// (Unhealthy, Admit, Sent), or its records and since when it is healthy again (Healthy).
	Entry v1alpha1.RemediationProgress
}

// Unhealthy decides for one unhealthy target: its lease kept while the check's requests live, its walk
// (Escalate) with the events of a step that ended and of a wait for a hand-over, and, when the walk asks
// for a request and nothing holds the target back, a start for Admit.
func (p *Pass) Unhealthy(t Target) *Outcome {
	o := &Outcome{Target: t}
	if len(t.Requests) > 0 {
		p.keepLease(o)
	}
	if t.Status.ConditionsHealthyTimestamp != nil && !slices.ContainsFunc(t.Requests, func(q Request) bool { return !q.Deleting }) {
		// Its last remediation ended when it was healthy again: its requests are deleted, or being deleted.
		// Failing again is a new remediation, which starts once they are gone (one may still act on the
		// host), through every gate of a first start (the back-off among them), not as that one's next step.
		if len(t.Requests) > 0 {
			o.Entry = t.Status
			return o
		}
		t.Status.Remediations, t.Status.ConditionsHealthyTimestamp, t.Status.WaitingFor = nil, nil, ""
		o.Target = t
	}
	w := Escalate(p.Steps, t.Name, Records(t.Status.Remediations), t.Requests, p.Now)
	o.Walk = w
	o.Entry = v1alpha1.RemediationProgress{Remediations: StatusRecords(w.Records), WaitingFor: w.WaitingFor}
	p.at(w.Next())
	if w.Ended != nil {
		o.Events = append(o.Events, endEvent(*w.Ended))
		if w.Exhausted {
			o.Events = append(o.Events, Event{Reason: EventRemediationsExhausted,
				Note: fmt.Sprintf("%s is still unhealthy and every remediation step has ended", t.Subject)})
		}
	}
	if w.WaitingFor != "" && w.WaitingFor != t.Status.WaitingFor {
		o.Events = append(o.Events, Event{Reason: EventWaitingForHandOver, Normal: true, Note: fmt.Sprintf(
			"Escalation step %d of %d for %s waits until %s is finished with the host (deleted, or Processing=False); "+
				"it starts at %s at the latest", w.NextStep+1, len(p.Steps), t.Subject, w.WaitingFor, w.WaitUntil.UTC().Format(time.RFC3339))})
	}
	switch {
	case w.Create == nil || t.Held:
	case t.Excluded:
		p.skip(o, &Skip{Reason: SkipExcluded, Message: gates.ExcludedMessage()})
	default:
		p.starts = append(p.starts, o)
	}
	return o
}

// endEvent is the warning of a step that ended.
func endEvent(end Ending) Event {
	e := Event{Reason: EventRemediationTimedOut}
	switch {
	case end.Failed && !end.Marked:
		e.Reason, e.Note = EventRemediationFailed, fmt.Sprintf(
			"%s reported Succeeded=False: it was the last step, so it is left as the remediator left it", end.Request)
	case end.Failed:
		e.Reason, e.Note = EventRemediationFailed, fmt.Sprintf("%s reported Succeeded=False: marked timed out", end.Request)
	case end.Removed:
		e.Note = fmt.Sprintf("%s belongs to a step no longer in the spec: marked timed out", end.Request)
	default:
		e.Note = fmt.Sprintf("%s did not succeed within %s: marked timed out", end.Request, end.Timeout)
	}
	return e
}

// Admit puts the starts of the targets decided so far through the gates, in the order their criteria
// expired (a step of a remediation under way first: it has no such instant), then by name: where only
// one may start (control-plane targets), the first to fail goes first.
func (p *Pass) Admit() {
	expiry := func(o *Outcome) time.Time {
		if o.Walk.Create.First {
			return o.Target.ExpiredAt
		}
		return time.Time{}
	}
	slices.SortFunc(p.starts, func(a, b *Outcome) int {
		return cmp.Or(expiry(a).Compare(expiry(b)), cmp.Compare(a.Target.Name, b.Target.Name))
	})
	for _, o := range p.starts {
		t, c := o.Target, o.Walk.Create
		st := p.Steps[c.Step]
		ref := Ref{APIVersion: st.GVK.GroupVersion().String(), Kind: st.GVK.Kind, Namespace: st.Namespace, Name: c.Name}
		if s := p.Gate.Start(Start{Target: t.Name, Node: t.NodeName, CPKey: t.CPKey, Owner: t.Owner, First: c.First,
			WouldDo: WouldCreate(ref, st.Template, c.Step, len(p.Steps))}); s != nil {
			p.skip(o, s)
			continue
		}
		o.Create = c
		if !c.Again && st.Timeout > 0 {
			p.at(p.Now.Add(st.Timeout)) // the step about to start times out then
		}
		for _, r := range o.Walk.Overdue {
			o.Events = append(o.Events, Event{Reason: EventHandOverTimedOut, Note: fmt.Sprintf(
				"%s did not report that it is finished with the host (Processing=False) within %s of its timed-out mark: "+
					"starting escalation step %d of %d anyway", r, template.HandOverBound, c.Step+1, len(p.Steps))})
		}
	}
	p.starts = nil
}

// skip records why the target's start does not happen, and when to look again; its event once per
// reason and message (Skip.Event).
func (p *Pass) skip(o *Outcome, s *Skip) {
	o.Skip, o.Entry.SkipReason, o.Entry.SkipMessage = s, s.Reason, s.Message
	p.at(s.Retry)
	if ev := s.Event(o.Target.Status.SkipReason, o.Target.Status.SkipMessage, o.Target.Subject, o.Target.Why); ev != nil {
		o.Events, o.NewSkip = append(o.Events, *ev), true
		if s.Reason == SkipBackingOff {
			p.Holds++
		}
	}
}

// Healthy decides for a target healthy again whose requests the check still has: they are kept, and its
// Node's lease, for healthyDelay (delay) from since (the first pass that saw it healthy; zero: this one), or
// until a person confirms it (confirmed) when the delay is negative, which the hold's first pass says in an
// event; then its requests are deleted and a person's confirmation goes with them, so that it never
// confirms the next remediation.
func (p *Pass) Healthy(t Target, since time.Time, delay time.Duration, confirmed bool) *Outcome {
	o := &Outcome{Target: t, HealthySince: since}
	if since.IsZero() {
		o.HealthySince = p.Now
	}
	o.Entry = v1alpha1.RemediationProgress{Remediations: Adopted(t.Status, t.Requests, p.Now),
		ConditionsHealthyTimestamp: &metav1.Time{Time: o.HealthySince}}
	// Requests every one of which is being deleted are a remediation already over: nothing to hold (a person
	// confirmed it, or the delay passed, in an earlier pass), and no confirmation to wait for again.
	hold, until := HealthyHold(o.HealthySince, delay, confirmed, p.Now)
	if o.Hold = hold && !allDeleting(t.Requests); o.Hold {
		p.at(until)
		p.keepLease(o)
		if since.IsZero() && delay < 0 {
			o.Events = append(o.Events, Event{Reason: EventWaitingForConfirmation, Normal: true, Note: fmt.Sprintf(
				"%s is healthy again; its remediation is kept until a person confirms it: annotate Node %s %s",
				t.Subject, t.NodeName, v1alpha1.AnnotationConfirmedHealthy)})
		}
		return o
	}
	o.Unconfirm = confirmed
	// The lease is kept while the requests live: one being deleted may still be acting on the host (a
	// remediator's finalizer restoring it).
	p.keepLease(o)
	refs := make([]string, 0, len(t.Requests))
	for _, q := range t.Requests {
		refs = append(refs, q.Ref.String())
		if !q.Deleting {
			o.Delete = append(o.Delete, q.Ref)
		}
	}
	if len(o.Delete) > 0 {
		o.Events = append(o.Events, Event{Reason: EventRemediationFinished, Normal: true,
			Note: fmt.Sprintf("%s is healthy again: deleting %s", t.Subject, strings.Join(refs, ", "))})
	}
	return o
}

// allDeleting reports whether there are requests and every one is being deleted.
func allDeleting(rs []Request) bool {
	for _, r := range rs {
		if !r.Deleting {
			return false
		}
	}
	return len(rs) > 0
}

// KeepLease keeps the check's lease on the target's Node while its requests live: renewed once half of it
// has run out, retaken when missing or expired, taken over from the remediator of one of its requests
// (which took it between its request going out and the check's lease); otherwise the pass looks again at
// half-time. A lease someone else took meanwhile is left to them: the remediation runs on.
func (p *Pass) KeepLease(t Target) *Outcome {
	o := &Outcome{Target: t}
	p.keepLease(o)
	return o
}

func (p *Pass) keepLease(o *Outcome) {
	if p.Leases == nil || o.Target.Node == nil {
		return
	}
	from := Holders(o.Target.Requests)
	write, at := gates.KeepLease(p.Leases[o.Target.Node.Name], p.Holder, from, p.LeaseDuration, p.Now)
	if !write {
		p.at(at)
		return
	}
	o.Lease, o.From = true, from
}

func (p *Pass) at(t time.Time) { p.Next = Earliest(p.Next, t) }
