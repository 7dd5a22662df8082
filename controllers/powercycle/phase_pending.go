package powercycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// reasonNodeExcluded: the node is labelled remediation.medik8s.io/exclude-from-remediation=true.
const reasonNodeExcluded = "NodeExcluded"

// pending gets everything ready before the host is touched: the node, its BMC and the node lease; then
// the first attempt starts, whose write entering PoweringOff records the acceptance too, and which puts
// the remediation taint on the node before the power-off request goes out. While something is missing
// it waits (no lease is taken while the BMC is not usable), with waits that grow the longer it lasts, and
// every one of those waits ends (see the table "Every wait and its bound" in docs/powercycle.md):
//   - a node that does not exist, or a BMC that cannot be used, powerOnTimeoutSeconds after the request
//     was accepted (pendingTimeout): the first attempt fails, without having touched the host, and the
//     state machine goes on as after any failed attempt (a retry, or escalation);
//   - a node lease held by someone else, --lease-duration after it was first found held
//     (leaseWaitTimeout): the request fails (Succeeded=False), so that its health check may escalate.
func (r *RemediationReconciler) pending(ctx context.Context, s *scope) (ctrl.Result, error) {
	st := s.status()
	if st.NodeName == "" {
		name, err := r.resolveNodeName(ctx, s.pcr)
		if err != nil {
			return ctrl.Result{}, err
		}
		st.NodeName = name
	}
	deadline := s.phaseStart().Add(pendingTimeout(s.spec))
	wait := min(growingWait(s.phaseStart(), s.now, r.opts.PowerPollInterval, s.spec.backoffMax), untilDeadline(deadline, s.now))

	node, err := r.getNode(ctx, s)
	if apierrors.IsNotFound(err) {
		if s.setCondition(v1alpha1.ConditionProcessing, metav1.ConditionTrue, v1alpha1.ReasonNodeNotFound,
			fmt.Sprintf("Waiting for node %s to exist, until %s", st.NodeName, deadline.UTC().Format(timeFormat))) {
			r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventNodeNotFound, ActionPowerCycle,
				"Node %s does not exist", st.NodeName)
		}
		if !s.now.Before(deadline) {
			return r.failBeforeAttempt(ctx, s, fmt.Sprintf("node %s did not exist within %s (powerOnTimeoutSeconds) of the request's acceptance",
				st.NodeName, pendingTimeout(s.spec)))
		}
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading node %s: %w", st.NodeName, err)
	}
	if excluded(node) {
		return ctrl.Result{}, r.transition(ctx, s, v1alpha1.PhaseFailed, reasonNodeExcluded,
			fmt.Sprintf("Node %s is labelled %s=true: it is never remediated", node.Name, v1alpha1.LabelExcludeFromRemediation))
	}

	if _, err := r.driverFor(ctx, s); err != nil {
		var be *bmcError
		if !errors.As(err, &be) {
			return ctrl.Result{}, err
		}
		bmcWait := r.bmcFailed(s, be, deadline)
		if !s.now.Before(deadline) {
			return r.failBeforeAttempt(ctx, s, fmt.Sprintf("the BMC of node %s could not be used within %s (powerOnTimeoutSeconds) of the request's acceptance (%s): %v",
				st.NodeName, pendingTimeout(s.spec), be.reason, be.err))
		}
		return ctrl.Result{RequeueAfter: bmcWait}, nil
	}
	s.setCondition(v1alpha1.ConditionBMCReady, metav1.ConditionTrue, v1alpha1.ReasonAsExpected,
		fmt.Sprintf("BMC %s found", st.BMCName))

	ok, leaseWait, err := r.claim.acquireLease(ctx, s, node)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ok {
		return r.awaitLease(ctx, s, leaseWait)
	}
	// The remediation taint goes on in PoweringOff, right after the write that records the acceptance,
	// the taint and the power-off request together, and before that request is sent.
	return r.startAttempt(ctx, s)
}

// pendingTimeout bounds Pending's wait for the node to exist and its BMC to be usable: powerOnTimeoutSeconds,
// the time the template gives a node to come back (a node that is re-registering is the likeliest one
// to be missing), counted from the request's acceptance.
func pendingTimeout(spec effectiveSpec) time.Duration { return spec.powerOnTimeout }

// awaitLease waits while someone else holds the node lease (acquireLease reported it, and said how long
// to wait), for leaseWaitTimeout from when the lease was first found held; then the request fails, with
// Succeeded=False: a holder that keeps the node that long is not about to let go, and the health check
// may escalate rather than wait on a request that does nothing.
func (r *RemediationReconciler) awaitLease(ctx context.Context, s *scope, wait time.Duration) (ctrl.Result, error) {
	since := s.now
	c := s.condition(v1alpha1.ConditionLeaseAcquired)
	if c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonLeaseHeldByOther {
		since = c.LastTransitionTime.Time
	}
	deadline := since.Add(r.leaseWaitTimeout())
	if s.now.Before(deadline) {
		return ctrl.Result{RequeueAfter: min(wait, untilDeadline(deadline, s.now))}, nil
	}
	why := "someone else holds it"
	if c != nil {
		why = c.Message
	}
	return ctrl.Result{}, r.transition(ctx, s, v1alpha1.PhaseFailed, v1alpha1.ReasonLeaseHeldByOther,
		fmt.Sprintf("Gave up waiting %s (--lease-duration) for the node lease of %s, nothing done: %s",
			r.leaseWaitTimeout(), s.status().NodeName, why))
}

// leaseWaitTimeout bounds the wait for a node lease someone else holds: the duration of a lease of our
// own (--lease-duration). No template field fits: the holder is not a host, and how long it may keep the
// node is the admin's to say, for every pool at once.
func (r *RemediationReconciler) leaseWaitTimeout() time.Duration { return r.opts.LeaseDuration }

// failBeforeAttempt ends Pending's wait for the node or its BMC: the first attempt is recorded as begun
// when the request was accepted and failed now, without the host having been touched, and the state
// machine goes on as after any failed attempt.
func (r *RemediationReconciler) failBeforeAttempt(ctx context.Context, s *scope, why string) (ctrl.Result, error) {
	openAttempt(s, s.phaseStart())
	return r.failAttempt(ctx, s, why)
}
