package powercycle

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// ensureTaints puts taints on the node, in one update. A taint the node already has is left alone; one we
// add is first recorded in status.appliedTaints (durably, by the status write that records whatever else
// is pending), so cleanup after a restart still knows to remove it, and is listed in the node's
// AnnotationAppliedTaints by the update that adds it, so that whichever request of the node ends last
// removes it, whoever added it. The status is recorded even when the node needs nothing, or is gone (a
// node that is gone has nothing to taint).
func (r *RemediationReconciler) ensureTaints(ctx context.Context, s *scope, taints ...corev1.Taint) error {
	node, missing, err := r.claimTaints(ctx, s, taints...)
	if err != nil {
		return err
	}
	if err := r.persist(ctx, s); err != nil || s.abandoned || len(missing) == 0 {
		return err
	}
	keys := appliedTaintKeys(node)
	for _, t := range missing {
		keys = append(keys, t.Key)
	}
	setAppliedTaintKeys(node, keys)
	if err := r.writeTaints(ctx, s, node, append(slices.Clone(node.Spec.Taints), missing...)); err != nil {
		return ignoreNotFound(fmt.Errorf("tainting node %s: %w", node.Name, err))
	}
	for _, t := range missing {
		s.log.Info("Tainted node", "node", node.Name, "taint", t.Key, "effect", t.Effect)
		switch t.Key {
		case v1alpha1.TaintRemediation:
			r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventNodeCordoned, ActionPowerCycle,
				"%s:%s: no new pods while it is remediated", t.Key, t.Effect)
		case v1alpha1.TaintOutOfService:
			r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventOutOfServiceTaintAdded, ActionPowerCycle,
				"%s=%s:%s: Kubernetes moves its pods and volumes", t.Key, t.Value, t.Effect)
		}
	}
	return nil
}

// claimTaints claims each of taints the node lacks, or has from another of our remediations (see
// claimTaint), and returns the node and the taints it lacks; a node that is gone has none to claim.
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

// claimTaint counts taint as ours in status.appliedTaints (not yet recorded) and reports whether the node
// still needs it. A taint the node has already is ours only when the node's AnnotationAppliedTaints says
// metalheal added it (an earlier remediation of the node, which this one carries on from); one the node
// had before any of ours (an administrator's) is not. A taint claimed before is not claimed again.
func claimTaint(s *scope, node *corev1.Node, taint corev1.Taint) bool {
	missing := !hasTaint(node.Spec.Taints, taint.Key, taint.Effect)
	if !missing && !slices.Contains(appliedTaintKeys(node), taint.Key) {
		return false
	}
	if st := s.status(); !slices.Contains(st.AppliedTaints, taint.Key) {
		st.AppliedTaints = append(st.AppliedTaints, taint.Key)
	}
	return missing
}

// removeOurTaints removes from the node metalheal's taints: those the node's AnnotationAppliedTaints lists
// (added by any remediation of the node) and those this remediation recorded, then forgets them.
func (r *RemediationReconciler) removeOurTaints(ctx context.Context, s *scope) error {
	return r.removeTaints(ctx, s, nil)
}

// removeTaints is removeOurTaints that also removes the taints in also (those recorded by the other
// requests of the node that end with this one). The node's AnnotationAppliedTaints goes in the same
// update. A taint of ours is matched by key and effect: an administrator's taint of another effect stays.
func (r *RemediationReconciler) removeTaints(ctx context.Context, s *scope, also []string) error {
	st := s.status()
	node, err := r.getNode(ctx, s)
	if apierrors.IsNotFound(err) {
		st.AppliedTaints = nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node %s to untaint it: %w", st.NodeName, err)
	}
	keys := ourTaintKeys(node, st.AppliedTaints, also)
	_, annotated := node.Annotations[v1alpha1.AnnotationAppliedTaints]
	ours := func(t corev1.Taint) bool { return isOurTaint(t, keys) }
	if tainted := slices.ContainsFunc(node.Spec.Taints, ours); annotated || tainted {
		delete(node.Annotations, v1alpha1.AnnotationAppliedTaints)
		if err := r.writeTaints(ctx, s, node, slices.DeleteFunc(slices.Clone(node.Spec.Taints), ours)); err != nil {
			if apierrors.IsNotFound(err) {
				st.AppliedTaints = nil
				return nil
			}
			return fmt.Errorf("removing taints %v from node %s: %w", keys, node.Name, err)
		}
		s.log.Info("Removed taints from node", "node", node.Name, "taints", keys)
		if tainted { // an annotation alone is no taint of the story
			r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventTaintsRemoved, ActionCleanUp,
				"the remediator removed the taints it added")
		}
	}
	st.AppliedTaints = nil
	return nil
}

// ourTaintKeys are the keys of metalheal's taints on node: those its AnnotationAppliedTaints lists, and
// those recorded in the status of the requests in records.
func ourTaintKeys(node *corev1.Node, records ...[]string) []string {
	keys := appliedTaintKeys(node)
	for _, r := range records {
		keys = append(keys, r...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// isOurTaint reports whether t is one of the taints a remediation adds, by one of keys.
func isOurTaint(t corev1.Taint, keys []string) bool {
	effect, known := taintEffects[t.Key]
	return known && t.Effect == effect && slices.Contains(keys, t.Key)
}

// markedByUs reports whether node still carries a taint of metalheal's (see ourTaintKeys): a remediation
// of the node holds it, and may have left its host off. The remediation taint goes on before the first
// power-off request, and comes off only when the host is back or the node is restored.
func markedByUs(node *corev1.Node, records ...[]string) bool {
	keys := ourTaintKeys(node, records...)
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return isOurTaint(t, keys) })
}

// appliedTaintKeys reads the node's AnnotationAppliedTaints.
func appliedTaintKeys(node *corev1.Node) []string {
	v := node.Annotations[v1alpha1.AnnotationAppliedTaints]
	if v == "" {
		return nil
	}
	var keys []string
	for k := range strings.SplitSeq(v, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// setAppliedTaintKeys writes keys, sorted and without duplicates, to the node's AnnotationAppliedTaints.
func setAppliedTaintKeys(node *corev1.Node, keys []string) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[v1alpha1.AnnotationAppliedTaints] = strings.Join(keys, ",")
}

// writeTaints sets the node's taints with an update guarded by the resourceVersion it was read at: a Node
// that changed meanwhile is read again on the next reconcile, not overwritten. An update, not a patch: the
// API server takes it in protobuf and stores it as it is, where a merge patch makes it encode the stored
// Node to JSON, apply the patch and decode the result (half of what a taint cost it in a wave of power
// cycles). The cached copy lacks what nodecache.Slim drops (managed fields, images, volumes): the API server
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
