package powercycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// reasonBMCError is the BMCReady reason for a driver error of no known kind.
const reasonBMCError = "BMCError"

// bmcError is a failure to reach or use the node's BMC: the BMC object, its Secret, its address, or the
// BMC itself. Anything else (an API server error, say) is returned as is and retried by the workqueue.
type bmcError struct {
	reason string
	err    error
}

func (e *bmcError) Error() string { return e.err.Error() }
func (e *bmcError) Unwrap() error { return e.err }

// classify wraps err in a *bmcError when it is the BMC's (or its configuration's) fault.
func classify(err error, fromDriver bool) error {
	if err == nil {
		return nil
	}
	reason := bmcaccess.Reason(err)
	if reason == "" && fromDriver {
		reason = reasonBMCError // a driver call that failed is the BMC's problem, whatever the cause
	}
	if reason == "" {
		return err
	}
	return &bmcError{reason: reason, err: err}
}

// driverFor returns the driver of the node's BMC and records which BMC it is.
func (r *RemediationReconciler) driverFor(ctx context.Context, s *scope) (bmc.Driver, error) {
	b, d, err := r.opts.Drivers.ForHost(ctx, hostOf(s.pcr))
	if b != nil {
		s.status().BMCName = b.Name
	}
	if err != nil {
		return nil, classify(fmt.Errorf("finding the BMC of node %s: %w", s.status().NodeName, err), false)
	}
	return d, nil
}

// readPower reads the host's power state, bounded by the BMC call timeout, and records it: On or Off,
// or Unknown when the BMC could not be read. A reading in the middle of a transition (PoweringOff, say)
// leaves the record as it was: it would cost a status write per poll and tell nothing the phase does
// not.
func (r *RemediationReconciler) readPower(ctx context.Context, s *scope, d bmc.Driver) (bmc.PowerState, error) {
	callCtx, cancel := context.WithTimeout(ctx, r.opts.BMCCallTimeout)
	defer cancel()
	state, err := d.PowerState(callCtx)
	if err != nil {
		s.status().PowerState = v1alpha1.PowerUnknown
		return "", classify(err, true)
	}
	if state == bmc.PowerStateOn || state == bmc.PowerStateOff {
		s.status().PowerState = v1alpha1.PowerState(state)
	}
	r.bmcAnswered(s)
	return state, nil
}

// readPowerFor reads the host's power through the node's BMC (see readPower).
func (r *RemediationReconciler) readPowerFor(ctx context.Context, s *scope) (bmc.PowerState, error) {
	d, err := r.driverFor(ctx, s)
	if err != nil {
		return "", err
	}
	return r.readPower(ctx, s, d)
}

// requestPower records a power request, then sends it (bounded by the BMC call timeout). taints are what
// the node must carry before the request goes out: the write that records the request claims them too,
// and they are added between that write and the send. A request that could not be sent (the node could
// not be tainted) is forgotten, so that it may be sent again. One that was handed to the BMC stays
// recorded, whatever the BMC answered: after a timeout or a dropped connection it may well have taken
// the request and be carrying it out, and a real BMC takes seconds to, so the power state read next may
// still be the old one. The phase does not send it again (see awaitPower and resendDue); a power-off in
// particular goes out once per attempt.
func (r *RemediationReconciler) requestPower(ctx context.Context, s *scope, d bmc.Driver, target v1alpha1.PowerState, taints ...corev1.Taint) error {
	return r.recordThenSend(ctx, s, target, func() error { return r.sendPower(ctx, s, d, target) }, taints...)
}

// requestOfHost is requestPower for a request the host answers (see hostStep): recorded as a power
// request towards Off, the state the host is expected to reach on its own, then sent.
func (r *RemediationReconciler) requestOfHost(ctx context.Context, s *scope, d bmc.Driver, step hostStep, taints ...corev1.Taint) error {
	return r.recordThenSend(ctx, s, v1alpha1.PowerOff, func() error { return r.sendToHost(ctx, s, d, step) }, taints...)
}

// recordThenSend records a power request towards target, puts taints on the node, then sends the
// request (see requestPower).
func (r *RemediationReconciler) recordThenSend(ctx context.Context, s *scope, target v1alpha1.PowerState, send func() error, taints ...corev1.Taint) error {
	st := s.status()
	st.PowerRequest = &v1alpha1.PowerRequest{Target: target, Time: stamp(s.now)}
	if err := r.ensureTaints(ctx, s, taints...); err != nil || s.abandoned {
		if !s.abandoned {
			st.PowerRequest = nil // recorded, but the node could not be tainted: not sent
		}
		return err
	}
	return send()
}

// sendPower sends a power request that is already recorded, bounded by the BMC call timeout.
func (r *RemediationReconciler) sendPower(ctx context.Context, s *scope, d bmc.Driver, target v1alpha1.PowerState) error {
	callCtx, cancel := context.WithTimeout(ctx, r.opts.BMCCallTimeout)
	defer cancel()
	var err error
	if target == v1alpha1.PowerOff {
		err = d.PowerOff(callCtx, true)
	} else {
		err = d.PowerOn(callCtx)
	}
	if err != nil {
		s.log.V(2).Info("Power request unanswered or refused; it may have been taken, and is not sent again at once",
			"target", target, "bmc", s.status().BMCName, "error", err.Error())
		return classify(err, true)
	}
	s.log.V(4).Info("Power change requested", "target", target, "bmc", s.status().BMCName)
	return nil
}

// sendToHost sends a request the host answers (a diagnostic interrupt, a graceful shutdown) that is
// already recorded, bounded by the BMC call timeout.
func (r *RemediationReconciler) sendToHost(ctx context.Context, s *scope, d bmc.Driver, step hostStep) error {
	callCtx, cancel := context.WithTimeout(ctx, r.opts.BMCCallTimeout)
	defer cancel()
	if err := step.send(callCtx, d); err != nil {
		s.log.V(2).Info("Request to the host refused or unanswered", "request", step.request, "bmc", s.status().BMCName, "error", err.Error())
		return classify(err, true)
	}
	s.log.V(4).Info("Request to the host sent", "request", step.request, "bmc", s.status().BMCName)
	return nil
}

// powerTransitionTimeout is how long a BMC is given to carry out a power request it may have taken
// before the request is sent again: powerOffTimeoutSeconds, the template's bound on a BMC confirming a
// power change. A power-off is never sent again within its phase, which that same bound ends.
func powerTransitionTimeout(spec effectiveSpec) time.Duration { return spec.powerOffTimeout }

// resendDue reports whether the recorded power request of a wait is to be sent again: only a power-on
// (a second one changes nothing on a host that is coming on; a second power-off is what must never
// happen), only when the host still reads Off, not on its way, and only once powerTransitionTimeout
// has passed since it was recorded.
func (r *RemediationReconciler) resendDue(s *scope, w powerWait, state bmc.PowerState) bool {
	req := s.status().PowerRequest
	if req == nil || w.target != v1alpha1.PowerOn || req.Target != v1alpha1.PowerOn || state != bmc.PowerStateOff {
		return false
	}
	return !s.now.Before(req.Time.Add(powerTransitionTimeout(s.spec)))
}

// bmcAnswered marks the BMC ready after it answered.
func (r *RemediationReconciler) bmcAnswered(s *scope) {
	s.setCondition(v1alpha1.ConditionBMCReady, metav1.ConditionTrue, v1alpha1.ReasonAsExpected,
		fmt.Sprintf("BMC %s answered", s.status().BMCName))
}

// bmcFailed reports a BMC problem in the BMCReady condition (with a warning event when it is news) and
// returns how long to wait before trying again: from PowerPollInterval, doubling for as long as the
// problem lasts, at most the retry backoff's max, and never past deadline (when not zero).
func (r *RemediationReconciler) bmcFailed(s *scope, err *bmcError, deadline time.Time) time.Duration {
	if s.setCondition(v1alpha1.ConditionBMCReady, metav1.ConditionFalse, err.reason, err.Error()) {
		r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventBMCNotReady, ActionPowerCycle,
			"Node %s: %s", s.status().NodeName, err.Error())
	}
	s.log.V(2).Info("BMC not usable", "reason", err.reason, "error", err.Error())
	since := s.now
	if c := s.condition(v1alpha1.ConditionBMCReady); c != nil {
		since = c.LastTransitionTime.Time
	}
	wait := growingWait(since, s.now, r.opts.PowerPollInterval, s.spec.backoffMax)
	if !deadline.IsZero() {
		wait = min(wait, untilDeadline(deadline, s.now))
	}
	return wait
}

// bmcTrouble handles an error met while driving the host's power in a phase bounded by deadline: a BMC
// problem waits and tries again, or, once the deadline has passed, calls expired. Other errors are
// returned for the workqueue to retry.
func (r *RemediationReconciler) bmcTrouble(s *scope, err error, deadline time.Time, expired func(why string) (ctrl.Result, error)) (ctrl.Result, error) {
	var be *bmcError
	if !errors.As(err, &be) {
		return ctrl.Result{}, err
	}
	wait := r.bmcFailed(s, be, deadline)
	if !s.now.Before(deadline) {
		return expired(fmt.Sprintf("the BMC could not be used (%s): %v", be.reason, be.err))
	}
	return ctrl.Result{RequeueAfter: wait}, nil
}
