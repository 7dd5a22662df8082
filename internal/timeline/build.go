package timeline

import (
	"cmp"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// Event reasons Build reads. They are the controllers' (controllers/nhc and controllers/powercycle
// events.go, checked equal by a test) and the node lifecycle controller's and kubelet's.
const (
	ReasonNodeNotReady        = "NodeNotReady" // node lifecycle controller, on the Node
	ReasonNodeReady           = "NodeReady"    // kubelet, on the Node
	ReasonRemediationCreated  = "RemediationCreated"
	ReasonRemediationFinished = "RemediationFinished"
	ReasonPoweringOff         = "PoweringOff"
	ReasonPoweredOff          = "PoweredOff"
	ReasonPoweringOn          = "PoweringOn"
	ReasonPoweredOn           = "PoweredOn"
	ReasonRemediated          = "Remediated"
	ReasonCleanedUp           = "CleanedUp"
	ReasonAttemptFailed       = "AttemptFailed"
	ReasonEscalating          = "Escalating"
	ReasonRemediationFailed   = "RemediationFailed"
	// What the remediator did to the node and its lease (and the check, to the lease it held for the
	// request): the Node's taints and the lease are gone after the remediation, these events remain.
	ReasonNodeLeaseTaken         = "NodeLeaseTaken"
	ReasonNodeLeaseReleased      = "NodeLeaseReleased"
	ReasonNodeCordoned           = "NodeCordoned"
	ReasonOutOfServiceTaintAdded = "OutOfServiceTaintAdded"
	ReasonTaintsRemoved          = "TaintsRemoved"
)

// requestEventSteps are the steps the remediator's events on a request show.
var requestEventSteps = map[string]Step{
	ReasonPoweringOff: StepPoweringOff,
	ReasonPoweredOff:  StepPoweredOff,
	ReasonPoweringOn:  StepPoweringOn,
	ReasonPoweredOn:   StepPoweredOn,
	ReasonRemediated:  StepRemediated,
	ReasonCleanedUp:   StepEMRGone,

	ReasonNodeLeaseTaken:         StepLeaseTaken,
	ReasonNodeLeaseReleased:      StepLeaseReleased,
	ReasonNodeCordoned:           StepCordoned,
	ReasonOutOfServiceTaintAdded: StepFenced,
	ReasonTaintsRemoved:          StepTaintsRemoved,
}

// requestWarnings are the remediator's warning events on a request, and the phase each announces.
var requestWarnings = map[string]v1alpha1.PowerCyclePhase{
	ReasonAttemptFailed:     v1alpha1.PhaseRetrying,
	ReasonEscalating:        v1alpha1.PhaseEscalating,
	ReasonRemediationFailed: v1alpha1.PhaseFailed,
}

// Record is what a cluster keeps about one node's remediation, read by the caller.
type Record struct {
	// Node is the node's name.
	Node string
	// NodeObject is the Node; nil when it is gone.
	NodeObject *corev1.Node
	// Requests are the live PowerCycleRemediations for the node (a finished one is deleted: its events
	// remain).
	Requests []v1alpha1.PowerCycleRemediation
	// Lease is the node lease; nil when there is none.
	Lease *coordinationv1.Lease
	// Events are events that may concern the node (Build picks those about the Node, its requests and the
	// checks that remediated it).
	Events []eventsv1.Event
	// BMCs are the host's BMC objects (one, unless misconfigured): their status.recentRemediations record
	// the host's remediations that ended, after their requests and events are gone.
	BMCs []v1alpha1.BMC
}

// Timeline is a node's story rebuilt from a Record.
type Timeline struct {
	Node string
	// Start is the failure as first recorded: the node going NotReady, or else the request's creation.
	// Zero when the record holds no remediation of the node.
	Start time.Time
	// StartStep is the step Start is the time of.
	StartStep Step
	// Entries are the steps on record since Start, in order of time.
	Entries []Entry
	// NotOnRecord are the steps of a successful story (but the failure itself) that the record does not
	// show: not happened yet, not kept by the cluster (the host's own power as only the BMC knew it, which
	// the demo's simulator tells), or whose events have expired (the API server keeps them an hour).
	NotOnRecord []Step
}

// provenBefore are pairs of steps where a record of the second proves the first happened before it: the
// remediator acts only on a request that exists (it tells of the lease held for it, by itself or by the
// check that created it and took the lease right after, before the check's own event of the creation),
// and finalizes only a deleted one.
var provenBefore = [][2]Step{{StepEMRCreated, StepLeaseTaken}, {StepEMRCreated, StepPoweringOff}, {StepEMRDeleted, StepEMRGone}}

// slack is how far before the start a record may be and still belong to the story: core events and
// conditions are stamped to the second, the remediator's records to the microsecond.
const slack = time.Second

// candidate is a record of a step: when (first and, for a repeated event, last seen) and what it says.
type candidate struct {
	step        Step
	label       string
	first, last time.Time
	detail      string
	revision    string
	// checkWide marks a check's warning about all its nodes (a storm): it belongs to the story only while
	// the story lasts.
	checkWide bool
	// recorded marks a step told by a BMC's record of an ended remediation: coarser (to the second) and
	// terser than the request's status and events, it is shown only when they do not show the step.
	recorded bool
}

// key is what tells a candidate's step from another's: the step, or for a note its label.
func (c candidate) key() string {
	if c.step == StepNote {
		return "note " + c.label
	}
	return c.step.String()
}

// at is when the candidate happened in a story that starts at start: its first sighting, or for a
// repeated event first seen before the story, its last one.
func (c candidate) at(start time.Time) (time.Time, bool) {
	for _, t := range []time.Time{c.first, c.last} {
		if !t.IsZero() && !t.Before(start.Add(-slack)) {
			return t, true
		}
	}
	return time.Time{}, false
}

// Build tells the story of the latest remediation of r.Node from what the cluster keeps, in the words
// the demo uses. The failure's own moment is not on record in a real cluster: times count from the first
// record of it (the node going NotReady, or else the request's creation). A step the BMC's record of an
// ended remediation tells is shown only when the request's status, the events, the Node and the lease do
// not: each step once.
func Build(r Record) Timeline {
	cands := candidates(r)
	tl := Timeline{Node: r.Node}
	var created, notReady []time.Time
	for _, c := range cands {
		switch c.step {
		case StepEMRCreated:
			created = append(created, c.first)
		case StepNotReady:
			notReady = append(notReady, c.first)
		}
	}
	slices.SortFunc(created, time.Time.Compare)
	slices.SortFunc(notReady, time.Time.Compare)
	// The latest episode: the last request's creation and the last NotReady before it.
	switch {
	case len(created) > 0:
		last := created[len(created)-1]
		tl.Start, tl.StartStep = last, StepEMRCreated
		for _, t := range notReady {
			if !t.After(last.Add(slack)) {
				tl.Start, tl.StartStep = t, StepNotReady
			}
		}
	case len(notReady) > 0:
		tl.Start, tl.StartStep = notReady[len(notReady)-1], StepNotReady
	default:
		tl.NotOnRecord = StorySteps[1:]
		return tl
	}

	seen := map[Step]bool{}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		ta, _ := a.at(tl.Start)
		tb, _ := b.at(tl.Start)
		return cmp.Or(ta.Compare(tb), cmp.Compare(a.step, b.step))
	})
	// The story ends with its last step; while it is under way, it ends now.
	var end time.Time
	for _, c := range cands {
		if t, ok := c.at(tl.Start); ok && c.step != StepNote && t.After(end) {
			end = t
		}
	}
	ended := false
	shown := map[string]bool{} // the steps the request's status, events, the Node and the lease show
	for _, c := range cands {
		ended = ended || c.step == StepEMRGone
		if _, ok := c.at(tl.Start); ok && !c.recorded {
			shown[c.key()] = true
		}
	}
	for _, c := range cands {
		t, ok := c.at(tl.Start)
		if !ok || (c.step != StepNote && seen[c.step]) || (c.checkWide && ended && t.After(end)) || (c.recorded && shown[c.key()]) {
			continue
		}
		seen[c.step] = true
		label := c.label
		if c.step != StepNote {
			label = c.step.String()
		}
		tl.Entries = append(tl.Entries, Entry{At: max(t.Sub(tl.Start), 0), Step: c.step, Label: label,
			Detail: c.detail, Revision: c.revision, Time: t})
	}
	// A health check's event is written after its own status update, so it may lag the remediator's record
	// of what followed: what the later step's record proves happened first is moved to no later than it.
	at := map[Step]int{}
	for i, e := range tl.Entries {
		if e.Step != StepNote {
			at[e.Step] = i
		}
	}
	for _, p := range provenBefore {
		i, ok1 := at[p[0]]
		j, ok2 := at[p[1]]
		if ok1 && ok2 && tl.Entries[i].Time.After(tl.Entries[j].Time) {
			tl.Entries[i].Time, tl.Entries[i].At = tl.Entries[j].Time, tl.Entries[j].At
		}
	}
	if i, ok := at[tl.StartStep]; ok && tl.Entries[i].Time.Before(tl.Start) {
		tl.Start = tl.Entries[i].Time
		for k := range tl.Entries {
			tl.Entries[k].At = max(tl.Entries[k].Time.Sub(tl.Start), 0)
		}
	}
	slices.SortStableFunc(tl.Entries, func(a, b Entry) int { return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Step, b.Step)) })
	for _, s := range StorySteps[1:] {
		if !seen[s] {
			tl.NotOnRecord = append(tl.NotOnRecord, s)
		}
	}
	return tl
}

// candidates gathers every record of a step in r, before the story's start is known.
func candidates(r Record) []candidate {
	var out []candidate
	add := func(s Step, t *metav1.Time, detail, rv string) {
		if t != nil && !t.IsZero() {
			out = append(out, candidate{step: s, first: t.Time, detail: detail, revision: rv})
		}
	}
	if n := r.NodeObject; n != nil {
		if c := ReadyCondition(n); c != nil {
			if c.Status != corev1.ConditionTrue {
				add(StepNotReady, &c.LastTransitionTime, NotReadyDetail(c), n.ResourceVersion)
			} else {
				add(StepNodeReady, &c.LastTransitionTime, ReadyDetail(c), n.ResourceVersion)
			}
		}
		// A taint carries its time only when it evicts (NoExecute): the cordon's is not on record.
		for _, t := range n.Spec.Taints {
			switch t.Key {
			case v1alpha1.TaintRemediation:
				add(StepCordoned, t.TimeAdded, CordonedDetail(t), n.ResourceVersion)
			case v1alpha1.TaintOutOfService:
				add(StepFenced, t.TimeAdded, FencedDetail(t), n.ResourceVersion)
			}
		}
	}
	names, checks := map[string]bool{r.Node: true}, map[string]bool{}
	for i := range r.Events {
		e := &r.Events[i]
		if e.Reason == ReasonRemediationCreated && e.Related != nil && e.Related.Kind == "Node" && e.Related.Name == r.Node {
			checks[e.Regarding.Kind+"/"+e.Regarding.Namespace+"/"+e.Regarding.Name] = true
		}
	}
	for i := range r.BMCs {
		for _, rec := range r.BMCs[i].Status.RecentRemediations {
			if rec.NodeName == r.Node {
				names[rec.Name] = true
				out = append(out, recordCandidates(rec, r.BMCs[i].ResourceVersion)...)
			}
		}
	}
	for i := range r.Requests {
		p := &r.Requests[i]
		names[p.Name] = true
		for _, o := range p.OwnerReferences {
			if o.Kind == "NodeHealthCheck" {
				checks["NodeHealthCheck//"+o.Name] = true
			}
		}
		out = append(out, requestCandidates(p, r.Lease)...)
	}
	if l := r.Lease; l != nil {
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		t := l.Spec.AcquireTime
		if t == nil {
			t = &metav1.MicroTime{Time: l.CreationTimestamp.Time}
		}
		add(StepLeaseTaken, &metav1.Time{Time: t.Time}, LeaseTakenDetail(l.Namespace, l.Name, holder), l.ResourceVersion)
	}
	for i := range r.Events {
		if c, ok := eventCandidate(&r.Events[i], r.Node, names, checks); ok {
			out = append(out, c)
		}
	}
	return out
}

// requestCandidates are the steps a live request's status records: its creation, its attempts' times,
// its lease and its decided outcome, in the demo's words (the remediator's message for the current phase).
func requestCandidates(p *v1alpha1.PowerCycleRemediation, lease *coordinationv1.Lease) []candidate {
	var out []candidate
	st := p.Status
	msg := PhaseMessage(p)
	detail := func(phase v1alpha1.PowerCyclePhase, otherwise string) string {
		if st.Phase == phase && msg != "" {
			return msg
		}
		return otherwise
	}
	add := func(s Step, label string, t *metav1.Time, d string) {
		if t != nil && !t.IsZero() {
			out = append(out, candidate{step: s, label: label, first: t.Time, detail: d, revision: p.ResourceVersion})
		}
	}
	add(StepEMRCreated, "", &p.CreationTimestamp, RequestCreatedDetail(p.Namespace, p.Name, RequestCreator(p),
		p.Annotations["remediation.medik8s.io/template-name"]))
	for _, a := range st.Attempts {
		powerOff := &a.Started // the forced power-off follows the requests the host answers, if any
		for _, hr := range []struct {
			label string
			req   *v1alpha1.HostRequest
		}{{DiagnosticInterruptLabel, a.DiagnosticInterrupt}, {GracefulShutdownLabel, a.GracefulShutdown}} {
			if hr.req == nil {
				continue
			}
			at := hr.req.Requested
			if at == nil {
				at = hr.req.Ended
			}
			add(StepNote, hr.label, at, HostRequestDetail(hr.req))
			if hr.req.Ended != nil && hr.req.Ended.After(powerOff.Time) {
				powerOff = hr.req.Ended
			}
		}
		add(StepPoweringOff, "", powerOff, detail(v1alpha1.PhasePoweringOff, PoweringOffDetail))
		add(StepPoweredOff, "", a.PoweredOff, detail(v1alpha1.PhasePoweredOff, PoweredOffDetail))
		add(StepPoweringOn, "", a.PowerOnRequested, detail(v1alpha1.PhasePoweringOn, PoweringOnDetail))
		add(StepPoweredOn, "", a.PoweredOn, detail(v1alpha1.PhaseWaitingForNode, PoweredOnDetail))
		if a.Result == "Failed" {
			add(StepNote, WarningLabel(v1alpha1.PhaseRetrying), a.Finished, a.Message)
		}
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		switch {
		case c.Type == v1alpha1.ConditionSucceeded && c.Status == metav1.ConditionTrue:
			add(StepRemediated, "", &c.LastTransitionTime, detail(v1alpha1.PhaseSucceeded, RemediatedDetail))
		case c.Type == v1alpha1.ConditionSucceeded && c.Status == metav1.ConditionFalse:
			add(StepNote, WarningLabel(st.Phase), &c.LastTransitionTime, c.Message)
		case c.Type == v1alpha1.ConditionLeaseAcquired && c.Status == metav1.ConditionTrue:
			d := c.Message
			if lease != nil && lease.Spec.HolderIdentity != nil {
				d = LeaseTakenDetail(lease.Namespace, lease.Name, *lease.Spec.HolderIdentity)
			}
			add(StepLeaseTaken, "", &c.LastTransitionTime, d)
		}
	}
	add(StepEMRDeleted, "", p.DeletionTimestamp, RequestDeletingDetail)
	return out
}

// recordCandidates are the steps a BMC's record of an ended remediation tells: the request's creation, the
// power changes and how it ended (a request deleted before any outcome is told as gone when its clean-up
// was done). rv is the BMC's resourceVersion.
func recordCandidates(rec v1alpha1.RemediationRecord, rv string) []candidate {
	var out []candidate
	add := func(s Step, label string, t *metav1.Time, d string) {
		if t != nil && !t.IsZero() {
			out = append(out, candidate{step: s, label: label, first: t.Time, detail: d, revision: rv, recorded: true})
		}
	}
	by := "?"
	if hc := rec.HealthCheck; hc != nil {
		by = hc.Kind + " " + hc.Name
	}
	add(StepEMRCreated, "", &rec.Started, RecordedRequestDetail(rec.Kind, rec.Namespace, rec.Name, by))
	for _, c := range rec.PowerChanges {
		if c.Target == v1alpha1.PowerOff {
			add(StepPoweringOff, "", &c.Requested, PoweringOffDetail)
			add(StepPoweredOff, "", c.Confirmed, PoweredOffDetail)
		} else {
			add(StepPoweringOn, "", &c.Requested, PoweringOnDetail)
			add(StepPoweredOn, "", c.Confirmed, PoweredOnDetail)
		}
	}
	switch rec.Result {
	case v1alpha1.RemediationSucceeded:
		add(StepRemediated, "", &rec.Finished, rec.Message)
	case v1alpha1.RemediationFailed:
		add(StepNote, WarningLabel(v1alpha1.PhaseFailed), &rec.Finished, rec.Message)
	case v1alpha1.RemediationHandedOver:
		add(StepNote, HandedOverLabel, &rec.Finished, rec.Message)
	case v1alpha1.RemediationCancelled:
		add(StepEMRGone, "", &rec.Finished, rec.Message)
	}
	return out
}

// eventCandidate reads one event: the node lifecycle controller's and kubelet's on the Node, a health
// check's about the node, the remediator's on one of the node's requests (names).
func eventCandidate(e *eventsv1.Event, node string, names, checks map[string]bool) (candidate, bool) {
	c := candidate{detail: e.Note, revision: e.ResourceVersion}
	c.first = e.EventTime.Time
	if c.first.IsZero() {
		c.first = e.DeprecatedFirstTimestamp.Time
	}
	c.last = e.DeprecatedLastTimestamp.Time
	if e.Series != nil {
		c.last = e.Series.LastObservedTime.Time
	}
	reg, rel := e.Regarding, e.Related
	switch {
	case reg.Kind == "Node" && reg.Name == node:
		switch e.Reason {
		case ReasonNodeNotReady:
			c.step = StepNotReady
		case ReasonNodeReady:
			c.step = StepNodeReady
		default:
			return c, false
		}
	case (reg.Kind == "NodeHealthCheck" || reg.Kind == "MachineHealthCheck") && rel != nil && rel.Kind == "Node" && rel.Name == node:
		switch {
		case e.Reason == ReasonRemediationCreated:
			c.step = StepEMRCreated
		case e.Reason == ReasonRemediationFinished:
			c.step = StepEMRDeleted
		case e.Reason == ReasonNodeLeaseReleased: // the check held the lease for its request
			c.step = StepLeaseReleased
		case e.Type == corev1.EventTypeWarning:
			c.step, c.label = StepNote, "WARNING "+e.Reason // a skip, a time-out, an escalation...
		default:
			return c, false
		}
	case rel == nil && checks[reg.Kind+"/"+reg.Namespace+"/"+reg.Name] && e.Type == corev1.EventTypeWarning:
		c.step, c.label, c.checkWide = StepNote, "WARNING "+e.Reason, true // a storm holding remediation back...
	case reg.Kind == "PowerCycleRemediation" && names[reg.Name]:
		if s, ok := requestEventSteps[e.Reason]; ok {
			c.step = s
		} else if phase, ok := requestWarnings[e.Reason]; ok {
			c.step, c.label = StepNote, WarningLabel(phase)
		} else if e.Type == corev1.EventTypeWarning {
			c.step, c.label = StepNote, "WARNING "+e.Reason // a BMC not ready, a lease held by another...
		} else {
			return c, false
		}
	default:
		return c, false
	}
	return c, !c.first.IsZero()
}
