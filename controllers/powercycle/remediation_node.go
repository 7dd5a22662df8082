package powercycle

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ensureTaints puts taints on the node, in one update. A taint the node already has is left alone and not
// counted as ours; one we add is first recorded in status.appliedTaints (durably, by the status write that
// records whatever else is pending), so cleanup after a restart still knows to remove it. The status is
// recorded even when the node needs nothing, or is gone (a node that is gone has nothing to taint).
func (r *RemediationReconciler) ensureTaints(ctx context.Context, s *scope, taints ...corev1.Taint) error {
	node, missing, err := r.claimTaints(ctx, s, taints...)
	if err != nil {
		return err
	}
	if err := r.persist(ctx, s); err != nil || s.abandoned || len(missing) == 0 {
		return err
	}
	if err := r.writeTaints(ctx, s, node, append(slices.Clone(node.Spec.Taints), missing...)); err != nil {
		return ignoreNotFound(fmt.Errorf("tainting node %s: %w", node.Name, err))
	}
	for _, t := range missing {
		s.log.Info("Tainted node", "node", node.Name, "taint", t.Key, "effect", t.Effect)
	}
	return nil
}

// claimTaints claims each of taints the node lacks (see claimTaint) and returns the node and those taints;
// a node that is gone has none to claim.
func (r *RemediationReconciler) claimTaints(ctx context.Context, s *scope, taints ...corev1.Taint) (*corev1.Node, []corev1.Taint, error) {
	if len(taints) == 0 {
		return nil, nil, nil
	}
	node, err := r.getNode(ctx, s)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading node %s to taint it: %w", s.status().NodeName, err)
	}
	var missing []corev1.Taint
	for _, t := range taints {
		if claimTaint(s, node, t) {
			missing = append(missing, t)
		}
	}
	return node, missing, nil
}

// claimTaint counts taint as ours in status.appliedTaints (not yet recorded) unless the node has it
// already, and reports whether the node still needs it. A taint claimed before is not claimed again.
func claimTaint(s *scope, node *corev1.Node, taint corev1.Taint) bool {
	if hasTaint(node.Spec.Taints, taint.Key, taint.Effect) {
		return false
	}
	if st := s.status(); !slices.Contains(st.AppliedTaints, taint.Key) {
		st.AppliedTaints = append(st.AppliedTaints, taint.Key)
	}
	return true
}

// removeOurTaints removes from the node the taints this remediation added, then forgets them.
func (r *RemediationReconciler) removeOurTaints(ctx context.Context, s *scope) error {
	st := s.status()
	if len(st.AppliedTaints) == 0 {
		return nil
	}
	node, err := r.getNode(ctx, s)
	if apierrors.IsNotFound(err) {
		st.AppliedTaints = nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node %s to untaint it: %w", st.NodeName, err)
	}
	ours := func(t corev1.Taint) bool {
		effect, known := taintEffects[t.Key]
		return known && t.Effect == effect && slices.Contains(st.AppliedTaints, t.Key)
	}
	if slices.ContainsFunc(node.Spec.Taints, ours) {
		if err := r.writeTaints(ctx, s, node, slices.DeleteFunc(slices.Clone(node.Spec.Taints), ours)); err != nil {
			if apierrors.IsNotFound(err) {
				st.AppliedTaints = nil
				return nil
			}
			return fmt.Errorf("removing taints %v from node %s: %w", st.AppliedTaints, node.Name, err)
		}
		s.log.Info("Removed taints from node", "node", node.Name, "taints", st.AppliedTaints)
	}
	st.AppliedTaints = nil
	return nil
}

// writeTaints sets the node's taints with an update guarded by the resourceVersion it was read at: a Node
// that changed meanwhile is read again on the next reconcile, not overwritten. An update, not a patch: the
// API server takes it in protobuf and stores it as it is, where a merge patch makes it encode the stored
// Node to JSON, apply the patch and decode the result (half of what a taint cost it in a wave of power
// cycles). The cached copy lacks what slimNode drops (managed fields, images, volumes): the API server
// keeps a Node's status and managed fields from the stored object when an update leaves them out.
func (r *RemediationReconciler) writeTaints(ctx context.Context, s *scope, node *corev1.Node, taints []corev1.Taint) error {
	node.Spec.Taints = taints
	if err := r.opts.Client.Update(ctx, node); err != nil {
		s.nodeRead = false // read it again next time
		return err
	}
	return nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
