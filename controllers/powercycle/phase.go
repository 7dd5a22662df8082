package powercycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// phaseHandler does the work of one phase: it acts, then either transitions (and returns an empty
// result: the status update it wrote brings the next reconcile) or says when to look again.
type phaseHandler func(ctx context.Context, s *scope) (ctrl.Result, error)

// phaseHandlers is the state machine: one handler per phase. The empty phase is a new request.
func (r *RemediationReconciler) phaseHandlers() map[v1alpha1.PowerCyclePhase]phaseHandler {
	return map[v1alpha1.PowerCyclePhase]phaseHandler{
		"":                           r.start,
		v1alpha1.PhasePending:        r.pending,
		v1alpha1.PhaseDiagnosing:     r.diagnosing,
		v1alpha1.PhaseShuttingDown:   r.shuttingDown,
		v1alpha1.PhasePoweringOff:    r.poweringOff,
		v1alpha1.PhasePoweredOff:     r.poweredOff,
		v1alpha1.PhasePoweringOn:     r.poweringOn,
		v1alpha1.PhaseWaitingForNode: r.waitingForNode,
		v1alpha1.PhaseRetrying:       r.retrying,
		v1alpha1.PhaseEscalating:     r.escalating,
		v1alpha1.PhaseSucceeded:      r.finished,
		v1alpha1.PhaseFailed:         r.finished,
	}
}

// phaseEvents are the event reasons announcing the entry into each phase.
var phaseEvents = map[v1alpha1.PowerCyclePhase]string{
	v1alpha1.PhasePending:        EventRemediationStarted,
	v1alpha1.PhaseDiagnosing:     EventDiagnosing,
	v1alpha1.PhaseShuttingDown:   EventShuttingDown,
	v1alpha1.PhasePoweringOff:    EventPoweringOff,
	v1alpha1.PhasePoweredOff:     EventPoweredOff,
	v1alpha1.PhasePoweringOn:     EventPoweringOn,
	v1alpha1.PhaseWaitingForNode: EventPoweredOn,
	v1alpha1.PhaseRetrying:       EventAttemptFailed,
	v1alpha1.PhaseEscalating:     EventEscalating,
	v1alpha1.PhaseSucceeded:      EventRemediated,
	v1alpha1.PhaseFailed:         EventRemediationFailed,
}

// warningPhases are entered because something went wrong.
var warningPhases = map[v1alpha1.PowerCyclePhase]bool{
	v1alpha1.PhaseRetrying:   true,
	v1alpha1.PhaseEscalating: true,
	v1alpha1.PhaseFailed:     true,
}

// transition is the only way the phase changes: it enters the phase (see enter) and records it.
func (r *RemediationReconciler) transition(ctx context.Context, s *scope, to v1alpha1.PowerCyclePhase, reason, message string) error {
	r.enter(s, to, reason, message)
	return r.persist(ctx, s)
}

// phaseChange is a phase entered in a scope and not yet announced.
type phaseChange struct {
	from, to        v1alpha1.PowerCyclePhase
	reason, message string
	startedAt       *time.Time // when the remediation started: Processing has been True since
	// after, when set, is the wait that ended with this change (in Diagnosing or ShuttingDown), announced
	// just before it.
	after *hostWaitEnd
}

// hostWaitEnd is how the wait after a request the host answers ended (see hostStep).
type hostWaitEnd struct {
	step    hostStep
	result  v1alpha1.HostRequestResult
	message string
}

// enter sets the phase, stamps the time, clears the phase's power request and sets the contract
// conditions (Processing, Succeeded). The change is announced (logged, evented, counted) by the write
// that records it, and only then: a phase handler may go on to act in the same reconcile, and its first
// durable step records the phase along with it.
func (r *RemediationReconciler) enter(s *scope, to v1alpha1.PowerCyclePhase, reason, message string) {
	st := s.status()
	change := phaseChange{from: st.Phase, to: to, reason: reason, message: message}
	if c := s.condition(v1alpha1.ConditionProcessing); c != nil && c.Status == metav1.ConditionTrue {
		change.startedAt = new(c.LastTransitionTime.Time)
	}
	s.entered = append(s.entered, change)

	st.Phase = to
	st.LastTransitionTime = new(stamp(s.now))
	st.PowerRequest = nil
	if to != v1alpha1.PhaseRetrying {
		st.NextRetryTime = nil
	}
	switch {
	case to == v1alpha1.PhaseSucceeded:
		s.setCondition(v1alpha1.ConditionProcessing, metav1.ConditionFalse, reason, message)
		s.setCondition(v1alpha1.ConditionSucceeded, metav1.ConditionTrue, reason, message)
	case to == v1alpha1.PhaseFailed:
		s.setCondition(v1alpha1.ConditionProcessing, metav1.ConditionFalse, reason, message)
		s.setCondition(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, reason, message)
	default:
		s.setCondition(v1alpha1.ConditionProcessing, metav1.ConditionTrue, reason, message)
		s.setCondition(v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, reason, message)
	}
}

// announce logs, emits and counts the phase changes a write has just recorded, in order.
func (r *RemediationReconciler) announce(s *scope) {
	for _, c := range s.entered {
		if e := c.after; e != nil {
			s.log.Info("Wait ended", "request", e.step.request, "result", e.result, "message", e.message)
			r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, e.step.ended, ActionPowerCycle, "%s: %s", e.result, e.message)
			HostRequests.WithLabelValues(e.step.request, string(e.result)).Inc()
		}
		s.log.Info("Phase changed", "from", c.from, "to", c.to, "reason", c.reason, "message", c.message)
		eventType := corev1.EventTypeNormal
		if warningPhases[c.to] {
			eventType = corev1.EventTypeWarning
		}
		r.opts.Recorder.Eventf(s.pcr, nil, eventType, phaseEvents[c.to], ActionPowerCycle, "%s", c.message)
		PhaseTransitions.WithLabelValues(phaseLabel(c.from), string(c.to)).Inc()
		if terminal(c.to) && !terminal(c.from) && c.startedAt != nil {
			RemediationDuration.WithLabelValues(string(s.spec.strategy), c.reason).Observe(max(s.now.Sub(*c.startedAt), 0).Seconds())
		}
	}
	s.entered = nil
}

// phaseLabel names a phase in metrics; a new request has none.
func phaseLabel(p v1alpha1.PowerCyclePhase) string {
	if p == "" {
		return "None"
	}
	return string(p)
}

// start accepts a new request and goes on with Pending's work at once. The acceptance is recorded by the
// write that enters PoweringOff (with the remediation taint and the power-off request), or at the end of
// the reconcile when Pending has to wait: a request that is ready to go costs no write and no round trip
// of its own.
func (r *RemediationReconciler) start(ctx context.Context, s *scope) (ctrl.Result, error) {
	s.setCondition(v1alpha1.ConditionPermanentNodeDeletionExpected, metav1.ConditionFalse, v1alpha1.ReasonAsExpected,
		"the node is power-cycled, not deleted")
	r.enter(s, v1alpha1.PhasePending, v1alpha1.ReasonRemediationStarted,
		fmt.Sprintf("Remediation accepted: strategy %s", s.spec.strategy))
	return r.pending(ctx, s)
}

// startAttempt opens the record of a new attempt and enters its first phase, whose work starts at once:
// Diagnosing when the spec asks for a diagnostic interrupt, else ShuttingDown when it asks for a graceful
// shutdown, else PoweringOff. The write that records the phase's request to the BMC records the phase
// too. A node that does not exist (it was deleted since the request was accepted, or never came while
// Pending waited for it) gets no request: the attempt fails at once, and the next one follows the retry
// backoff.
func (r *RemediationReconciler) startAttempt(ctx context.Context, s *scope) (ctrl.Result, error) {
	st := s.status()
	if _, err := r.getNode(ctx, s); apierrors.IsNotFound(err) {
		openAttempt(s, s.now)
		return r.failAttempt(ctx, s, fmt.Sprintf("node %s does not exist: no power-off goes to its host", st.NodeName))
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading node %s: %w", st.NodeName, err)
	}
	number := openAttempt(s, s.now)
	return r.enterOffPhase(ctx, s, nextOffPhase(s.spec, ""), nil, fmt.Sprintf("Attempt %d: ", number))
}

// enterOffPhase enters phase to, one of the phases on the way to the forced power-off, after the wait
// that ended (nil for none), and does its work at once. prefix starts the phase's message.
func (r *RemediationReconciler) enterOffPhase(ctx context.Context, s *scope, to v1alpha1.PowerCyclePhase, after *hostWaitEnd, prefix string) (ctrl.Result, error) {
	st := s.status()
	var reason, message string
	switch to {
	case v1alpha1.PhaseDiagnosing:
		reason, message = v1alpha1.ReasonDiagnosing, fmt.Sprintf("asking node %s for a kernel dump: a diagnostic interrupt (NMI) through BMC %s, then up to %s for the host to power off or reboot on its own",
			st.NodeName, st.BMCName, s.spec.diagnosticTimeout)
	case v1alpha1.PhaseShuttingDown:
		reason, message = v1alpha1.ReasonShuttingDown, fmt.Sprintf("asking node %s to shut down gracefully through BMC %s; powered off by force if still on after %s",
			st.NodeName, st.BMCName, s.spec.gracefulTimeout)
	default:
		reason, message = v1alpha1.ReasonPoweringOff, fmt.Sprintf("powering off node %s through BMC %s", st.NodeName, st.BMCName)
	}
	if prefix == "" {
		message = strings.ToUpper(message[:1]) + message[1:]
	}
	r.enter(s, to, reason, prefix+message)
	s.entered[len(s.entered)-1].after = after
	return r.phases[to](ctx, s)
}

// openAttempt appends the record of a new attempt, started at started, and returns its number. The last
// maxAttempts records are kept.
func openAttempt(s *scope, started time.Time) int32 {
	st := s.status()
	number := int32(1)
	if a := s.currentAttempt(); a != nil {
		number = a.Number + 1
	}
	st.Attempts = append(st.Attempts, v1alpha1.PowerCycleAttempt{Number: number, Started: stamp(started)})
	if n := len(st.Attempts); n > maxAttempts {
		st.Attempts = append([]v1alpha1.PowerCycleAttempt(nil), st.Attempts[n-maxAttempts:]...)
	}
	return number
}

// failAttempt closes the current attempt as failed and moves on: to Retrying after a backoff, or to
// Escalating when the escalate strategy has used up its attempts. A bare node that does not exist has
// nothing to escalate to: no node to fence, and its host gets no power-off (see startAttempt); the
// remediation fails (Succeeded=False) for its health check to escalate.
func (r *RemediationReconciler) failAttempt(ctx context.Context, s *scope, why string) (ctrl.Result, error) {
	st := s.status()
	number := int32(0)
	if a := s.currentAttempt(); a != nil && a.Result == "" {
		a.Finished, a.Result, a.Message = new(stamp(s.now)), attemptFailed, truncate(why, maxAttemptMessage)
		number = a.Number
	}
	st.RetryCount++
	next, retryAt := afterFailure(s.spec, st.RetryCount, s.now)
	if next == v1alpha1.PhaseEscalating && ownerMachine(s.pcr) == nil {
		if _, err := r.getNode(ctx, s); apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.transition(ctx, s, v1alpha1.PhaseFailed, v1alpha1.ReasonRetriesExhausted,
				fmt.Sprintf("Attempt %d failed: %s; %d of %d attempts failed, and node %s does not exist: nothing to power off or fence",
					number, why, st.RetryCount, s.spec.deleteAfterRetries, st.NodeName))
		}
	}
	if next == v1alpha1.PhaseEscalating {
		return ctrl.Result{}, r.transition(ctx, s, next, v1alpha1.ReasonRetriesExhausted,
			fmt.Sprintf("Attempt %d failed: %s; %d of %d attempts failed, escalating", number, why, st.RetryCount, s.spec.deleteAfterRetries))
	}
	st.NextRetryTime = new(stamp(retryAt))
	return ctrl.Result{}, r.transition(ctx, s, next, v1alpha1.ReasonRetrying,
		fmt.Sprintf("Attempt %d failed: %s; next attempt at %s", number, why, st.NextRetryTime.UTC().Format(timeFormat)))
}

// Attempt results.
const (
	attemptSucceeded = "Succeeded"
	attemptFailed    = "Failed"
)

const timeFormat = "2006-01-02T15:04:05Z07:00"
