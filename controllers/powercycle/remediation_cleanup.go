package powercycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// cleanup runs when the request is deleted (the node is healthy again, or an admin gave up) or marked
// timed out by its health check, at whatever phase. A timed-out request hands the host over as it is
// (handOver); a deleted one lets go of its node (release). Neither restores a host that another request
// of the node holds.
func (r *RemediationReconciler) cleanup(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.pcr.DeletionTimestamp.IsZero() {
		return r.handOver(ctx, s)
	}
	return r.release(ctx, s)
}

// handOver runs when the health check marked the request timed out (and it is not deleted): the request
// stops at a safe point and leaves the host as it is for the next remediation of the node. A power request
// in flight is landed first (bounded by its phase's timeout), and a host confirmed off is fenced, as any
// confirmed power-off is; then the request reports Processing=False, HandedOver (a request that was still
// at work also ends Failed, Succeeded=False, TimedOut), emits HandedOver, and keeps its finalizer: the host
// is restored only when the last request of the node is deleted. It keeps renewing the node lease while it
// holds it, so that the host is never free between two remediations; the next request takes it over.
func (r *RemediationReconciler) handOver(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s.pcr, v1alpha1.FinalizerPowerCycle) {
		return ctrl.Result{}, nil // never started: it holds nothing
	}
	if handedOver(s.pcr) {
		return r.claim.holdOwnLease(ctx, s)
	}
	note, done, res, err := r.settle(ctx, s)
	if !done || err != nil || s.abandoned {
		return res, err
	}

	st := s.status()
	why := "the health check timed the remediation out"
	if !terminal(st.Phase) {
		r.enter(s, v1alpha1.PhaseFailed, v1alpha1.ReasonTimedOut, "Stopped: "+why)
	}
	state := "power " + string(st.PowerState)
	if st.PowerState == "" {
		state = "power not read"
	}
	if len(st.AppliedTaints) > 0 {
		state += fmt.Sprintf(", taints %v", st.AppliedTaints)
	}
	msg := fmt.Sprintf("Stopped: %s; node %s is handed over as it is (%s)", why, st.NodeName, state)
	if note != "" {
		msg += "; " + note
	}
	s.setCondition(v1alpha1.ConditionProcessing, metav1.ConditionFalse, v1alpha1.ReasonHandedOver, msg)
	if err := r.persist(ctx, s); err != nil || s.abandoned {
		return ctrl.Result{}, err
	}
	r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventHandedOver, ActionCleanUp, "%s", msg)
	s.log.Info("Handed the node over", "node", st.NodeName, "message", msg)
	return r.claim.holdOwnLease(ctx, s)
}

// settle lands the power request in flight, if any, before a timed-out request hands the host over: it
// polls the BMC until it reads the requested state, or until the phase's deadline for it (then note says
// what was left unconfirmed). A host confirmed off, then or before (PoweredOff, whose fence may not be on
// yet after a restart), is fenced. done is false while it waits; res says when to look again.
func (r *RemediationReconciler) settle(ctx context.Context, s *scope) (note string, done bool, res ctrl.Result, err error) {
	st := s.status()
	confirmedOff := st.Phase == v1alpha1.PhasePoweredOff
	if req := st.PowerRequest; req != nil {
		bound, verb := hostRequestBound(s)
		want, deadline := bmc.PowerStateOff, s.phaseStart().Add(bound)
		if req.Target == v1alpha1.PowerOn {
			verb, want, deadline = "power-on", bmc.PowerStateOn, r.powerOnStart(s).Add(s.spec.powerOnTimeout)
		}
		state, err := r.readPowerFor(ctx, s)
		var be *bmcError
		switch {
		case err != nil && !errors.As(err, &be):
			return "", false, ctrl.Result{}, err
		case err != nil && s.now.Before(deadline):
			return "", false, ctrl.Result{RequeueAfter: r.bmcFailed(s, be, deadline)}, nil
		case err != nil:
			r.bmcFailed(s, be, deadline)
			note = fmt.Sprintf("the %s requested at %s was not confirmed: the BMC could not be used (%s)",
				verb, req.Time.UTC().Format(timeFormat), be.reason)
		case state == want:
			if a := s.currentAttempt(); a != nil && want == bmc.PowerStateOff {
				a.PoweredOff = new(stamp(s.now))
			} else if a != nil {
				a.PoweredOn = new(stamp(s.now))
			}
			confirmedOff = want == bmc.PowerStateOff
		case s.now.Before(deadline):
			s.log.V(4).Info("Timed out: landing the power request in flight before handing the node over",
				"target", req.Target, "state", state, "until", deadline)
			return "", false, ctrl.Result{RequeueAfter: min(r.opts.PowerPollInterval, untilDeadline(deadline, s.now))}, nil
		default:
			note = fmt.Sprintf("the %s requested at %s was not confirmed within the phase's timeout; the BMC reads %s",
				verb, req.Time.UTC().Format(timeFormat), state)
		}
	}
	if confirmedOff {
		if err := r.fence(ctx, s); err != nil || s.abandoned {
			return "", false, ctrl.Result{}, err
		}
	}
	return note, true, ctrl.Result{}, nil
}

// release lets go of the node of a deleted request, by what the node's other requests are doing (see
// onDeletion): another request of the node that is not being deleted gets the node as it is, with this
// request's record of the taints (passRecord; then the remediation is recorded on the host's BMC and the
// finalizer goes, and nothing else is touched: not the power, not the taints, not the lease it relies on); of
// several deleted together, the newest restores the node and the others wait until it has (see
// onDeletion); the last one restores (restore).
func (r *RemediationReconciler) release(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s.pcr, v1alpha1.FinalizerPowerCycle) {
		return ctrl.Result{}, nil // cleaned up already, or never started
	}
	siblings, err := r.claim.siblings(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	action, other := onDeletion(s.pcr, siblings)
	switch action {
	case releaseHandOver:
		if retry, err := r.passRecord(ctx, s, other); err != nil || retry {
			return ctrl.Result{RequeueAfter: r.opts.PowerPollInterval}, err
		}
		msg := fmt.Sprintf("Deleted while %s/%s remediates node %s: the node is left to it as it is",
			other.Namespace, other.Name, s.status().NodeName)
		if err := r.recordRemediation(ctx, s, remediationRecord(s.pcr, nil, letGoPassedOn, msg, s.now)); err != nil {
			return ctrl.Result{}, err
		}
		r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventHandedOver, ActionCleanUp, "%s", msg)
		s.log.Info("Handed the node over", "node", s.status().NodeName, "to", klog.KObj(other))
		return ctrl.Result{}, r.letGo(ctx, s)
	case releaseAwait:
		s.log.V(2).Info("Waiting for a newer request of the node, deleted too, to restore it", "restorer", klog.KObj(other))
		// The restorer's deletion (or its finalizer's removal) brings the next reconcile; this is a backstop.
		return ctrl.Result{RequeueAfter: r.opts.PowerPollInterval}, nil
	}
	return r.restore(ctx, s, siblings)
}

// restore ends the last remediation of the node: the host is powered back on (see needsPowerOn), the
// taints of metalheal's remediations are removed (those recorded by this request and by the others
// deleted with it), the node lease is released if one
// of them holds it, the remediation is recorded on the host's BMC (see recordRemediation), and only then
// does the finalizer go. Each wait of the power-on (for a power-off the
// BMC accepted to land, then for the host to come on) is bounded by powerOffTimeoutSeconds: a dead BMC
// does not keep the request forever (a warning says the host was left as it was). The node is read from
// the API server, not the cache: a request that waited for another to restore must see what that one did.
func (r *RemediationReconciler) restore(ctx context.Context, s *scope, siblings []v1alpha1.PowerCycleRemediation) (ctrl.Result, error) {
	node, err := r.readNodeLive(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	var records [][]string
	for i := range siblings {
		records = append(records, siblings[i].Status.AppliedTaints)
	}
	var note string
	if node == nil && s.status().NodeName != "" {
		note = fmt.Sprintf("node %s is gone: its host was left as it is, not powered on", s.status().NodeName)
	}
	if r.needsPowerOn(s, siblings, node, records) {
		var done bool
		var res ctrl.Result
		note, done, res, err = r.ensurePoweredOn(ctx, s)
		if !done || err != nil {
			return res, err
		}
	}
	if err := r.removeTaints(ctx, s, slices.Concat(records...)); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.claim.releaseLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}

	why := "the remediation request was deleted"
	if c := s.condition(v1alpha1.ConditionProcessing); c != nil && c.Status == metav1.ConditionTrue {
		s.setCondition(v1alpha1.ConditionProcessing, metav1.ConditionFalse, v1alpha1.ReasonRemediationCancelled, "Stopped: "+why)
	}
	if err := r.recordRemediation(ctx, s, remediationRecord(s.pcr, node, letGoRestored, note, s.now)); err != nil {
		return ctrl.Result{}, err
	}
	if note != "" {
		why += "; " + note
	}
	r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventCleanedUp, ActionCleanUp,
		"Cleaned up node %s: %s", s.status().NodeName, why)
	s.log.Info("Cleaned up", "node", s.status().NodeName, "why", why)
	return ctrl.Result{}, r.letGo(ctx, s)
}

// letGo removes the finalizer: nothing more is recorded, the request may be gone.
func (r *RemediationReconciler) letGo(ctx context.Context, s *scope) error {
	if err := r.patchFinalizer(ctx, s, controllerutil.RemoveFinalizer); err != nil {
		return err
	}
	s.abandoned = true
	return nil
}

// readNodeLive reads the request's node from its cluster's API server and keeps it for the rest of the
// reconcile; nil when it is gone.
func (r *RemediationReconciler) readNodeLive(ctx context.Context, s *scope) (*corev1.Node, error) {
	name := s.status().NodeName
	if name == "" {
		return nil, nil
	}
	nc, err := r.nodeClusterOf(ctx, s)
	if err != nil {
		return nil, err
	}
	node := &corev1.Node{}
	err = nc.live.Get(ctx, client.ObjectKey{Name: name}, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	s.nodeRead, s.node, s.nodeError = true, nil, err
	if err != nil {
		return nil, nil
	}
	s.node = node
	return node, nil
}

// needsPowerOn reports whether restore must make sure the host is on: the strategy is not power-off, no
// Machine was deleted (by this request or another deleted with it), the Node still exists, and a
// remediation of the node may have left the host off: the node still carries one of the taints metalheal's
// requests recorded (they go on before the first power-off, and come off when the host is back or the node
// is restored; a request that waited for another to restore finds none).
//
// A host whose Node is gone is never powered on, whatever the strategy. Deleting a Node deletes the
// requests it owns (the garbage collector, by their owner reference), and that deletion is no health
// check's verdict that the node is healthy again: it says nothing of the host but that the cluster no
// longer counts it. Powering the host on then would let whoever may delete a Node switch on a host that
// was fenced (power-off, an escalation left off), and a request of the Node that was handed over (an
// earlier escalation step) would do it after the last step had left it off. A host left off mid-cycle
// (reboot, escalate) stays off too: the CleanedUp event says so, and whoever deleted the Node powers it
// on when it is to come back.
func (r *RemediationReconciler) needsPowerOn(s *scope, siblings []v1alpha1.PowerCycleRemediation, node *corev1.Node, records [][]string) bool {
	st := s.status()
	if s.spec.strategy == v1alpha1.StrategyPowerOff || st.NodeName == "" || node == nil {
		return false
	}
	machineDeleted := func(conditions []metav1.Condition) bool {
		c := meta.FindStatusCondition(conditions, v1alpha1.ConditionPermanentNodeDeletionExpected)
		return c != nil && c.Status == metav1.ConditionTrue
	}
	if machineDeleted(st.Conditions) || slices.ContainsFunc(siblings, func(p v1alpha1.PowerCycleRemediation) bool {
		return machineDeleted(p.Status.Conditions)
	}) {
		return false
	}
	return markedByUs(node, append(records, st.AppliedTaints)...)
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
		bound, verb := hostRequestBound(s)
		offDeadline := req.Time.Add(bound)
		if state != bmc.PowerStateOff && s.now.Before(offDeadline) {
			s.log.V(4).Info("Waiting for the power-off the BMC accepted before powering the node back on",
				"node", st.NodeName, "state", state, "requested", req.Time.UTC().Format(timeFormat))
			return "", false, poll(offDeadline), nil
		}
		if state == bmc.PowerStateOn {
			note = fmt.Sprintf("the %s requested at %s was not carried out within %s; the host stayed on",
				verb, req.Time.UTC().Format(timeFormat), bound)
			s.log.Info("Power-off never carried out; the host is on", "node", st.NodeName, "request", verb,
				"requested", req.Time.UTC().Format(timeFormat), "timeout", bound)
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
