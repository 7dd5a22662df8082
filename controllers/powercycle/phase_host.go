package powercycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// Before its power is cut, an attempt may ask the host to go down on its own: a diagnostic interrupt (an
// NMI, phase Diagnosing), on which a host set up for it writes a kernel dump and powers off or reboots,
// then a graceful shutdown (phase ShuttingDown). Each is a request the host answers, not the BMC: it is
// sent once (recorded before it is sent, in status.powerRequest and in the attempt's record), and the
// wait after it is bounded by the spec. However the wait ends, the attempt goes on to the forced
// power-off, confirmed as ever (PoweringOff), which a host that is off already needs no request for. A BMC
// that does not offer the request is no failure: the wait ends NotSupported at once.

// hostStep is one request the host answers, sent before the forced power-off.
type hostStep struct {
	phase   v1alpha1.PowerCyclePhase
	request string // the metric's label: DiagnosticInterrupt, GracefulShutdown
	what    string // for messages
	timeout time.Duration
	// reboots: a host seen going down and on again ends the wait (Rebooted).
	reboots bool
	// ended is the event announcing how the wait ended.
	ended string
	// record is the attempt's record of the request.
	record func(a *v1alpha1.PowerCycleAttempt) **v1alpha1.HostRequest
	// send sends the request.
	send func(ctx context.Context, d bmc.Driver) error
}

func diagnosticStep(spec effectiveSpec) hostStep {
	return hostStep{
		phase: v1alpha1.PhaseDiagnosing, request: "DiagnosticInterrupt", what: "diagnostic interrupt",
		timeout: spec.diagnosticTimeout, reboots: true, ended: EventDiagnosticInterruptEnded,
		record: func(a *v1alpha1.PowerCycleAttempt) **v1alpha1.HostRequest { return &a.DiagnosticInterrupt },
		send:   bmc.Diagnose,
	}
}

func gracefulStep(spec effectiveSpec) hostStep {
	return hostStep{
		phase: v1alpha1.PhaseShuttingDown, request: "GracefulShutdown", what: "graceful shutdown",
		timeout: spec.gracefulTimeout, ended: EventGracefulShutdownEnded,
		record: func(a *v1alpha1.PowerCycleAttempt) **v1alpha1.HostRequest { return &a.GracefulShutdown },
		send:   func(ctx context.Context, d bmc.Driver) error { return d.PowerOff(ctx, false) },
	}
}

// diagnosing sends the diagnostic interrupt and waits for the host's kernel dump (see awaitHost).
func (r *RemediationReconciler) diagnosing(ctx context.Context, s *scope) (ctrl.Result, error) {
	return r.awaitHost(ctx, s, diagnosticStep(s.spec))
}

// shuttingDown asks the host to shut down and waits for it to be off (see awaitHost).
func (r *RemediationReconciler) shuttingDown(ctx context.Context, s *scope) (ctrl.Result, error) {
	return r.awaitHost(ctx, s, gracefulStep(s.spec))
}

// nextOffPhase is the phase that follows from on the way to the forced power-off (from the start of an
// attempt, for ""): Diagnosing if the spec asks for a diagnostic interrupt, ShuttingDown if it asks for a
// graceful shutdown, then PoweringOff.
func nextOffPhase(spec effectiveSpec, from v1alpha1.PowerCyclePhase) v1alpha1.PowerCyclePhase {
	switch {
	case from == "" && spec.diagnosticTimeout > 0:
		return v1alpha1.PhaseDiagnosing
	case (from == "" || from == v1alpha1.PhaseDiagnosing) && spec.gracefulTimeout > 0:
		return v1alpha1.PhaseShuttingDown
	}
	return v1alpha1.PhasePoweringOff
}

// hostWaitVerdict is where the wait after a request the host answers stands, from the power state just
// read: ended with result, or going on (result ""). Off ends it (PoweredOff: already off, when nothing was
// sent); On after a reading of neither On nor Off since the request (wentDown) ends it for a step that
// counts reboots (Rebooted); past the deadline it ends TimedOut. downNow says that this reading is the
// first to show the host going down, to be recorded.
func hostWaitVerdict(state bmc.PowerState, rec *v1alpha1.HostRequest, reboots, expired bool) (result v1alpha1.HostRequestResult, downNow bool) {
	sent := rec != nil && rec.Requested != nil
	wentDown := sent && rec.WentDown != nil
	switch {
	case state == bmc.PowerStateOff:
		return v1alpha1.HostRequestPoweredOff, false
	case reboots && wentDown && state == bmc.PowerStateOn:
		return v1alpha1.HostRequestRebooted, false
	case expired:
		return v1alpha1.HostRequestTimedOut, false
	}
	return "", reboots && sent && !wentDown && state != bmc.PowerStateOn
}

// awaitHost sends step's request (once: it is recorded before it is sent, and only while the wait has
// time left to see it answered, see lastSend) and polls the power state until the wait ends (see
// hostWaitVerdict), then enters the next phase. A host already off is sent nothing. BMC trouble is waited
// out with backoff until the deadline; the request the BMC answered with an error other than unsupported
// stays recorded (it may have been taken) and is not sent again.
func (r *RemediationReconciler) awaitHost(ctx context.Context, s *scope, step hostStep) (ctrl.Result, error) {
	if err := r.claim.keepLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	deadline := s.phaseStart().Add(step.timeout)
	timedOut := func(why string) (ctrl.Result, error) {
		return r.endHostWait(ctx, s, step, v1alpha1.HostRequestTimedOut, why)
	}
	if wait := r.untilFirstPoll(s, powerWait{target: v1alpha1.PowerOff, deadline: deadline}); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	d, err := r.driverFor(ctx, s)
	if err != nil {
		return r.bmcTrouble(s, err, deadline, func(why string) (ctrl.Result, error) { return timedOut(r.unsentOr(s, step, why)) })
	}
	state, err := r.readPower(ctx, s, d)
	if err != nil {
		return r.bmcTrouble(s, err, deadline, func(why string) (ctrl.Result, error) { return timedOut(r.unsentOr(s, step, why)) })
	}
	rec := hostRecord(s, step)
	result, downNow := hostWaitVerdict(state, *rec, step.reboots, !s.now.Before(deadline))
	switch {
	case result == v1alpha1.HostRequestPoweredOff && (*rec == nil || (*rec).Requested == nil):
		return r.endHostWait(ctx, s, step, result, fmt.Sprintf("node %s was off already: no %s was sent", s.status().NodeName, step.what))
	case result == v1alpha1.HostRequestPoweredOff:
		return r.endHostWait(ctx, s, step, result, fmt.Sprintf("node %s powered off on its own %s after the %s",
			s.status().NodeName, s.now.Sub((*rec).Requested.Time), step.what))
	case result == v1alpha1.HostRequestRebooted:
		return r.endHostWait(ctx, s, step, result, fmt.Sprintf("node %s went down %s after the %s and is on again",
			s.status().NodeName, (*rec).WentDown.Sub((*rec).Requested.Time), step.what))
	case result == v1alpha1.HostRequestTimedOut && s.status().PowerRequest == nil:
		return timedOut(fmt.Sprintf("no %s was sent within %s: the BMC answered too late to see it answered", step.what, step.timeout))
	case result == v1alpha1.HostRequestTimedOut:
		return timedOut(fmt.Sprintf("node %s still reads %s %s after the %s", s.status().NodeName, state, step.timeout, step.what))
	case downNow:
		(*rec).WentDown = new(stamp(s.now))
	}
	if s.status().PowerRequest == nil {
		if now := r.opts.Clock.Now(); now.After(lastSend(deadline, step.timeout, r.opts.PowerPollInterval)) {
			// Too late to see the host answer: the wait ends at its deadline without it.
			return ctrl.Result{RequeueAfter: untilDeadline(deadline, now)}, nil
		}
		r.warnIfManagerNode(s)
		*rec = &v1alpha1.HostRequest{Requested: new(stamp(s.now))}
		err := r.requestOfHost(ctx, s, d, step, remediationTaint())
		if s.status().PowerRequest == nil && !s.abandoned {
			*rec = nil // not sent (the node could not be tainted first): sent when it can be
		}
		var be *bmcError
		switch {
		case errors.Is(err, bmc.ErrUnsupported) && errors.As(err, &be):
			return r.endHostWait(ctx, s, step, v1alpha1.HostRequestNotSupported, fmt.Sprintf("BMC %s does not offer a %s: %v",
				s.status().BMCName, step.what, be.err))
		case err != nil:
			return r.bmcTrouble(s, err, deadline, timedOut)
		}
	}
	return ctrl.Result{RequeueAfter: min(r.opts.PowerPollInterval, untilDeadline(deadline, s.now))}, nil
}

// hostRecord is the current attempt's record of step's request (nil until it is sent).
func hostRecord(s *scope, step hostStep) **v1alpha1.HostRequest {
	a := s.currentAttempt()
	if a == nil { // an attempt is opened before its first phase; a hand-edited status may lack it
		openAttempt(s, s.phaseStart())
		a = s.currentAttempt()
	}
	return step.record(a)
}

// unsentOr is why the wait ended, saying so when the request was never sent.
func (r *RemediationReconciler) unsentOr(s *scope, step hostStep, why string) string {
	if s.status().PowerRequest == nil {
		return fmt.Sprintf("no %s was sent within %s: %s", step.what, step.timeout, why)
	}
	return why
}

// endHostWait records how the wait ended, in the attempt's record, and goes on to the next phase: the
// forced power-off for a host that is off (it confirms it, and sends nothing), else the next step.
func (r *RemediationReconciler) endHostWait(ctx context.Context, s *scope, step hostStep, result v1alpha1.HostRequestResult, message string) (ctrl.Result, error) {
	rec := hostRecord(s, step)
	if *rec == nil {
		*rec = &v1alpha1.HostRequest{}
	}
	(*rec).Ended, (*rec).Result, (*rec).Message = new(stamp(s.now)), result, truncate(message, maxAttemptMessage)
	next := nextOffPhase(s.spec, step.phase)
	if result == v1alpha1.HostRequestPoweredOff {
		next = v1alpha1.PhasePoweringOff
	}
	return r.enterOffPhase(ctx, s, next, &hostWaitEnd{step: step, result: result, message: message}, "")
}

// hostRequestBound is how long the power request towards Off recorded in the current phase may take to
// land, and what it was called: the wait of a request the host answers (Diagnosing, ShuttingDown), or
// powerOffTimeoutSeconds for a power-off.
func hostRequestBound(s *scope) (time.Duration, string) {
	switch s.status().Phase {
	case v1alpha1.PhaseDiagnosing:
		if s.spec.diagnosticTimeout > 0 {
			return s.spec.diagnosticTimeout, "diagnostic interrupt"
		}
	case v1alpha1.PhaseShuttingDown:
		if s.spec.gracefulTimeout > 0 {
			return s.spec.gracefulTimeout, "graceful shutdown"
		}
	}
	return s.spec.powerOffTimeout, "power-off"
}
