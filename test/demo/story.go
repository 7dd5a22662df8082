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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/leases"
)

// step is one moment of the story. The constants are in the order the moments happen.
type step int

const (
	stepInjected      step = iota // the kubelet hangs
	stepNotReady                  // the node lifecycle controller marks the node Ready=Unknown
	stepEMRCreated                // the NodeHealthCheck creates the PowerCycleRemediation (detection)
	stepLeaseTaken                // the node lease appears in medik8s-leases
	stepPoweringOff               // the remediation enters PoweringOff, the power-off request on record
	stepCordoned                  // the remediator's NoSchedule taint is on the node
	stepHostOff                   // the BMC simulator's host is Off
	stepPoweredOff                // the remediator read Off from the BMC: power-off confirmed
	stepFenced                    // the out-of-service taint is on the node
	stepPoweringOn                // the remediation enters PoweringOn
	stepHostOn                    // the BMC simulator's host is On
	stepPoweredOn                 // the remediator read On: waiting for the node
	stepNodeReady                 // the node is Ready again
	stepTaintsRemoved             // the remediator's taints are gone from the node
	stepRemediated                // the remediation reports Succeeded
	stepEMRDeleted                // the NodeHealthCheck deleted the request (deletion timestamp set)
	stepEMRGone                   // the remediator's finalizer is done: the request is gone
	stepLeaseReleased             // the node lease is gone
	stepNote                      // not a step: a remark on the way (a BMC transition, a warning)
)

// stepLabels name the steps in the timeline.
var stepLabels = map[step]string{
	stepInjected:      "failure injected",
	stepNotReady:      "node NotReady",
	stepEMRCreated:    "EMR created",
	stepLeaseTaken:    "lease taken",
	stepCordoned:      "node cordoned",
	stepPoweringOff:   "powering off",
	stepHostOff:       "host off",
	stepPoweredOff:    "power-off confirmed",
	stepFenced:        "out-of-service taint",
	stepPoweringOn:    "powering on",
	stepHostOn:        "host on",
	stepPoweredOn:     "power-on confirmed",
	stepNodeReady:     "node Ready",
	stepTaintsRemoved: "taints removed",
	stepRemediated:    "remediation succeeded",
	stepEMRDeleted:    "EMR deleted",
	stepEMRGone:       "EMR finalized",
	stepLeaseReleased: "lease released",
}

func (s step) String() string {
	if l, ok := stepLabels[s]; ok {
		return l
	}
	return "note"
}

// storySteps are the steps of a successful story, in order: the demo waits for all of them.
var storySteps = []step{
	stepInjected, stepNotReady, stepEMRCreated, stepLeaseTaken, stepPoweringOff, stepCordoned, stepHostOff,
	stepPoweredOff, stepFenced, stepPoweringOn, stepHostOn, stepPoweredOn, stepNodeReady, stepTaintsRemoved,
	stepRemediated, stepEMRDeleted, stepEMRGone, stepLeaseReleased,
}

// entry is one line of the timeline.
type entry struct {
	At     time.Duration // since the failure was injected
	Step   step
	Label  string
	Detail string
	// Revision is the resourceVersion of the object version that showed the step (for a deletion: of the
	// deletion); empty for what the API did not tell (the failure, the BMC's power).
	Revision string
}

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
}

func newStory(clk clock.PassiveClock, out io.Writer, node, system string) *story {
	return &story{clock: clk, out: out, node: node, system: system, seen: map[step]time.Duration{},
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

// formatEntry is one line of the timeline: "  +12.3s  label                  detail".
func formatEntry(e entry) string {
	return strings.TrimRight(fmt.Sprintf("  %7s  %-21s  %s", formatOffset(e.At), e.Label, e.Detail), " ")
}

// formatOffset prints a duration since the failure, to a tenth of a second.
func formatOffset(d time.Duration) string {
	return fmt.Sprintf("+%.1fs", d.Seconds())
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
	if ready := readyCondition(n); ready != nil {
		if ready.Status != corev1.ConditionTrue {
			s.recordLocked(stepNotReady, "", fmt.Sprintf("Ready=%s (%s): %s", ready.Status, ready.Reason, ready.Message))
		} else if _, down := s.seen[stepNotReady]; down {
			s.recordLocked(stepNodeReady, "", fmt.Sprintf("Ready=True (%s): %s", ready.Reason, ready.Message))
		}
	}
	cordoned, fenced := false, false
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case v1alpha1.TaintRemediation:
			cordoned = true
			s.recordLocked(stepCordoned, "", fmt.Sprintf("%s:%s: no new pods while it is remediated", t.Key, t.Effect))
		case v1alpha1.TaintOutOfService:
			fenced = true
			s.recordLocked(stepFenced, "", fmt.Sprintf("%s=%s:%s: Kubernetes moves its pods and volumes", t.Key, t.Value, t.Effect))
		}
	}
	_, wasCordoned := s.seen[stepCordoned]
	_, wasFenced := s.seen[stepFenced]
	if (wasCordoned || wasFenced) && !cordoned && !fenced {
		s.recordLocked(stepTaintsRemoved, "", "the remediator removed the taints it added")
	}
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
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
		by := "?"
		for _, o := range p.OwnerReferences {
			if o.Kind == "NodeHealthCheck" {
				by = "NodeHealthCheck " + o.Name
			}
		}
		s.recordLocked(stepEMRCreated, "", fmt.Sprintf("PowerCycleRemediation %s/%s, by %s from template %s",
			p.Namespace, p.Name, by, p.Annotations["remediation.medik8s.io/template-name"]))
	}
	st := p.Status
	var a *v1alpha1.PowerCycleAttempt
	if n := len(st.Attempts); n > 0 {
		a = &st.Attempts[n-1]
	}
	msg := phaseMessage(p)
	// detail says what the remediator said when it entered the step's phase, if it is the current one.
	detail := func(phase v1alpha1.PowerCyclePhase, otherwise string) string {
		if st.Phase == phase && msg != "" {
			return msg
		}
		return otherwise
	}
	if st.Phase == v1alpha1.PhasePoweringOff || a != nil {
		s.recordLocked(stepPoweringOff, "", detail(v1alpha1.PhasePoweringOff, "powering the host off through its BMC"))
	}
	if st.Phase == v1alpha1.PhasePoweredOff || (a != nil && a.PoweredOff != nil) {
		s.recordLocked(stepPoweredOff, "", detail(v1alpha1.PhasePoweredOff, "the BMC reads Off"))
	}
	if st.Phase == v1alpha1.PhasePoweringOn || (a != nil && a.PowerOnRequested != nil) {
		s.recordLocked(stepPoweringOn, "", detail(v1alpha1.PhasePoweringOn, "powering the host on"))
	}
	if st.Phase == v1alpha1.PhaseWaitingForNode || (a != nil && a.PoweredOn != nil) {
		s.recordLocked(stepPoweredOn, "", detail(v1alpha1.PhaseWaitingForNode, "the BMC reads On; waiting for the node"))
	}
	if st.Phase == v1alpha1.PhaseSucceeded {
		s.recordLocked(stepRemediated, "", detail(v1alpha1.PhaseSucceeded, "the node is back"))
	}
	if st.Phase != s.phase {
		switch st.Phase {
		case v1alpha1.PhaseRetrying, v1alpha1.PhaseEscalating:
			s.recordLocked(stepNote, "WARNING "+string(st.Phase), msg)
		case v1alpha1.PhaseFailed:
			s.recordLocked(stepNote, "WARNING Failed", msg)
			s.failure = fmt.Errorf("%w: PowerCycleRemediation %s/%s is Failed: %s", ErrRemediationFailed, p.Namespace, p.Name, msg)
		}
		s.phase = st.Phase
	}
	s.message = msg
	if p.DeletionTimestamp != nil {
		s.recordLocked(stepEMRDeleted, "", "the node is healthy again: the NodeHealthCheck deleted the request; the remediator cleans up")
	}
}

// phaseMessage is what the remediator says about its current phase: the Succeeded condition's message
// once it is decided, else Processing's.
func phaseMessage(p *v1alpha1.PowerCycleRemediation) string {
	var processing, succeeded *metav1.Condition
	for i, c := range p.Status.Conditions {
		switch c.Type {
		case v1alpha1.ConditionProcessing:
			processing = &p.Status.Conditions[i]
		case v1alpha1.ConditionSucceeded:
			succeeded = &p.Status.Conditions[i]
		}
	}
	switch {
	case succeeded != nil && succeeded.Status != metav1.ConditionUnknown:
		return succeeded.Message
	case processing != nil:
		return processing.Message
	}
	return ""
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
	s.recordLocked(stepEMRDeleted, "", "the node is healthy again: the NodeHealthCheck deleted the request")
	s.recordLocked(stepEMRGone, "", "the remediator's finalizer is done (host on, taints off): the request is gone")
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
			s.recordLocked(stepNote, "lease holder", fmt.Sprintf("%s/%s now held by %q", l.Namespace, l.Name, holder))
		}
		s.holder = holder
	}
	s.recordLocked(stepLeaseTaken, "", fmt.Sprintf("%s/%s held by %s: nobody else (node maintenance, another check) acts on the node",
		l.Namespace, l.Name, holder))
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
		s.recordLocked(stepLeaseReleased, "", fmt.Sprintf("%s/%s deleted by its holder", l.Namespace, l.Name))
	}
}

// observePower hears a step of a BMC system's power (the simulator's hook).
func (s *story) observePower(system, from, to string) {
	if system != s.system {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	detail := fmt.Sprintf("BMC system %s: %s → %s", system, from, to)
	switch to {
	case "Off":
		s.recordLocked(stepHostOff, "", detail+" (the hung host loses power)")
	case "On":
		s.recordLocked(stepHostOn, "", detail+" (the host boots)")
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
	for _, st := range storySteps {
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

// summarize explains where the time went, from when each step was first seen.
func summarize(seen map[step]time.Duration, t timings) []string {
	at := func(st step) string {
		if d, ok := seen[st]; ok {
			return formatOffset(d)
		}
		return "   n/a"
	}
	between := func(from, to step) string {
		a, ok1 := seen[from]
		b, ok2 := seen[to]
		if !ok1 || !ok2 {
			return "n/a"
		}
		return fmt.Sprintf("%.1fs", (b - a).Seconds())
	}
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
