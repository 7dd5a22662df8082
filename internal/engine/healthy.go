package engine

import (
	"context"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// HealthyHold decides whether a target healthy again keeps its remediation requests: for healthyDelay
// after it was first seen healthy (since), so that a flapping Node is not released too early; for ever
// while the delay is negative, until a person confirms the Node healthy (confirmed: the Node carries
// v1alpha1.AnnotationConfirmedHealthy, medik8s' rule), which also ends a positive delay early. until is
// when a positive delay ends (zero otherwise).
func HealthyHold(since time.Time, delay time.Duration, confirmed bool, now time.Time) (hold bool, until time.Time) {
	switch {
	case delay == 0 || confirmed:
		return false, time.Time{}
	case delay < 0:
		return true, time.Time{}
	}
	until = since.Add(delay)
	return now.Before(until), until
}

// Confirmed reports whether a person confirmed the Node healthy (v1alpha1.AnnotationConfirmedHealthy).
func Confirmed(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	_, ok := n.Annotations[v1alpha1.AnnotationConfirmedHealthy]
	return ok
}

// NodeChanged reports whether a Node update can change a check's decision: its labels (the control-plane
// role, the exclusion label, a selector's), the type, status or transition time of a condition, its
// deletion, or a person's confirmation that it is healthy. Heartbeats (lastHeartbeatTime, every few
// minutes per Node) change none of them, so a quiet cluster of thousands of Nodes costs no reconcile.
func NodeChanged(old, cur *corev1.Node) bool {
	return !maps.Equal(old.Labels, cur.Labels) || conditionsChanged(old.Status.Conditions, cur.Status.Conditions) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) || Confirmed(old) != Confirmed(cur)
}

func conditionsChanged(a, b []corev1.NodeCondition) bool {
	if len(a) != len(b) {
		return true
	}
	type key struct {
		status corev1.ConditionStatus
		since  int64
	}
	seen := make(map[corev1.NodeConditionType]key, len(a))
	for _, c := range a {
		seen[c.Type] = key{c.Status, c.LastTransitionTime.UnixNano()}
	}
	for _, c := range b {
		if k, ok := seen[c.Type]; !ok || k != (key{c.Status, c.LastTransitionTime.UnixNano()}) {
			return true
		}
	}
	return false
}

// Unconfirm removes a person's confirmation (v1alpha1.AnnotationConfirmedHealthy) from the Node once the
// remediation it confirmed is over, so that it never confirms the next one. It updates the Node under
// its resourceVersion (the manager may update Nodes, not patch them), reading it again after a conflict.
// A Node gone, or without the annotation, is nothing to do.
func Unconfirm(ctx context.Context, c client.Client, node string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		if !Confirmed(n) {
			return nil
		}
		delete(n.Annotations, v1alpha1.AnnotationConfirmedHealthy)
		return c.Update(ctx, n)
	})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing %s from node %s: %w", v1alpha1.AnnotationConfirmedHealthy, node, err)
	}
	return nil
}

// LeaseChanged passes the node lease events, in the lease namespace, that change who holds a lease: a
// check that skipped a Node for a lease someone else held, or for another control-plane Node's, looks
// again when it is let go. Renewals change no holder and pass nothing.
func LeaseChanged(namespace string) predicate.Funcs {
	inNS := func(o client.Object) bool { return o.GetNamespace() == namespace }
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return inNS(e.Object) },
		DeleteFunc: func(e event.DeleteEvent) bool { return inNS(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*coordinationv1.Lease)
			n, okN := e.ObjectNew.(*coordinationv1.Lease)
			if !okO || !okN || !inNS(n) {
				return false
			}
			return ptr.Deref(o.Spec.HolderIdentity, "") != ptr.Deref(n.Spec.HolderIdentity, "")
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
