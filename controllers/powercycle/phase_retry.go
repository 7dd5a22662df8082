package powercycle

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// retrying waits out the backoff after a failed attempt, holding the node, then starts the next one.
func (r *RemediationReconciler) retrying(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.claim.keepLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if next := s.status().NextRetryTime; next != nil && s.now.Before(next.Time) {
		return ctrl.Result{RequeueAfter: untilDeadline(next.Time, s.now)}, nil
	}
	return r.startAttempt(ctx, s)
}

// escalating acts once the escalate strategy has used up its attempts. An owning Machine is deleted (so
// its MachineSet or control plane replaces it), after recording PermanentNodeDeletionExpected=True. A
// bare Node is powered off (once, confirmed by the BMC, bounded by powerOffTimeoutSeconds) and fenced,
// then the remediation fails with Succeeded=False, so the health check can try its next remediation.
func (r *RemediationReconciler) escalating(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.claim.keepLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if ref := ownerMachine(s.pcr); ref != nil {
		return r.escalateToMachineDeletion(ctx, s, ref)
	}

	deadline := s.phaseStart().Add(s.spec.powerOffTimeout)
	giveUp := func(why string) (ctrl.Result, error) {
		return ctrl.Result{}, r.transition(ctx, s, v1alpha1.PhaseFailed, v1alpha1.ReasonRetriesExhausted,
			fmt.Sprintf("%d attempts failed; node %s could not be left powered off and is not fenced: %s",
				s.status().RetryCount, s.status().NodeName, why))
	}
	d, err := r.driverFor(ctx, s)
	if err != nil {
		return r.bmcTrouble(s, err, deadline, giveUp)
	}
	state, err := r.readPower(ctx, s, d)
	if err != nil {
		return r.bmcTrouble(s, err, deadline, giveUp)
	}
	if state == bmc.PowerStateOff {
		if err := r.fence(ctx, s); err != nil || s.abandoned {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.transition(ctx, s, v1alpha1.PhaseFailed, v1alpha1.ReasonRetriesExhausted,
			fmt.Sprintf("%d attempts failed; node %s is left powered off and fenced for the health check to escalate",
				s.status().RetryCount, s.status().NodeName))
	}
	if !s.now.Before(deadline) {
		return giveUp(fmt.Sprintf("the BMC still reports %s after %s", state, s.spec.powerOffTimeout))
	}
	if s.status().PowerRequest == nil {
		// No power-off goes to an untainted node: every attempt may have failed before sending one.
		if err := r.requestPower(ctx, s, d, v1alpha1.PowerOff, remediationTaint()); err != nil {
			return r.bmcTrouble(s, err, deadline, giveUp)
		}
	}
	return ctrl.Result{RequeueAfter: min(r.opts.PowerPollInterval, untilDeadline(deadline, s.now))}, nil
}

// escalateToMachineDeletion records that the node goes for good, deletes the owning Machine, cleans the
// node up and ends the remediation: its job is done once the Machine is being replaced.
func (r *RemediationReconciler) escalateToMachineDeletion(ctx context.Context, s *scope, ref *metav1.OwnerReference) (ctrl.Result, error) {
	msg := fmt.Sprintf("%d attempts failed; deleting Machine %s so that it is replaced", s.status().RetryCount, ref.Name)
	s.setCondition(v1alpha1.ConditionPermanentNodeDeletionExpected, metav1.ConditionTrue, v1alpha1.ReasonMachineDeleted, msg)
	if err := r.persist(ctx, s); err != nil || s.abandoned {
		return ctrl.Result{}, err
	}
	if err := r.deleteMachine(ctx, s.pcr.Namespace, ref); err != nil {
		return ctrl.Result{}, err
	}
	r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventMachineDeleted, ActionPowerCycle,
		"Deleted Machine %s/%s after %d failed attempts", s.pcr.Namespace, ref.Name, s.status().RetryCount)
	if err := r.removeOurTaints(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.claim.releaseLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.transition(ctx, s, v1alpha1.PhaseSucceeded, v1alpha1.ReasonMachineDeleted, msg)
}

// finished is the end of the machine. A remediation that still holds its node (a fenced host: the
// power-off strategy, or an escalation left powered off) keeps its lease alive until the request is
// deleted or timed out.
func (r *RemediationReconciler) finished(ctx context.Context, s *scope) (ctrl.Result, error) {
	if len(s.status().AppliedTaints) == 0 {
		return ctrl.Result{}, nil
	}
	if err := r.claim.keepLease(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if s.leaseRecheck <= 0 {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: s.leaseRecheck}, nil
}
