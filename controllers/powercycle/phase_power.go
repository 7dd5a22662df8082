package powercycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// poweringOff asks the BMC to power the host off (once: the request is recorded before it is sent) and
// waits, polling the BMC, until it reads Off. Only that reading moves on to PoweredOff, where the node
// is fenced: nothing that assumes the host is dead happens on a guess. powerOffTimeoutSeconds after the
// phase began, the attempt fails.
func (r *RemediationReconciler) poweringOff(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.claim.keepLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return r.awaitPower(ctx, s, powerWait{
		target:   v1alpha1.PowerOff,
		timeout:  s.spec.powerOffTimeout,
		deadline: s.phaseStart().Add(s.spec.powerOffTimeout),
		// The remediation taint is claimed by the write that records the power-off request (the one
		// that enters PoweringOff, for a request that is ready) and added right after it.
		taints:        []corev1.Taint{remediationTaint()},
		beforeRequest: func() { r.warnIfManagerNode(s) },
		confirmed: func() (ctrl.Result, error) {
			if a := s.currentAttempt(); a != nil {
				a.PoweredOff = new(stamp(s.now))
			}
			if err := r.claimFence(ctx, s); err != nil {
				return ctrl.Result{}, err
			}
			if err := r.transition(ctx, s, v1alpha1.PhasePoweredOff, v1alpha1.ReasonFenced,
				fmt.Sprintf("BMC %s confirmed node %s powered off", s.status().BMCName, s.status().NodeName)); err != nil || s.abandoned {
				return ctrl.Result{}, err
			}
			// PoweredOff's work starts at once, recorded step by step as ever: waiting for the watch event
			// of the write above, and for a free worker, took seconds in a wave of power cycles.
			return r.poweredOff(ctx, s)
		},
	})
}

// warnIfManagerNode warns, just before a request that takes the host down is sent, when the node is the
// one this manager runs on.
func (r *RemediationReconciler) warnIfManagerNode(s *scope) {
	if r.opts.ManagerNodeName != "" && r.opts.ManagerNodeName == s.status().NodeName && s.status().ClusterName == "" {
		r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventPoweringOffManagerNode, ActionPowerCycle,
			"Powering off node %s, where this manager runs: the next manager resumes from this remediation's status", s.status().NodeName)
	}
}

// powerWait is one wait for the BMC to report a power state.
type powerWait struct {
	target   v1alpha1.PowerState // On or Off
	timeout  time.Duration       // for the message when the deadline passes
	deadline time.Time
	// beforeRequest, if set, runs once just before the power request is sent.
	beforeRequest func()
	// taints must be on the node before the power request goes out (see requestPower).
	taints []corev1.Taint
	// confirmed runs when the BMC reads the target state.
	confirmed func() (ctrl.Result, error)
}

// awaitPower reads the power state: at the target, confirmed; past the deadline, the attempt fails;
// otherwise the power request is sent (once: it is recorded before it is sent, and only while the wait
// has time left to see it done, see lastSend) and the BMC is polled again after PowerPollInterval. BMC
// trouble is retried with backoff until the deadline. A request whose answer was an error stays
// recorded (see requestPower): a power-off is not sent again in the phase, a power-on only once the BMC
// has had the time a transition takes and the host still reads Off (see resendDue).
func (r *RemediationReconciler) awaitPower(ctx context.Context, s *scope, w powerWait) (ctrl.Result, error) {
	verb, want := "power-off", bmc.PowerStateOff
	if w.target == v1alpha1.PowerOn {
		verb, want = "power-on", bmc.PowerStateOn
	}
	expired := func(why string) (ctrl.Result, error) {
		return r.failAttempt(ctx, s, fmt.Sprintf("%s not confirmed within %s: %s", verb, w.timeout, why))
	}
	if wait := r.untilFirstPoll(s, w); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	d, err := r.driverFor(ctx, s)
	if err != nil {
		return r.bmcTrouble(s, err, w.deadline, expired)
	}
	state, err := r.readPower(ctx, s, d)
	if err != nil {
		return r.bmcTrouble(s, err, w.deadline, expired)
	}
	if state == want {
		return w.confirmed()
	}
	if !s.now.Before(w.deadline) {
		return expired(fmt.Sprintf("the BMC still reports %s", state))
	}
	if s.status().PowerRequest == nil || r.resendDue(s, w, state) {
		if now := r.opts.Clock.Now(); now.After(lastSend(w.deadline, w.timeout, r.opts.PowerPollInterval)) {
			// Too late in this attempt to see the host act on a request (the BMC may have taken most of
			// the wait to answer): the next attempt sends it, once, instead of both.
			return ctrl.Result{RequeueAfter: untilDeadline(w.deadline, now)}, nil
		}
		if w.beforeRequest != nil {
			w.beforeRequest()
		}
		if err := r.requestPower(ctx, s, d, w.target, w.taints...); err != nil {
			return r.bmcTrouble(s, err, w.deadline, expired)
		}
	}
	return ctrl.Result{RequeueAfter: min(r.opts.PowerPollInterval, untilDeadline(w.deadline, s.now))}, nil
}

// untilFirstPoll is how long to wait before reading the power state after the request for it was sent:
// no BMC changes a host's power within a poll interval, and the reconcile our own status write brings
// at once would only read it unchanged. The interval counts from the request's record (whole seconds,
// written just before the send): counting from the send itself was measured and did not pay for itself
// (BENCHMARKS.md, the A/B).
func (r *RemediationReconciler) untilFirstPoll(s *scope, w powerWait) time.Duration {
	req := s.status().PowerRequest
	if req == nil || req.Target != w.target || !s.now.Before(w.deadline) {
		return 0
	}
	wait := min(req.Time.Add(r.opts.PowerPollInterval).Sub(s.now), r.opts.PowerPollInterval) // at most one interval, whatever the clocks
	return min(max(wait, 0), untilDeadline(w.deadline, s.now))
}

// poweredOff fences the node, now that the BMC confirmed the host is off: the out-of-service taint, so
// Kubernetes deletes its pods and detaches their volumes. The power-off strategy stops here; the others
// power the host on again.
func (r *RemediationReconciler) poweredOff(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.claim.keepLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.fence(ctx, s); err != nil || s.abandoned {
		return ctrl.Result{}, err
	}
	if s.spec.strategy == v1alpha1.StrategyPowerOff {
		if a := s.currentAttempt(); a != nil {
			a.Finished, a.Result = new(stamp(s.now)), attemptSucceeded
		}
		return ctrl.Result{}, r.transition(ctx, s, v1alpha1.PhaseSucceeded, v1alpha1.ReasonFenced,
			fmt.Sprintf("Node %s is powered off and fenced", s.status().NodeName))
	}
	return r.startPowerOn(ctx, s)
}

// startPowerOn enters PoweringOn with the power-on request recorded in the same write, and sends it. The
// host was confirmed off a moment ago, so there is nothing to read first. A power-on that could not be
// sent (no driver) is forgotten, and PoweringOn sends it again; one the BMC answered with an error stays
// recorded, and PoweringOn sends it again only if the host still reads Off once the BMC has had the time
// a transition takes (see resendDue).
func (r *RemediationReconciler) startPowerOn(ctx context.Context, s *scope) (ctrl.Result, error) {
	if a := s.currentAttempt(); a != nil {
		a.PowerOnRequested = new(stamp(s.now))
	}
	r.enter(s, v1alpha1.PhasePoweringOn, v1alpha1.ReasonPoweringOn, fmt.Sprintf("Powering node %s back on", s.status().NodeName))
	s.status().PowerRequest = &v1alpha1.PowerRequest{Target: v1alpha1.PowerOn, Time: stamp(s.now)}
	if err := r.persist(ctx, s); err != nil || s.abandoned {
		return ctrl.Result{}, err
	}
	d, err := r.driverFor(ctx, s)
	if err != nil {
		s.status().PowerRequest = nil // not sent
	} else {
		err = r.sendPower(ctx, s, d, v1alpha1.PowerOn)
	}
	if err != nil {
		var be *bmcError
		if !errors.As(err, &be) {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: r.bmcFailed(s, be, time.Time{})}, nil
	}
	return ctrl.Result{RequeueAfter: r.opts.PowerPollInterval}, nil
}

// fence taints a node whose host is confirmed off (see fenceTaints). It is called only from phases
// entered on the BMC's confirmation.
func (r *RemediationReconciler) fence(ctx context.Context, s *scope) error {
	return r.ensureTaints(ctx, s, fenceTaints(s)...)
}

// fenceTaints are the taints of a node whose host is confirmed off: the out-of-service taint, if the
// spec wants it, and the remediation taint, which a host that read Off before any power-off request was
// sent does not have yet.
func fenceTaints(s *scope) []corev1.Taint {
	taints := []corev1.Taint{remediationTaint()}
	if s.spec.outOfServiceTaint {
		taints = append(taints, outOfServiceTaint(s.now))
	}
	return taints
}

// claimFence counts the fence's taints as ours ahead of fencing, so that the write entering PoweredOff
// also records them, and fence has nothing left to record before it taints the node.
func (r *RemediationReconciler) claimFence(ctx context.Context, s *scope) error {
	_, _, err := r.claimTaints(ctx, s, fenceTaints(s)...)
	return err
}

// poweringOn asks the BMC to power the host on (once) and waits until it reads On.
// powerOnTimeoutSeconds, counted from the power-on request, bounds it together with WaitingForNode.
func (r *RemediationReconciler) poweringOn(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.claim.keepLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return r.awaitPower(ctx, s, powerWait{
		target:   v1alpha1.PowerOn,
		timeout:  s.spec.powerOnTimeout,
		deadline: r.powerOnStart(s).Add(s.spec.powerOnTimeout),
		confirmed: func() (ctrl.Result, error) {
			if a := s.currentAttempt(); a != nil {
				a.PoweredOn = new(stamp(s.now))
			}
			return ctrl.Result{}, r.transition(ctx, s, v1alpha1.PhaseWaitingForNode, v1alpha1.ReasonWaitingForNode,
				fmt.Sprintf("BMC %s confirmed node %s powered on; waiting for the node to be Ready", s.status().BMCName, s.status().NodeName))
		},
	})
}

// waitingForNode waits for the node to report Ready after the power-on. Then the taints go, the lease
// is released and the remediation has succeeded. No BMC call is made: the Node watch brings the news.
func (r *RemediationReconciler) waitingForNode(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.claim.keepLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	onSince := r.powerOnStart(s)
	deadline := onSince.Add(s.spec.powerOnTimeout)
	node, err := r.getNode(ctx, s)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if node != nil && nodeReadySince(node, onSince) {
		if err := r.removeOurTaints(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.claim.releaseLease(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
		a := s.currentAttempt()
		if a != nil {
			a.Finished, a.Result = new(stamp(s.now)), attemptSucceeded
		}
		return ctrl.Result{}, r.transition(ctx, s, v1alpha1.PhaseSucceeded, v1alpha1.ReasonNodeReady,
			fmt.Sprintf("Node %s is Ready again after %d attempt(s)", s.status().NodeName, len(s.status().Attempts)))
	}
	if !s.now.Before(deadline) {
		return r.failAttempt(ctx, s, fmt.Sprintf("node not Ready within %s of power-on", s.spec.powerOnTimeout))
	}
	return ctrl.Result{RequeueAfter: untilDeadline(deadline, s.now)}, nil
}

// powerOnStart is when the current attempt asked for power-on: powerOnTimeoutSeconds counts from it.
func (r *RemediationReconciler) powerOnStart(s *scope) time.Time {
	if a := s.currentAttempt(); a != nil && a.PowerOnRequested != nil {
		return a.PowerOnRequested.Time
	}
	return s.phaseStart()
}
