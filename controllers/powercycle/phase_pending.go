package powercycle

import (
	"context"
	"errors"
	"fmt"

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
// it waits (no lease is taken while the BMC is not usable), with waits that grow the longer it lasts.
func (r *RemediationReconciler) pending(ctx context.Context, s *scope) (ctrl.Result, error) {
	st := s.status()
	if st.NodeName == "" {
		name, err := r.resolveNodeName(ctx, s.pcr)
		if err != nil {
			return ctrl.Result{}, err
		}
		st.NodeName = name
	}
	wait := growingWait(s.phaseStart(), s.now, r.opts.PowerPollInterval, s.spec.backoffMax)

	node, err := r.getNode(ctx, s)
	if apierrors.IsNotFound(err) {
		if s.setCondition(v1alpha1.ConditionProcessing, metav1.ConditionTrue, v1alpha1.ReasonNodeNotFound,
			fmt.Sprintf("Waiting for node %s to exist", st.NodeName)) {
			r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventNodeNotFound, ActionPowerCycle,
				"Node %s does not exist", st.NodeName)
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
		return ctrl.Result{RequeueAfter: r.bmcFailed(s, be, s.now.Add(wait))}, nil
	}
	s.setCondition(v1alpha1.ConditionBMCReady, metav1.ConditionTrue, v1alpha1.ReasonAsExpected,
		fmt.Sprintf("BMC %s found", st.BMCName))

	ok, leaseWait, err := r.acquireLease(ctx, s, node)
	if err != nil || !ok {
		return ctrl.Result{RequeueAfter: leaseWait}, err
	}
	// The remediation taint goes on in PoweringOff, right after the write that records the acceptance,
	// the taint and the power-off request together, and before that request is sent.
	return r.startAttempt(ctx, s)
}
