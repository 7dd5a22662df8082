package powercycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// cleanup runs when the request is deleted (the node is healthy again, or an admin gave up) or marked
// timed out by its health check, at whatever phase: the host is powered back on (unless the strategy is
// power-off, or the Machine was deleted), the taints we added are removed, the lease we took is
// released, and only then does the finalizer go. Each wait of the power-on (for a power-off the BMC
// accepted to land, then for the host to come on) is bounded by powerOffTimeoutSeconds: a dead BMC does
// not keep the request forever (a warning says the host was left as it was).
func (r *RemediationReconciler) cleanup(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s.pcr, v1alpha1.FinalizerPowerCycle) {
		return ctrl.Result{}, nil // cleaned up already, or never started
	}
	var note string
	if r.needsPowerOn(s) {
		var done bool
		var res ctrl.Result
		var err error
		note, done, res, err = r.ensurePoweredOn(ctx, s)
		if !done || err != nil {
			return res, err
		}
	}
	if err := r.removeOurTaints(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.releaseLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}

	deleting := !s.pcr.DeletionTimestamp.IsZero()
	why := "the remediation request was deleted"
	if !deleting {
		why = "the health check timed the remediation out"
	}
	if !deleting && !terminal(s.status().Phase) {
		if err := r.transition(ctx, s, v1alpha1.PhaseFailed, v1alpha1.ReasonTimedOut,
			fmt.Sprintf("Stopped: %s", why)); err != nil || s.abandoned {
			return ctrl.Result{}, err
		}
	} else if c := s.condition(v1alpha1.ConditionProcessing); c != nil && c.Status == metav1.ConditionTrue {
		s.setCondition(v1alpha1.ConditionProcessing, metav1.ConditionFalse, v1alpha1.ReasonRemediationCancelled, "Stopped: "+why)
	}
	if note != "" {
		why += "; " + note
	}
	r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventCleanedUp, ActionCleanUp,
		"Cleaned up node %s: %s", s.status().NodeName, why)
	s.log.Info("Cleaned up", "node", s.status().NodeName, "why", why)
	if err := r.patchFinalizer(ctx, s, controllerutil.RemoveFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	s.abandoned = true // nothing more to record: the request may be gone
	return ctrl.Result{}, nil
}

// needsPowerOn reports whether cleanup must make sure the host is on: an attempt was started (so the
// host may be off because of us), the strategy is not power-off, and the Machine was not deleted.
func (r *RemediationReconciler) needsPowerOn(s *scope) bool {
	st := s.status()
	if s.spec.strategy == v1alpha1.StrategyPowerOff || len(st.Attempts) == 0 || st.NodeName == "" {
		return false
	}
	if c := s.condition(v1alpha1.ConditionPermanentNodeDeletionExpected); c != nil && c.Status == metav1.ConditionTrue {
		return false
	}
	return hostMayBeOffByUs(st.Phase)
}

// ensurePoweredOn powers the host on and waits for the BMC to confirm it. Like the phases, it records
// the power-on request before sending it, and sends it once; a host already asked to power on is only
// watched. It is done when the BMC reads On, or, powerOffTimeoutSeconds after it started (the power-on
// request, or the first BMC failure), with a warning that the host may be left off.
//
// A power-off the BMC accepted may not have been carried out yet: the host still reads On, a power-on
// now would change nothing (a Redfish BMC ignores it when the host reads On), and the power-off would
// land after cleanup, leaving the host off. So while the status records a power-off request, cleanup
// first waits, polling, for the BMC to read Off, and only then asks for the power-on. A host that still
// reads On powerOffTimeoutSeconds after the power-off was requested never went off: it is on, cleanup is
// done, and note says so. Everything it needs is in the status (the power-off request stays recorded
// until the power-on request replaces it), so a restart resumes the wait.
func (r *RemediationReconciler) ensurePoweredOn(ctx context.Context, s *scope) (note string, done bool, res ctrl.Result, err error) {
	st := s.status()
	req := st.PowerRequest
	offRequested := req != nil && req.Target == v1alpha1.PowerOff
	onRequested := req != nil && req.Target == v1alpha1.PowerOn
	since := s.now
	if onRequested {
		since = req.Time.Time
	} else if c := s.condition(v1alpha1.ConditionBMCReady); c != nil && c.Status == metav1.ConditionFalse {
		since = c.LastTransitionTime.Time
	}
	deadline := since.Add(s.spec.powerOffTimeout)
	abandon := func(why string) (ctrl.Result, error) {
		r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventPowerOnAbandoned, ActionCleanUp,
			"Could not power node %s back on within %s; it may be left powered off: %s", st.NodeName, s.spec.powerOffTimeout, why)
		done = true
		return ctrl.Result{}, nil
	}
	trouble := func(err error) (string, bool, ctrl.Result, error) {
		res, err := r.bmcTrouble(s, err, deadline, abandon)
		return "", done, res, err
	}
	poll := func(until time.Time) ctrl.Result {
		return ctrl.Result{RequeueAfter: min(r.opts.PowerPollInterval, untilDeadline(until, s.now))}
	}

	d, err := r.driverFor(ctx, s)
	if err != nil {
		return trouble(err)
	}
	state, err := r.readPower(ctx, s, d)
	if err != nil {
		return trouble(err)
	}
	if offRequested {
		offDeadline := req.Time.Add(s.spec.powerOffTimeout)
		if state != bmc.PowerStateOff && s.now.Before(offDeadline) {
			s.log.V(4).Info("Waiting for the power-off the BMC accepted before powering the node back on",
				"node", st.NodeName, "state", state, "requested", req.Time.UTC().Format(timeFormat))
			return "", false, poll(offDeadline), nil
		}
		if state == bmc.PowerStateOn {
			note = fmt.Sprintf("the power-off requested at %s was not carried out within %s; the host stayed on",
				req.Time.UTC().Format(timeFormat), s.spec.powerOffTimeout)
			s.log.Info("Power-off never carried out; the host is on", "node", st.NodeName,
				"requested", req.Time.UTC().Format(timeFormat), "timeout", s.spec.powerOffTimeout)
			return note, true, ctrl.Result{}, nil
		}
		// Off: the power-off landed. Neither On nor Off past its deadline: it may be under way; power on.
	} else {
		if state == bmc.PowerStateOn {
			return "", true, ctrl.Result{}, nil
		}
		if !s.now.Before(deadline) {
			res, err := abandon(fmt.Sprintf("the BMC still reports %s", state))
			return "", done, res, err
		}
	}
	if onRequested {
		return "", false, poll(deadline), nil
	}
	if err := r.requestPower(ctx, s, d, v1alpha1.PowerOn); err != nil {
		st.PowerRequest = req // a power-off may still be recorded: wait for it, then power on, next time
		return trouble(err)
	}
	s.log.Info("Powering node back on", "node", st.NodeName)
	return "", false, poll(s.now.Add(s.spec.powerOffTimeout)), nil
}
