package powercycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/leases"
)

// leaseTakeOver returns holder when the request may take the node lease over from it (see takeOverFrom):
// a PowerCycleRemediation of the same node that was timed out, is being deleted, or is gone. The lease
// then changes hands in one update (leases.Manager.RequestLeaseFromHolders), never free in between.
// Nothing otherwise, and nothing when the cache cannot tell (logged): waiting for a lease is always safe.
func (h *hostClaim) leaseTakeOver(ctx context.Context, s *scope, holder leases.Holder) []leases.Holder {
	name, ok := strings.CutPrefix(holder.Identity, remediationHolderPrefix)
	if !ok || (name == s.pcr.Name && holder.Namespace == s.pcr.Namespace) {
		return nil // no request's, or this one's: nothing to take over, and no list to read
	}
	siblings, err := h.siblings(ctx, s)
	if err != nil {
		s.log.Error(err, "Reading the remediations of the node to take its lease over")
		return nil
	}
	var lookupErr error
	known := func(name, namespace string) bool {
		found, err := h.requestNamed(ctx, name, namespace, s.pcr.UID)
		lookupErr = err
		return found || err != nil
	}
	if !takeOverFrom(holder, s.pcr, siblings, known) {
		if lookupErr != nil {
			s.log.Error(lookupErr, "Looking for the holder of the node lease", "holder", holder.String())
		}
		return nil
	}
	s.log.V(2).Info("Taking the node lease over from a request that let go of the node", "holder", holder.String())
	return []leases.Holder{holder}
}

// awaitHandOver holds a request that has not started yet while another request of its node still lets
// go of it (see busySibling): a timed-out one landing its power request, or a deleted one handing over or
// restoring. The sibling's change of state brings the next reconcile (remediationsBesides); the returned
// wait is a backstop. Both of those waits are bounded by the sibling's own.
func (h *hostClaim) awaitHandOver(ctx context.Context, s *scope) (time.Duration, error) {
	if p := s.status().Phase; p != "" && p != v1alpha1.PhasePending {
		return 0, nil
	}
	if s.status().NodeName == "" && s.pcr.Annotations[v1alpha1.AnnotationNodeName] == "" && ownerMachine(s.pcr) != nil {
		// A Cluster API request is indexed by its node only once it is resolved (pending would do it next).
		name, err := h.nodes.resolveNodeName(ctx, s.pcr)
		if err != nil {
			return 0, err
		}
		s.status().NodeName = name
	}
	siblings, err := h.siblings(ctx, s)
	if err != nil {
		return 0, err
	}
	busy := busySibling(siblings)
	if busy == nil {
		return 0, nil
	}
	s.log.V(2).Info("Waiting for another request of the node to let go of it", "other", klog.KObj(busy))
	return h.pollInterval, nil
}

// holdOwnLease renews the node lease of a request that handed its host over, for as long as it holds it
// (it takes no lease it does not hold): the host stays held, fenced or not, until the next request takes
// the lease over or the last request of the node is deleted. It says when to look again.
func (h *hostClaim) holdOwnLease(ctx context.Context, s *scope) (ctrl.Result, error) {
	s.leaseRecheck = 0
	nodeName := s.status().NodeName
	if nodeName == "" {
		return ctrl.Result{}, nil
	}
	m, err := h.leaseManager(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	holder, valid, until, err := m.HolderOf(ctx, nodeName)
	if err != nil || !m.Holds(holder) {
		return ctrl.Result{}, err
	}
	half := h.leaseDuration / 2
	if valid && until.Sub(s.now) > half {
		return ctrl.Result{RequeueAfter: untilDeadline(until.Add(-half), s.now)}, nil
	}
	node, err := h.nodes.getNode(ctx, s)
	if err != nil {
		return ctrl.Result{}, ignoreNotFound(err)
	}
	var held *leases.AlreadyHeldError
	if err := m.RequestLease(ctx, node, h.leaseDuration); errors.As(err, &held) {
		return ctrl.Result{}, nil // taken over meanwhile
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("renewing the node lease of %s: %w", nodeName, err)
	}
	return ctrl.Result{RequeueAfter: h.leaseDuration - half}, nil
}

// remediationsBesides maps a PowerCycleRemediation to the other requests of its node: what a request
// does with its node depends on them (a deleted one restores only as the last; one that has not started
// waits for a sibling letting go; the node lease is taken over from a sibling that let go of it).
func (h *hostClaim) remediationsBesides(ctx context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*v1alpha1.PowerCycleRemediation)
	if !ok {
		return nil
	}
	return h.remediationsFor(ctx, remediationNodeKey(p), func(other *v1alpha1.PowerCycleRemediation) bool {
		return other.UID != p.UID
	})
}

// handOverChangePredicate lets through the changes of a request that its siblings decide by: it is
// deleted, marked timed out, lets go of its finalizer, changes its Processing condition (hands the host
// over: True to False) or is gone. Its other changes are news to itself only.
func handOverChangePredicate() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.PowerCycleRemediation)
			n, ok2 := e.ObjectNew.(*v1alpha1.PowerCycleRemediation)
			if !ok1 || !ok2 {
				return false
			}
			return deleting(o) != deleting(n) || timedOutMark(o) != timedOutMark(n) || holdsNode(o) != holdsNode(n) ||
				processingStatus(o) != processingStatus(n) || handedOver(o) != handedOver(n) ||
				remediationNodeKey(o) != remediationNodeKey(n)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// processingStatus is the status of a request's Processing condition ("" without one).
func processingStatus(p *v1alpha1.PowerCycleRemediation) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionProcessing); c != nil {
		return c.Status
	}
	return ""
}
