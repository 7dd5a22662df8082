package powercycle

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// Which taints on a Node are metalheal's is recorded only in the status of the Node's requests
// (status.appliedTaints), which only the remediator writes (and whoever may write a request's status: its
// health check). Nothing on the Node itself is taken as a record: its annotations and taints are written
// by many (the kubelet, DaemonSets, admins), and a record there would let any of them make metalheal
// remove a taint it never added, an administrator's out-of-service taint say. A record goes from request
// to request of one Node with the Node: one that carries on from another claims the taints the other
// recorded (claimTaint), and one deleted while another takes its Node over passes its record on
// (passRecord).

// ensureTaints puts taints on the node, in one update. A taint the node already has is left alone; one we
// add is first recorded in status.appliedTaints (durably, by the status write that records whatever else
// is pending), so cleanup after a restart still knows to remove it; whichever request of the node ends
// last removes it, whoever added it. The status is recorded even when the node needs nothing, or is gone
// (a node that is gone has nothing to taint).
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
// claimTaint), and returns the node and the taints it lacks; a node that is gone has none to claim. The
// other requests' records are read only for a taint the node has and this request has not claimed.
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
	var records [][]string
	var read bool
	var missing []corev1.Taint
	for _, t := range taints {
		if !read && hasTaint(node.Spec.Taints, t.Key, t.Effect) && !slices.Contains(s.status().AppliedTaints, t.Key) {
			if records, err = r.siblingRecords(ctx, s); err != nil {
				return nil, nil, err
			}
			read = true
		}
		if claimTaint(s, node, t, records) {
			missing = append(missing, t)
		}
	}
	return node, missing, nil
}

// siblingRecords are the records of the taints metalheal added (status.appliedTaints) of the other
// requests of the node that still hold it (see siblings and holdsNode).
func (r *RemediationReconciler) siblingRecords(ctx context.Context, s *scope) ([][]string, error) {
	siblings, err := r.claim.siblings(ctx, s)
	if err != nil {
		return nil, err
	}
	var records [][]string
	for i := range siblings {
		if p := &siblings[i]; holdsNode(p) && len(p.Status.AppliedTaints) > 0 {
			records = append(records, p.Status.AppliedTaints)
		}
	}
	return records, nil
}

// claimTaint counts taint as ours in status.appliedTaints (not yet recorded) and reports whether the node
// still needs it. A taint the node has already is ours only when this request recorded it, or another
// request of the node that still holds it did (records: an earlier remediation of the node, which this
// one carries on from); one the node had before any of ours (an administrator's) is not, whatever the
// Node says. A taint claimed before is not claimed again.
func claimTaint(s *scope, node *corev1.Node, taint corev1.Taint, records [][]string) bool {
	st := s.status()
	missing := !hasTaint(node.Spec.Taints, taint.Key, taint.Effect)
	recorded := slices.Contains(st.AppliedTaints, taint.Key) ||
		slices.ContainsFunc(records, func(keys []string) bool { return slices.Contains(keys, taint.Key) })
	if !missing && !recorded {
		return false
	}
	if !slices.Contains(st.AppliedTaints, taint.Key) {
		st.AppliedTaints = append(st.AppliedTaints, taint.Key)
	}
	return missing
}

// passRecord hands this request's record of the taints metalheal added to to, the request of the node
// that it is deleted in favour of, by adding it to to's status.appliedTaints before this request goes:
// the record lives only in the requests' status, and the request that ends last removes what it lists.
// retry is true when the write lost a race (to changed since the cache showed it, or is gone): the next
// reconcile decides again.
func (r *RemediationReconciler) passRecord(ctx context.Context, s *scope, to *v1alpha1.PowerCycleRemediation) (retry bool, err error) {
	mine := s.status().AppliedTaints
	if !slices.ContainsFunc(mine, func(k string) bool { return !slices.Contains(to.Status.AppliedTaints, k) }) {
		return false, nil
	}
	p := to.DeepCopy()
	for _, k := range mine {
		if !slices.Contains(p.Status.AppliedTaints, k) {
			p.Status.AppliedTaints = append(p.Status.AppliedTaints, k)
		}
	}
	if err := r.opts.Client.Status().Update(ctx, p); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			s.log.V(2).Info("Passing the record of the node's taints lost a race; trying again", "to", klog.KObj(to), "error", err.Error())
			return true, nil
		}
		return false, fmt.Errorf("passing the record of taints %v of node %s to %s/%s: %w", mine, s.status().NodeName, to.Namespace, to.Name, err)
	}
	s.log.V(2).Info("Passed the record of the node's taints on", "to", klog.KObj(to), "taints", mine)
	return false, nil
}

// removeOurTaints removes from the node the taints this remediation recorded (status.appliedTaints), then
// forgets them.
func (r *RemediationReconciler) removeOurTaints(ctx context.Context, s *scope) error {
	return r.removeTaints(ctx, s, nil)
}

// removeTaints is removeOurTaints that also removes the taints in also (those recorded by the other
// requests of the node that end with this one). A taint of ours is matched by key and effect: an
// administrator's taint of another effect stays. The annotation earlier versions kept on the Node
// (AnnotationAppliedTaints) is no record; it is dropped by the update that untaints the Node, if any.
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
	keys := ourTaintKeys(st.AppliedTaints, also)
	ours := func(t corev1.Taint) bool { return isOurTaint(t, keys) }
	if slices.ContainsFunc(node.Spec.Taints, ours) {
		delete(node.Annotations, v1alpha1.AnnotationAppliedTaints)
		if err := r.writeTaints(ctx, s, node, slices.DeleteFunc(slices.Clone(node.Spec.Taints), ours)); err != nil {
			if apierrors.IsNotFound(err) {
				st.AppliedTaints = nil
				return nil
			}
			return fmt.Errorf("removing taints %v from node %s: %w", keys, node.Name, err)
		}
		s.log.Info("Removed taints from node", "node", node.Name, "taints", keys)
		r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventTaintsRemoved, ActionCleanUp,
			"the remediator removed the taints it added")
	}
	st.AppliedTaints = nil
	return nil
}

// ourTaintKeys are the keys of metalheal's taints recorded by the requests in records, sorted.
func ourTaintKeys(records ...[]string) []string {
	keys := slices.Concat(records...)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// isOurTaint reports whether t is one of the taints a remediation adds, by one of keys.
func isOurTaint(t corev1.Taint, keys []string) bool {
	effect, known := taintEffects[t.Key]
	return known && t.Effect == effect && slices.Contains(keys, t.Key)
}

// markedByUs reports whether node still carries a taint that one of records says metalheal added: a
// remediation of the node holds it, and may have left its host off. The remediation taint goes on before
// the first power-off request, and comes off only when the host is back or the node is restored.
func markedByUs(node *corev1.Node, records ...[]string) bool {
	keys := ourTaintKeys(records...)
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return isOurTaint(t, keys) })
}

// writeTaints sets the node's taints with an update guarded by the resourceVersion it was read at: a Node
// that changed meanwhile is read again on the next reconcile, not overwritten. An update, not a patch: the
// API server takes it in protobuf and stores it as it is, where a merge patch makes it encode the stored
// Node to JSON, apply the patch and decode the result (half of what a taint cost it in a wave of power
// cycles). The cached copy lacks what nodecache.Slim drops (managed fields, images, volumes): the API server
// keeps a Node's status and managed fields from the stored object when an update leaves them out.
func (r *RemediationReconciler) writeTaints(ctx context.Context, s *scope, node *corev1.Node, taints []corev1.Taint) error {
	node.Spec.Taints = taints
	nc, err := r.nodeClusterOf(ctx, s)
	if err != nil {
		return err
	}
	if err := nc.writer.Update(ctx, node); err != nil {
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
