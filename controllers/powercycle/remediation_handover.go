package powercycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/leases"
)

// One hand per host. Several PowerCycleRemediations may name the same Node: a health check's escalation
// steps (medik8s NodeHealthCheck creates the next one while the previous is still being cleaned up),
// or two checks. At most one acts on the host at a time, and none undoes what another relies on:
//
//   - a request its health check marked timed out stops at a safe point (a power request in flight is
//     landed, a host confirmed off is fenced) and hands the host over as it is, reporting
//     Processing=False, HandedOver; it restores nothing (handOver);
//   - a deleted request restores the Node (power, taints, lease) only when it is the last remediation of
//     the Node; one deleted while another request of the Node is not being deleted leaves the Node to it
//     as it is (release, in remediation_cleanup.go);
//   - a request that has not started waits while a sibling is still letting go (awaitHandOver), and takes
//     the node lease over from a sibling that let go of it (leaseTakeOver): no moment where it is free;
//   - the taints belong to the Node's remediations together (their status.appliedTaints, passed on with
//     the Node: see remediation_node.go): they stay from the first confirmed power-off until the last
//     remediation of the Node ends;
//   - a request the remediator never acts on (actsOn) is none of these: not a sibling, not a holder.

// siblings returns the other PowerCycleRemediations of the request's node that the remediator acts on
// (see actsOn: a refused request, or one in a namespace not trusted, is nobody's sibling), read from the
// cache's node index without copying: read them, never change them. Clean-up decides by them, so a failed
// read is an error, never "none"; a client without the index (one that reads the API server itself) lists
// them all and picks.
func (r *RemediationReconciler) siblings(ctx context.Context, s *scope) ([]v1alpha1.PowerCycleRemediation, error) {
	node := remediationNodeKey(s.pcr)
	var list v1alpha1.PowerCycleRemediationList
	var items []v1alpha1.PowerCycleRemediation
	if err := r.opts.Client.List(ctx, &list, client.MatchingFields{remediationNodeIndex: node}, client.UnsafeDisableDeepCopy); err == nil {
		items = list.Items
	} else {
		var all v1alpha1.PowerCycleRemediationList
		if err2 := r.opts.Client.List(ctx, &all, client.UnsafeDisableDeepCopy); err2 != nil {
			return nil, fmt.Errorf("listing the remediations of node %s: %w", node, errors.Join(err, err2))
		}
		for i := range all.Items {
			if remediationNodeKey(&all.Items[i]) == node {
				items = append(items, all.Items[i])
			}
		}
	}
	return slices.DeleteFunc(items, func(p v1alpha1.PowerCycleRemediation) bool { return p.UID == s.pcr.UID || !r.actsOn(&p) }), nil
}

// requestNamed reports whether a PowerCycleRemediation the remediator acts on (see actsOn) exists in the
// cache by that name, in namespace (any, for ""), on any node, besides the request with UID except. Rare:
// only for a lease held by a request that is not among the node's.
func (r *RemediationReconciler) requestNamed(ctx context.Context, name, namespace string, except types.UID) (bool, error) {
	var all v1alpha1.PowerCycleRemediationList
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := r.opts.Client.List(ctx, &all, opts...); err != nil {
		return false, fmt.Errorf("listing remediations: %w", err)
	}
	return slices.ContainsFunc(all.Items, func(p v1alpha1.PowerCycleRemediation) bool {
		return p.Name == name && p.UID != except && r.actsOn(&p)
	}), nil
}

// leaseTakeOver returns holder when the request may take the node lease over from it (see takeOverFrom):
// a PowerCycleRemediation of the same node that was timed out, is being deleted, or is gone. The lease
// then changes hands in one update (leases.Manager.RequestLeaseFromHolders), never free in between.
// Nothing otherwise, and nothing when the cache cannot tell (logged): waiting for a lease is always safe.
func (r *RemediationReconciler) leaseTakeOver(ctx context.Context, s *scope, holder leases.Holder) []leases.Holder {
	name, ok := strings.CutPrefix(holder.Identity, remediationHolderPrefix)
	if !ok || (name == s.pcr.Name && holder.Namespace == s.pcr.Namespace) {
		return nil // no request's, or this one's: nothing to take over, and no list to read
	}
	siblings, err := r.siblings(ctx, s)
	if err != nil {
		s.log.Error(err, "Reading the remediations of the node to take its lease over")
		return nil
	}
	var lookupErr error
	known := func(name, namespace string) bool {
		found, err := r.requestNamed(ctx, name, namespace, s.pcr.UID)
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
func (r *RemediationReconciler) awaitHandOver(ctx context.Context, s *scope) (time.Duration, error) {
	if p := s.status().Phase; p != "" && p != v1alpha1.PhasePending {
		return 0, nil
	}
	if s.status().NodeName == "" && s.pcr.Annotations[v1alpha1.AnnotationNodeName] == "" && ownerMachine(s.pcr) != nil {
		// A Cluster API request is indexed by its node only once it is resolved (pending would do it next).
		name, err := r.resolveNodeName(ctx, s.pcr)
		if err != nil {
			return 0, err
		}
		s.status().NodeName = name
	}
	siblings, err := r.siblings(ctx, s)
	if err != nil {
		return 0, err
	}
	busy := busySibling(siblings)
	if busy == nil {
		return 0, nil
	}
	s.log.V(2).Info("Waiting for another request of the node to let go of it", "other", klog.KObj(busy))
	return r.opts.PowerPollInterval, nil
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
		return r.holdOwnLease(ctx, s)
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
	return r.holdOwnLease(ctx, s)
}

// settle lands the power request in flight, if any, before a timed-out request hands the host over: it
// polls the BMC until it reads the requested state, or until the phase's deadline for it (then note says
// what was left unconfirmed). A host confirmed off, then or before (PoweredOff, whose fence may not be on
// yet after a restart), is fenced. done is false while it waits; res says when to look again.
func (r *RemediationReconciler) settle(ctx context.Context, s *scope) (note string, done bool, res ctrl.Result, err error) {
	st := s.status()
	confirmedOff := st.Phase == v1alpha1.PhasePoweredOff
	if req := st.PowerRequest; req != nil {
		verb, want, deadline := "power-off", bmc.PowerStateOff, s.phaseStart().Add(s.spec.powerOffTimeout)
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

// readPowerFor reads the host's power through the node's BMC (see readPower).
func (r *RemediationReconciler) readPowerFor(ctx context.Context, s *scope) (bmc.PowerState, error) {
	d, err := r.driverFor(ctx, s)
	if err != nil {
		return "", err
	}
	return r.readPower(ctx, s, d)
}

// holdOwnLease renews the node lease of a request that handed its host over, for as long as it holds it
// (it takes no lease it does not hold): the host stays held, fenced or not, until the next request takes
// the lease over or the last request of the node is deleted. It says when to look again.
func (r *RemediationReconciler) holdOwnLease(ctx context.Context, s *scope) (ctrl.Result, error) {
	s.leaseRecheck = 0
	nodeName := s.status().NodeName
	if nodeName == "" {
		return ctrl.Result{}, nil
	}
	m, err := r.leaseManager(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	holder, valid, until, err := m.HolderOf(ctx, nodeName)
	if err != nil || !m.Holds(holder) {
		return ctrl.Result{}, err
	}
	half := r.opts.LeaseDuration / 2
	if valid && until.Sub(s.now) > half {
		return ctrl.Result{RequeueAfter: untilDeadline(until.Add(-half), s.now)}, nil
	}
	node, err := r.getNode(ctx, s)
	if err != nil {
		return ctrl.Result{}, ignoreNotFound(err)
	}
	var held *leases.AlreadyHeldError
	if err := m.RequestLease(ctx, node, r.opts.LeaseDuration); errors.As(err, &held) {
		return ctrl.Result{}, nil // taken over meanwhile
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("renewing the node lease of %s: %w", nodeName, err)
	}
	return ctrl.Result{RequeueAfter: r.opts.LeaseDuration - half}, nil
}

// remediationsBesides maps a PowerCycleRemediation to the other requests of its node: what a request
// does with its node depends on them (a deleted one restores only as the last; one that has not started
// waits for a sibling letting go; the node lease is taken over from a sibling that let go of it).
func (r *RemediationReconciler) remediationsBesides(ctx context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*v1alpha1.PowerCycleRemediation)
	if !ok {
		return nil
	}
	return r.remediationsFor(ctx, remediationNodeKey(p), func(other *v1alpha1.PowerCycleRemediation) bool {
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
