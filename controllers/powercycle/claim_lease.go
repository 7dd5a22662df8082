package powercycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// reasonLeaseHeldByOwner: the node lease is held by the health check that created the remediation
// (medik8s' NodeHealthCheck holds it as "NodeHealthCheck-<name>" for the remediators it starts,
// metalheal's as "NodeHealthCheck.remediation.metalheal.io-<name>").
const reasonLeaseHeldByOwner = "LeaseHeldByOwner"

// leaseManager is the node lease manager acting as this remediation: holder identity
// "PowerCycleRemediation-<name>", the form medik8s' peers and metalheal's health checks read (a check takes
// the lease over from the remediator of its own request by that identity), with the request's namespace
// recorded beside it on the Lease (leases.AnnotationHolderNamespace), which only the remediator reads: two
// requests of one name in two namespaces are two holders, so only one of them acts on the host.
// The lease lives in the Node's own cluster (see nodeClusterOf), in the lease namespace.
func (h *hostClaim) leaseManager(ctx context.Context, s *scope) (*leases.Manager, error) {
	return h.leaseManagerAs(ctx, s, leases.Holder{Identity: leases.HolderIdentity(remediationKind, s.pcr.Name), Namespace: s.pcr.Namespace})
}

// leaseManagerAs is the node lease manager acting as holder (a request this one takes the node over from).
func (h *hostClaim) leaseManagerAs(ctx context.Context, s *scope, holder leases.Holder) (*leases.Manager, error) {
	nc, err := h.nodes.nodeClusterOf(ctx, s)
	if err != nil {
		return nil, err
	}
	opts := []leases.Option{leases.WithNamespace(h.leaseNamespace), leases.WithLiveReader(nc.leaseLive),
		leases.WithHolderNamespace(holder.Namespace)}
	if nc.key.Name != "" {
		// A workload cluster made by Cluster API has no lease namespace: made there on first use.
		opts = append(opts, leases.WithNamespaceCreation())
	}
	return leases.NewManager(nc.leases, holder.Identity, h.clock, opts...)
}

// heldByText names the holder of a lease for a condition or an event: its identity, and "of another
// namespace" when that identity is this request's own (a request of the same name elsewhere; which
// namespace is not the requester's to learn).
func heldByText(m *leases.Manager, holder string) string {
	if holder == m.HolderIdentity() {
		return holder + " of another namespace"
	}
	return holder
}

// heldByOwner reports whether holder is one of the remediation's owners, which holds the node for the
// remediations it creates: "<Kind>-<name>" (medik8s' form), or "<Kind>.<group>-<name>" for metalheal's
// own kinds, which qualify their holder so as not to be taken for a medik8s check of the same name.
func heldByOwner(pcr *v1alpha1.PowerCycleRemediation, holder string) bool {
	for _, ref := range pcr.OwnerReferences {
		owner := leases.HolderIdentity(ref.Kind, ref.Name)
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && gv.Group == v1alpha1.GroupVersion.Group {
			owner = leases.QualifiedHolderIdentity(ref.Kind, gv.Group, ref.Name)
		}
		if holder == owner {
			return true
		}
	}
	return false
}

// ownerLeaseGrace is how long after its creation a request from a NodeHealthCheck waits for the check to
// take the node lease for it, before it takes the lease itself. A check may create the request first and
// take the lease right after (metalheal's does, so that detection waits for no other write); were the
// remediator to take it meanwhile, both would write the lease and one would find it taken, read it and
// take it over: three more lease requests per node, at the moment of a burst of failures.
const ownerLeaseGrace = 10 * time.Second

// awaitOwnerLease reports how long a request created by a NodeHealthCheck waits, before it has done
// anything, for the check to take the node lease for it: until the lease shows up in the cache (its watch
// event brings the next reconcile), ownerLeaseGrace after the request's creation at the latest. It
// returns 0 once the lease is held by the check or by this request, or by anyone else (pending reports
// that), for a request that has started already, or one from anything but a NodeHealthCheck.
func (h *hostClaim) awaitOwnerLease(ctx context.Context, s *scope) (time.Duration, error) {
	if s.pcr.Status.Phase != "" || !fromNodeHealthCheck(s.pcr) {
		return 0, nil
	}
	deadline := s.pcr.CreationTimestamp.Add(ownerLeaseGrace)
	if s.now.Before(s.pcr.CreationTimestamp.Time) || !s.now.Before(deadline) {
		return 0, nil
	}
	m, err := h.leaseManager(ctx, s)
	if err != nil {
		return 0, err
	}
	_, valid, _, err := m.HolderOf(ctx, remediationNodeKey(s.pcr))
	if err != nil || valid {
		return 0, err
	}
	s.log.V(4).Info("Waiting for the health check to take the node lease", "until", deadline)
	return deadline.Sub(s.now), nil
}

// fromNodeHealthCheck reports whether a NodeHealthCheck (metalheal's or medik8s') owns the request:
// such a check holds the node lease for the requests it creates.
func fromNodeHealthCheck(pcr *v1alpha1.PowerCycleRemediation) bool {
	return slices.ContainsFunc(pcr.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.Kind == "NodeHealthCheck" })
}

// remediationsAwaitingLease maps a node lease to the requests of its node that may be waiting for it
// (awaitOwnerLease): those from a NodeHealthCheck that have not started.
func (h *hostClaim) remediationsAwaitingLease(ctx context.Context, o client.Object) []reconcile.Request {
	node, ok := strings.CutPrefix(o.GetName(), leases.LeaseName(""))
	if !ok || o.GetNamespace() != h.leaseNamespace {
		return nil
	}
	return h.remediationsFor(ctx, node, func(p *v1alpha1.PowerCycleRemediation) bool {
		return p.Status.Phase == "" && fromNodeHealthCheck(p)
	})
}

// acquireLease makes sure the remediation may act on node: it holds the node lease (taking or renewing
// it), or its owner does. When someone else holds it, it reports LeaseAcquired=False naming the holder,
// warns once, and returns how long to wait (until the lease runs out, at most the backoff's max). The
// lease is renewed only once less than half of it is left; s.leaseRecheck says when that will be.
func (h *hostClaim) acquireLease(ctx context.Context, s *scope, node *corev1.Node) (ok bool, wait time.Duration, err error) {
	m, err := h.leaseManager(ctx, s)
	if err != nil {
		return false, 0, err
	}
	holder, valid, until, err := m.HolderOf(ctx, node.Name)
	if err != nil {
		return false, 0, err
	}
	half := h.leaseDuration / 2
	switch {
	case valid && !m.Holds(holder) && heldByOwner(s.pcr, holder.Identity):
		h.leaseTaken(s, node.Name, holder.Identity, reasonLeaseHeldByOwner,
			fmt.Sprintf("Node lease is held for this remediation by its owner %s", holder.Identity))
		s.leaseRecheck = untilDeadline(until, s.now) + time.Second // in case the owner lets it go
		return true, 0, nil
	case valid && m.Holds(holder) && until.Sub(s.now) > half:
		s.leaseRecheck = untilDeadline(until.Add(-half), s.now)
		return true, 0, nil
	case holder.Identity == "" && !valid:
		// No lease in sight, though we took one less than half a lease ago: the (cached) client has not
		// seen it yet. Creating it again would only fail; look again when it is due for renewal.
		if c := s.condition(v1alpha1.ConditionLeaseAcquired); c != nil && c.Status == metav1.ConditionTrue &&
			c.Reason == v1alpha1.ReasonLeaseAcquired && s.now.Sub(c.LastTransitionTime.Time) < half {
			s.leaseRecheck = untilDeadline(c.LastTransitionTime.Add(half), s.now)
			return true, 0, nil
		}
	}

	from := h.leaseTakeOver(ctx, s, holder)
	err = m.RequestLeaseFromHolders(ctx, node, h.leaseDuration, from...)
	var held *leases.AlreadyHeldError
	if errors.As(err, &held) && heldByOwner(s.pcr, held.Holder) {
		// The owner took it a moment ago and our cache has not shown it yet (a health check may create
		// the request first and take the lease right after).
		h.leaseTaken(s, node.Name, held.Holder, reasonLeaseHeldByOwner,
			fmt.Sprintf("Node lease is held for this remediation by its owner %s", held.Holder))
		s.leaseRecheck = untilDeadline(held.Until, s.now) + time.Second
		return true, 0, nil
	}
	if errors.As(err, &held) {
		by := heldByText(m, held.Holder)
		msg := fmt.Sprintf("Node lease of %s is held by %s until %s", node.Name, by, held.Until.UTC().Format(timeFormat))
		if s.setCondition(v1alpha1.ConditionLeaseAcquired, metav1.ConditionFalse, v1alpha1.ReasonLeaseHeldByOther, msg) {
			h.recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventNodeLeaseHeld, ActionPowerCycle,
				"Waiting: node %s is held by %s until %s", node.Name, by, held.Until.UTC().Format(timeFormat))
		}
		wait := min(untilDeadline(held.Until, s.now)+time.Second, s.spec.backoffMax)
		return false, wait, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("taking the node lease of %s: %w", node.Name, err)
	}
	h.leaseTaken(s, node.Name, m.HolderIdentity(), v1alpha1.ReasonLeaseAcquired,
		fmt.Sprintf("Node lease of %s is held as %s", node.Name, m.HolderIdentity()))
	s.leaseRecheck = h.leaseDuration - half
	return true, 0, nil
}

// keepLease renews the node lease while the remediation acts on the node, and while a finished one
// holds a fenced node: the lease lives no longer than the request. A request being deleted or timed out
// by its health check takes nothing here, whoever calls this: a deleted one's lease is released by the
// clean-up or taken over by another request of the node; a timed-out one renews only the lease it still
// holds (holdOwnLease) until the request that follows takes it over. Losing it mid-flow (it expired and
// someone took it) is reported but does not stop a power cycle half done.
func (h *hostClaim) keepLease(ctx context.Context, s *scope) error {
	if _, timedOut, _ := template.TimedOut(s.pcr); timedOut || !s.pcr.DeletionTimestamp.IsZero() {
		return nil
	}
	node, err := h.nodes.getNode(ctx, s)
	if err != nil {
		return ignoreNotFound(err)
	}
	_, _, err = h.acquireLease(ctx, s, node)
	return err
}

// releaseLease gives the node lease back if this remediation holds it, or a request of the node it carries
// on from (timed out, deleted or gone: see leaseTakeOver) does: the lease of a node whose last remediation
// ends is not left to run out.
func (h *hostClaim) releaseLease(ctx context.Context, s *scope) error {
	nodeName := s.status().NodeName
	if nodeName == "" {
		return nil
	}
	m, err := h.leaseManager(ctx, s)
	if err != nil {
		return err
	}
	holder, _, _, err := m.HolderOf(ctx, nodeName)
	if err != nil {
		return fmt.Errorf("reading the node lease of %s: %w", nodeName, err)
	}
	if holder.Identity != "" && !m.Holds(holder) && len(h.leaseTakeOver(ctx, s, holder)) > 0 {
		if m, err = h.leaseManagerAs(ctx, s, holder); err != nil {
			return err
		}
	}
	if err := m.InvalidateLease(ctx, nodeName); err != nil {
		return fmt.Errorf("releasing the node lease of %s: %w", nodeName, err)
	}
	if c := s.condition(v1alpha1.ConditionLeaseAcquired); c != nil && c.Status == metav1.ConditionTrue {
		// A lease its owner holds is the owner's to release (and to tell of).
		own := c.Reason != reasonLeaseHeldByOwner
		s.setCondition(v1alpha1.ConditionLeaseAcquired, metav1.ConditionFalse, reasonLeaseReleased, "Node lease released")
		if own {
			h.recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventNodeLeaseReleased, ActionCleanUp,
				"%s/%s deleted by its holder", h.leaseNamespace, leases.LeaseName(nodeName))
		}
	}
	s.leaseRecheck = 0
	return nil
}

// leaseTaken records that the node lease is held for the remediation, by holder, and tells it (once, when
// LeaseAcquired turns True or changes holder, not on each renewal) in the words of the demo's timeline.
func (h *hostClaim) leaseTaken(s *scope, node, holder, reason, msg string) {
	c := s.condition(v1alpha1.ConditionLeaseAcquired)
	changed := c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || c.Message != msg
	s.setCondition(v1alpha1.ConditionLeaseAcquired, metav1.ConditionTrue, reason, msg)
	if changed {
		h.recorder.Eventf(s.pcr, nil, corev1.EventTypeNormal, EventNodeLeaseTaken, ActionPowerCycle,
			"%s/%s held by %s: nobody else (node maintenance, another check) acts on the node",
			h.leaseNamespace, leases.LeaseName(node), holder)
	}
}

// reasonLeaseReleased: the remediation is done with the node and gave its lease back.
const reasonLeaseReleased = "LeaseReleased"
