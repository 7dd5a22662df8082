package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/timeline"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The story's steps, entries and words are internal/timeline's, shared with `kubectl metalheal timeline`,
// which tells a real cluster's story in the same words.
type (
	step  = timeline.Step
	entry = timeline.Entry
)

const (
	stepInjected      = timeline.StepInjected
	stepNotReady      = timeline.StepNotReady
	stepEMRCreated    = timeline.StepEMRCreated
	stepLeaseTaken    = timeline.StepLeaseTaken
	stepPoweringOff   = timeline.StepPoweringOff
	stepCordoned      = timeline.StepCordoned
	stepHostOff       = timeline.StepHostOff
	stepPoweredOff    = timeline.StepPoweredOff
	stepFenced        = timeline.StepFenced
	stepPoweringOn    = timeline.StepPoweringOn
	stepHostOn        = timeline.StepHostOn
	stepPoweredOn     = timeline.StepPoweredOn
	stepNodeReady     = timeline.StepNodeReady
	stepTaintsRemoved = timeline.StepTaintsRemoved
	stepRemediated    = timeline.StepRemediated
	stepEMRDeleted    = timeline.StepEMRDeleted
	stepEMRGone       = timeline.StepEMRGone
	stepLeaseReleased = timeline.StepLeaseReleased
	stepNote          = timeline.StepNote
)

// storySteps are the steps of a successful story, in order: the demo waits for all of them.
var storySteps = timeline.StorySteps

// powerCutSteps are the steps of a successful power-cut story (--story=power-cut): the host is fenced on its
// BMC's word, so the Node need never be NotReady, and its Ready again is no step then.
var powerCutSteps = slices.DeleteFunc(slices.Clone(storySteps), func(s step) bool {
	return s == stepNotReady || s == stepNodeReady
})

var (
	formatEntry  = timeline.FormatEntry
	formatOffset = timeline.FormatOffset
)

// ErrRemediationFailed is returned when the remediator gives up on the node.
var ErrRemediationFailed = errors.New("the remediation failed")

// story follows one broken node through its remediation. Watches and the BMC hook feed it objects from
// any goroutine; it decides which steps they show, prints each step once, as it is first seen, and
// keeps the timeline. It does no I/O but writing to out.
type story struct {
	clock  clock.PassiveClock
	out    io.Writer
	node   string // the broken node
	system string // its BMC system
	// required are the steps of a successful story (storySteps, or powerCutSteps).
	required []step

	mu      sync.Mutex
	start   time.Time // when the failure was injected; zero before
	ended   bool      // the story is told: nothing more is recorded
	entries []entry
	seen    map[step]time.Duration
	rv      string                   // the resourceVersion of the object being observed
	holder  string                   // the node lease's holder
	phase   v1alpha1.PowerCyclePhase // the remediation's last phase
	message string                   // ...and its Processing or Succeeded message
	failure error                    // the remediator gave up
	changed chan struct{}            // poked (without blocking) whenever something is recorded
	// poweredOff is the node's PoweredOff condition as last seen ("True/BMCReportedOff"), and
	// poweredOffAt when it first turned True.
	poweredOff   string
	poweredOffAt time.Duration
}

func newStory(clk clock.PassiveClock, out io.Writer, node, system string) *story {
	return &story{clock: clk, out: out, node: node, system: system, required: storySteps, seen: map[step]time.Duration{},
		changed: make(chan struct{}, 1)}
}

// begin marks the failure: the clock of the timeline starts.
func (s *story) begin(detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start = s.clock.Now()
	s.recordAtLocked(0, stepInjected, "", detail)
}

// end closes the story: later observations (the world may be kept running) are ignored.
func (s *story) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
}

// Changed is poked whenever the story moves on.
func (s *story) Changed() <-chan struct{} { return s.changed }

// recordLocked records a step the first time it is seen (notes every time) and prints it.
func (s *story) recordLocked(st step, label, detail string) {
	if s.start.IsZero() || s.ended {
		return
	}
	if _, ok := s.seen[st]; ok && st != stepNote {
		return
	}
	s.recordAtLocked(s.clock.Since(s.start), st, label, detail)
}

// recordAtLocked records a step at a time since the failure.
func (s *story) recordAtLocked(at time.Duration, st step, label, detail string) {
	if st != stepNote {
		s.seen[st] = at
		label = st.String()
	}
	e := entry{At: at, Step: st, Label: label, Detail: detail, Revision: s.rv}
	s.entries = append(s.entries, e)
	fmt.Fprintln(s.out, formatEntry(e))
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// observeNode reads the broken node's Ready condition and taints.
func (s *story) observeNode(n *corev1.Node) {
	if n.Name != s.node {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv = n.ResourceVersion
	defer func() { s.rv = "" }()
	s.observePoweredOffLocked(n)
	if ready := timeline.ReadyCondition(n); ready != nil {
		if ready.Status != corev1.ConditionTrue {
			s.recordLocked(stepNotReady, "", timeline.NotReadyDetail(ready))
		} else if _, down := s.seen[stepNotReady]; down {
			s.recordLocked(stepNodeReady, "", timeline.ReadyDetail(ready))
		}
	}
	cordoned, fenced := false, false
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case v1alpha1.TaintRemediation:
			cordoned = true
			s.recordLocked(stepCordoned, "", timeline.CordonedDetail(t))
		case v1alpha1.TaintOutOfService:
			fenced = true
			s.recordLocked(stepFenced, "", timeline.FencedDetail(t))
		}
	}
	_, wasCordoned := s.seen[stepCordoned]
	_, wasFenced := s.seen[stepFenced]
	if (wasCordoned || wasFenced) && !cordoned && !fenced {
		s.recordLocked(stepTaintsRemoved, "", timeline.TaintsRemovedDetail)
	}
}

// observePoweredOffLocked notes each change of the node's PoweredOff condition (the power watch's word
// of its BMC; see docs/bmc.md, Fence on the BMC's word).
func (s *story) observePoweredOffLocked(n *corev1.Node) {
	for _, c := range n.Status.Conditions {
		if string(c.Type) != v1alpha1.NodeConditionPoweredOff {
			continue
		}
		state := string(c.Status) + "/" + c.Reason
		if state == s.poweredOff || s.start.IsZero() || s.ended {
			return
		}
		s.poweredOff = state
		if c.Status == corev1.ConditionTrue && s.poweredOffAt == 0 {
			s.poweredOffAt = s.clock.Since(s.start)
		}
		s.recordLocked(stepNote, "PoweredOff="+string(c.Status), c.Reason+": "+c.Message)
		return
	}
}

// PoweredOffAt is when the node's PoweredOff condition first turned True, since the failure; false when
// it did not.
func (s *story) PoweredOffAt() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.poweredOffAt, s.poweredOffAt > 0
}

// observeRemediation reads the broken node's PowerCycleRemediation: its creation, its phases (from the
// facts recorded in its status, so a skipped update hides no step) and its deletion.
func (s *story) observeRemediation(p *v1alpha1.PowerCycleRemediation) {
	if p.Name != s.node {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv = p.ResourceVersion
	defer func() { s.rv = "" }()
	if _, ok := s.seen[stepEMRCreated]; !ok {
		s.recordLocked(stepEMRCreated, "", timeline.RequestCreatedDetail(p.Namespace, p.Name, timeline.RequestCreator(p),
			p.Annotations["remediation.medik8s.io/template-name"]))
	}
	st := p.Status
	var a *v1alpha1.PowerCycleAttempt
	if n := len(st.Attempts); n > 0 {
		a = &st.Attempts[n-1]
	}
	msg := timeline.PhaseMessage(p)
	// detail says what the remediator said when it entered the step's phase, if it is the current one.
	detail := func(phase v1alpha1.PowerCyclePhase, otherwise string) string {
		if st.Phase == phase && msg != "" {
			return msg
		}
		return otherwise
	}
	if st.Phase == v1alpha1.PhasePoweringOff || a != nil {
		s.recordLocked(stepPoweringOff, "", detail(v1alpha1.PhasePoweringOff, timeline.PoweringOffDetail))
	}
	if st.Phase == v1alpha1.PhasePoweredOff || (a != nil && a.PoweredOff != nil) {
		s.recordLocked(stepPoweredOff, "", detail(v1alpha1.PhasePoweredOff, timeline.PoweredOffDetail))
	}
	if st.Phase == v1alpha1.PhasePoweringOn || (a != nil && a.PowerOnRequested != nil) {
		s.recordLocked(stepPoweringOn, "", detail(v1alpha1.PhasePoweringOn, timeline.PoweringOnDetail))
	}
	if st.Phase == v1alpha1.PhaseWaitingForNode || (a != nil && a.PoweredOn != nil) {
		s.recordLocked(stepPoweredOn, "", detail(v1alpha1.PhaseWaitingForNode, timeline.PoweredOnDetail))
	}
	if st.Phase == v1alpha1.PhaseSucceeded {
		s.recordLocked(stepRemediated, "", detail(v1alpha1.PhaseSucceeded, timeline.RemediatedDetail))
	}
	if st.Phase != s.phase {
		switch st.Phase {
		case v1alpha1.PhaseRetrying, v1alpha1.PhaseEscalating:
			s.recordLocked(stepNote, timeline.WarningLabel(st.Phase), msg)
		case v1alpha1.PhaseFailed:
			s.recordLocked(stepNote, timeline.WarningLabel(v1alpha1.PhaseFailed), msg)
			s.failure = fmt.Errorf("%w: PowerCycleRemediation %s/%s is Failed: %s", ErrRemediationFailed, p.Namespace, p.Name, msg)
		}
		s.phase = st.Phase
	}
	s.message = msg
	if p.DeletionTimestamp != nil {
		s.recordLocked(stepEMRDeleted, "", timeline.RequestDeletingDetail)
	}
}

// remediationGone records the request's removal.
func (s *story) remediationGone(p *v1alpha1.PowerCycleRemediation) {
	if p.Name != s.node {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv = p.ResourceVersion
	defer func() { s.rv = "" }()
	s.recordLocked(stepEMRDeleted, "", timeline.RequestDeletedDetail)
	s.recordLocked(stepEMRGone, "", timeline.RequestGoneDetail)
}

// observeLease reads the broken node's lease in the lease namespace.
func (s *story) observeLease(l *coordinationv1.Lease) {
	if l.Name != leases.LeaseName(s.node) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv = l.ResourceVersion
	defer func() { s.rv = "" }()
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder != s.holder {
		if _, taken := s.seen[stepLeaseTaken]; taken {
			s.recordLocked(stepNote, "lease holder", timeline.LeaseHolderNote(l.Namespace, l.Name, holder))
		}
		s.holder = holder
	}
	s.recordLocked(stepLeaseTaken, "", timeline.LeaseTakenDetail(l.Namespace, l.Name, holder))
}

// leaseGone records the release of the broken node's lease.
func (s *story) leaseGone(l *coordinationv1.Lease) {
	if l.Name != leases.LeaseName(s.node) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv = l.ResourceVersion
	defer func() { s.rv = "" }()
	if _, taken := s.seen[stepLeaseTaken]; taken {
		s.recordLocked(stepLeaseReleased, "", timeline.LeaseReleasedDetail(l.Namespace, l.Name))
	}
}

// observePower hears a step of a BMC system's power (the simulator's hook).
func (s *story) observePower(system, from, to string) {
	if system != s.system {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	detail := timeline.HostPowerDetail(system, from, to)
	if _, off := s.seen[stepHostOff]; to == "Off" && !off && slices.Equal(s.required, powerCutSteps) {
		detail = fmt.Sprintf("BMC system %s: %s → %s (its power is cut)", system, from, to)
	}
	switch to {
	case "Off":
		s.recordLocked(stepHostOff, "", detail)
	case "On":
		s.recordLocked(stepHostOn, "", detail)
	default:
		s.recordLocked(stepNote, "BMC", detail)
	}
}

// Timeline is a copy of the entries so far.
func (s *story) Timeline() []entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.entries)
}

// Seen is a copy of when each step was first seen.
func (s *story) Seen() map[step]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[step]time.Duration, len(s.seen))
	for k, v := range s.seen {
		out[k] = v
	}
	return out
}

// Failure is the remediator's giving up, if it did.
func (s *story) Failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failure
}

// Missing lists the steps of a successful story not seen yet.
func (s *story) Missing() []step {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []step
	for _, st := range s.required {
		if _, ok := s.seen[st]; !ok {
			out = append(out, st)
		}
	}
	return out
}

// Where says where the story stands, for an error message.
func (s *story) Where() string {
	missing := s.Missing()
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, m := range missing {
			names[i] = m.String()
		}
		fmt.Fprintf(&b, "still waiting for: %s", strings.Join(names, ", "))
	}
	if s.phase != "" {
		fmt.Fprintf(&b, "; the remediation's last phase: %s (%s)", s.phase, s.message)
	}
	return b.String()
}

// timings are the demo's settings the summary explains the durations with.
type timings struct {
	GracePeriod      time.Duration // node monitor grace period
	UnhealthyFor     time.Duration // the NodeHealthCheck's condition duration
	BootDelay        time.Duration
	HealthyDelay     time.Duration
	SimulatedBMCTime time.Duration // how long the simulated BMC takes to change power
}

// seenSteps is when each step was first seen, since the failure.
type seenSteps map[step]time.Duration

// at is when st was seen, as an offset; n/a when it was not.
func (s seenSteps) at(st step) string {
	if d, ok := s[st]; ok {
		return formatOffset(d)
	}
	return "   n/a"
}

// between is the time from one step to another; n/a when either was not seen.
func (s seenSteps) between(from, to step) string {
	a, ok1 := s[from]
	b, ok2 := s[to]
	if !ok1 || !ok2 {
		return "n/a"
	}
	return fmt.Sprintf("%.1fs", (b - a).Seconds())
}

// summarizePowerCut explains where the time went in the power-cut story: from the cut to the BMC's word
// (poweredOffAt), the request and the fence, against what the kubelet's silence alone would have taken.
func summarizePowerCut(seen map[step]time.Duration, poweredOffAt time.Duration, how string, t timings) []string {
	at, between := seenSteps(seen).at, seenSteps(seen).between
	still := "the Node was still Ready then"
	if nr, ok := seen[stepNotReady]; ok && nr <= seen[stepFenced] {
		still = fmt.Sprintf("the Node had turned NotReady at %s", formatOffset(nr))
	}
	return []string{
		fmt.Sprintf("  reported   %7s  the BMC's word (%s), read again, and a silent kubelet: Node condition PoweredOff=True",
			formatOffset(poweredOffAt), how),
		fmt.Sprintf("  detected   %7s  the NodeHealthCheck created the request at once (PoweredOff=True for 0s)", at(stepEMRCreated)),
		fmt.Sprintf("  fenced     %7s  cut → out-of-service taint %.2fs: the remediator read the host off (no power-off sent); %s",
			at(stepFenced), seen[stepFenced].Seconds(), still),
		fmt.Sprintf("  without    %7s  the kubelet's silence alone: grace period %s, then the check's duration %s, before any request",
			formatOffset(t.GracePeriod+t.UnhealthyFor), t.GracePeriod, t.UnhealthyFor),
		fmt.Sprintf("  recovered  %7s  powered on again %s after the fence (BMC %s per transition), Ready after its boot (%s)",
			at(stepRemediated), between(stepFenced, stepHostOn), t.SimulatedBMCTime, t.BootDelay),
		fmt.Sprintf("  clean      %7s  request deleted, taints removed, lease released", at(stepLeaseReleased)),
	}
}

// summarize explains where the time went, from when each step was first seen.
func summarize(seen map[step]time.Duration, t timings) []string {
	at, between := seenSteps(seen).at, seenSteps(seen).between
	cleanDone := max(seen[stepEMRGone], seen[stepLeaseReleased], seen[stepTaintsRemoved])
	clean := "   n/a"
	if _, ok := seen[stepLeaseReleased]; ok {
		clean = formatOffset(cleanDone)
	}
	return []string{
		fmt.Sprintf("  detected   %7s  the node lifecycle controller marked the node NotReady after %s (grace period %s),",
			at(stepEMRCreated), between(stepInjected, stepNotReady), t.GracePeriod),
		fmt.Sprintf("                      the NodeHealthCheck created the request %s later (duration %s, from the condition's transition)",
			between(stepNotReady, stepEMRCreated), t.UnhealthyFor),
		fmt.Sprintf("  fenced     %7s  %s after the request: host confirmed off, out-of-service taint on the node",
			at(stepFenced), between(stepEMRCreated, stepFenced)),
		fmt.Sprintf("  recovered  %7s  node Ready %s after the power-off began (BMC %s per transition, boot %s)",
			at(stepNodeReady), between(stepPoweringOff, stepNodeReady), t.SimulatedBMCTime, t.BootDelay),
		fmt.Sprintf("  clean      %7s  request deleted %s after Ready (healthy delay %s), taints removed, lease released",
			clean, between(stepNodeReady, stepEMRDeleted), t.HealthyDelay),
	}
}
