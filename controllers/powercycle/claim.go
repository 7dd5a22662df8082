package powercycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// One hand per host. Several PowerCycleRemediations may name the same Node: a health check's escalation
// steps (medik8s NodeHealthCheck creates the next one while the previous is still being cleaned up),
// or two checks. At most one acts on the host at a time, and none undoes what another relies on:
//
//   - a request its health check marked timed out stops at a safe point (a power request in flight is
//     landed, a host confirmed off is fenced) and hands the host over as it is, reporting
//     Processing=False, HandedOver; it restores nothing (handOver, in remediation_cleanup.go);
//   - a deleted request restores the Node (power, taints, lease) only when it is the last remediation of
//     the Node; one deleted while another request of the Node is not being deleted leaves the Node to it
//     as it is (release, in remediation_cleanup.go);
//   - a request that has not started waits while a sibling is still letting go (awaitHandOver), and takes
//     the node lease over from a sibling that let go of it (leaseTakeOver): no moment where it is free;
//     one that handed its host over keeps renewing the lease it holds until then (holdOwnLease);
//   - the taints belong to the Node's remediations together (their status.appliedTaints, passed on with
//     the Node: see remediation_node.go): they stay from the first confirmed power-off until the last
//     remediation of the Node ends;
//   - a request the remediator never acts on (actsOn) is none of these: not a sibling, not a holder.

// hostClaim is the remediator's hold on hosts: which requests of a Node count (actsOn), which of them may
// act on it and when (the hand-over: claim_handover.go), and the node lease that tells everyone else
// (node maintenance, another health check, medik8s' remediators) that the Node is being remediated
// (claim_lease.go). The reconciler asks it at the points where a request would take, keep or let go of
// its host. It reads the requests of a Node from the cache's node index and writes only node leases, in
// the Node's own cluster (and the lease namespace, in a workload cluster without one); what it learns of
// a request goes into the request's scope (its node's name, the LeaseAcquired condition), which the
// reconciler records.
type hostClaim struct {
	// client reads PowerCycleRemediations (the manager's cached client, with remediationNodeIndex).
	client client.Client
	// trusted are the namespaces whose requests the remediator acts on (shared with the reconciler's
	// trust gate: see actsOn).
	trusted map[string]bool
	// nodes finds a request's Node, and the cluster where it and its node lease live.
	nodes nodeFinder
	// clock is the node lease managers' time.
	clock clock.Clock
	// recorder emits the lease's events on the requests.
	recorder events.EventRecorder
	// leaseNamespace holds the node leases; leaseDuration is how long one is taken for.
	leaseNamespace string
	leaseDuration  time.Duration
	// pollInterval is the backstop of a wait for another request of the Node to let go of it.
	pollInterval time.Duration
}

// nodeFinder finds a request's Node and the cluster it lives in, once per reconcile (see scope).
// *RemediationReconciler is one.
type nodeFinder interface {
	// resolveNodeName names the Node of a request (a Cluster API request's, through its Machine).
	resolveNodeName(ctx context.Context, pcr *v1alpha1.PowerCycleRemediation) (string, error)
	// getNode reads the request's Node in its cluster.
	getNode(ctx context.Context, s *scope) (*corev1.Node, error)
	// nodeClusterOf is the cluster of the request's Node.
	nodeClusterOf(ctx context.Context, s *scope) (*nodeCluster, error)
}

// actsOn reports whether the remediator acts, or may yet act, on request p: p is in a namespace it
// trusts and was not refused for good (see refused). A request it never acts on holds nothing and must
// not stand in the way of those it does: it is nobody's sibling (so a deleted request never hands its
// Node over to it), it maps no event to others, and a node lease is never kept for it. Every decision
// that reads the other requests of a Node, or looks a lease's holder up, reads them through this.
func (h *hostClaim) actsOn(p *v1alpha1.PowerCycleRemediation) bool {
	return h.trusted[p.Namespace] && !refused(p)
}

// remediationsOn returns the remediations acting on a node (see actsOn), read from the cache's index
// without copying: read them, never change them. None when the cache cannot be read (logged).
func (h *hostClaim) remediationsOn(ctx context.Context, nodeName string) []v1alpha1.PowerCycleRemediation {
	var list v1alpha1.PowerCycleRemediationList
	if err := h.client.List(ctx, &list, client.MatchingFields{remediationNodeIndex: nodeName}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the remediations of a node", "node", nodeName)
		return nil
	}
	return slices.DeleteFunc(list.Items, func(p v1alpha1.PowerCycleRemediation) bool { return !h.actsOn(&p) })
}

// remediationsFor maps a node to the remediations acting on it, those keep lets through (all when keep is
// nil).
func (h *hostClaim) remediationsFor(ctx context.Context, nodeName string, keep func(*v1alpha1.PowerCycleRemediation) bool) []reconcile.Request {
	items := h.remediationsOn(ctx, nodeName)
	reqs := make([]reconcile.Request, 0, len(items))
	for i := range items {
		if p := &items[i]; keep == nil || keep(p) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
	}
	return reqs
}

// remediating reports whether a request is at work on the host (see Remediating).
func (h *hostClaim) remediating(ctx context.Context, host string) bool {
	items := h.remediationsOn(ctx, host)
	for i := range items {
		p := &items[i]
		if !terminal(p.Status.Phase) || (!p.DeletionTimestamp.IsZero() && slices.Contains(p.Finalizers, v1alpha1.FinalizerPowerCycle)) {
			return true
		}
	}
	return false
}

// siblings returns the other PowerCycleRemediations of the request's node that the remediator acts on
// (see actsOn: a refused request, or one in a namespace not trusted, is nobody's sibling), read from the
// cache's node index without copying: read them, never change them. Clean-up decides by them, so a failed
// read is an error, never "none"; a client without the index (one that reads the API server itself) lists
// them all and picks.
func (h *hostClaim) siblings(ctx context.Context, s *scope) ([]v1alpha1.PowerCycleRemediation, error) {
	node := remediationNodeKey(s.pcr)
	var list v1alpha1.PowerCycleRemediationList
	var items []v1alpha1.PowerCycleRemediation
	if err := h.client.List(ctx, &list, client.MatchingFields{remediationNodeIndex: node}, client.UnsafeDisableDeepCopy); err == nil {
		items = list.Items
	} else {
		var all v1alpha1.PowerCycleRemediationList
		if err2 := h.client.List(ctx, &all, client.UnsafeDisableDeepCopy); err2 != nil {
			return nil, fmt.Errorf("listing the remediations of node %s: %w", node, errors.Join(err, err2))
		}
		for i := range all.Items {
			if remediationNodeKey(&all.Items[i]) == node {
				items = append(items, all.Items[i])
			}
		}
	}
	return slices.DeleteFunc(items, func(p v1alpha1.PowerCycleRemediation) bool { return p.UID == s.pcr.UID || !h.actsOn(&p) }), nil
}

// requestNamed reports whether a PowerCycleRemediation the remediator acts on (see actsOn) exists in the
// cache by that name, in namespace (any, for ""), on any node, besides the request with UID except. Rare:
// only for a lease held by a request that is not among the node's.
func (h *hostClaim) requestNamed(ctx context.Context, name, namespace string, except types.UID) (bool, error) {
	var all v1alpha1.PowerCycleRemediationList
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := h.client.List(ctx, &all, opts...); err != nil {
		return false, fmt.Errorf("listing remediations: %w", err)
	}
	return slices.ContainsFunc(all.Items, func(p v1alpha1.PowerCycleRemediation) bool {
		return p.Name == name && p.UID != except && h.actsOn(&p)
	}), nil
}
