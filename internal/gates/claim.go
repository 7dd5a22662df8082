package gates

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ControlPlaneRecheck is how soon a check whose control-plane start the claim refused looks again: by then
// its cache shows the lease that refused it, and the one-at-a-time rule reports the skip by itself.
const ControlPlaneRecheck = 5 * time.Second

// ControlPlaneClaim closes what the one-at-a-time rule for control-plane Nodes leaves open inside one
// manager: two checks (of either kind) deciding at the same moment from the same cache each admit a
// different control-plane Node and each take that Node's lease, since leases exclude per Node only. Every
// check of the manager starts a control-plane remediation through one ControlPlaneClaim (Start): one start
// at a time per cluster of Nodes, each confirming against the API server, not a cache, that no other
// control-plane Node of the cluster has a valid lease before it takes its own.
//
// The claim is memory only and holds nothing between starts: the leases are the record, and every start
// reads them live. Between managers (metalheal's replicas under leader election, medik8s'
// NodeHealthCheck, node maintenance) only that record coordinates.
//
// A record that lapsed while the manager was down is the one thing a restart loses: a check renews the
// leases of the remediations it has under way, and a lease whose holder was down longer than its duration
// has run out, though the remediation may go on without the manager (Cluster API replacing a Machine the
// check handed over). So after a start the claim warms up (Expect): no control-plane start until every
// check has reconciled once, taking those leases again, or until WarmUpBound has passed.
//
// The zero value is ready to use; it must not be copied after first use.
type ControlPlaneClaim struct {
	mu sync.Mutex
	// slots are one-token semaphores by cluster key: a start waits for its cluster's token, or for its
	// context to end.
	slots map[string]chan struct{}
	// listers list the checks the warm-up waits for (Expect); looked are those that reconciled once
	// (Looked); warm: the warm-up is over; since: when it began (the first check's reconcile, or the first
	// start that asked).
	listers []func(ctx context.Context) ([]string, error)
	looked  map[string]bool
	warm    bool
	since   time.Time
	// changing are, by the key of the check that sees them, the control-plane targets changing in its
	// cluster of Nodes that no lease records (Changing).
	changing map[string]changingTargets
}

// changingTargets are the control-plane targets a check sees changing in one cluster of Nodes.
type changingTargets struct {
	cluster string
	targets []string
}

// WarmUpBound bounds the warm-up after a manager starts: a check whose reconcile keeps failing holds
// control-plane starts back no longer than this after the manager's first reconcile. WarmUpRecheck is how soon a
// start the warm-up refused looks again.
const (
	WarmUpBound   = time.Minute
	WarmUpRecheck = time.Second
)

// Expect registers a kind of check the warm-up waits for: list returns, from a cache, the keys of the
// checks of that kind (as Looked is told them).
func (c *ControlPlaneClaim) Expect(list func(ctx context.Context) ([]string, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listers = append(c.listers, list)
}

// Looked tells the claim that the check key has reconciled once, at now: it holds the leases of its
// remediations under way again.
func (c *ControlPlaneClaim) Looked(key string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.warm {
		return
	}
	if c.looked == nil {
		c.looked = map[string]bool{}
	}
	c.looked[key] = true
	if c.since.IsZero() {
		c.since = now
	}
}

// waiting returns the checks other than check that the warm-up still waits for (none once it is over).
func (c *ControlPlaneClaim) waiting(ctx context.Context, check string, now time.Time) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.warm {
		return nil, nil
	}
	if c.since.IsZero() {
		c.since = now
	}
	var pending []string
	for _, list := range c.listers {
		keys, err := list(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing the checks the control-plane claim waits for: %w", err)
		}
		for _, k := range keys {
			if !c.looked[k] && k != check {
				pending = append(pending, k)
			}
		}
	}
	if len(pending) == 0 || !now.Before(c.since.Add(WarmUpBound)) {
		c.warm, c.looked = true, nil
		return nil, nil
	}
	slices.Sort(pending)
	return pending, nil
}

// Changing tells the claim which control-plane targets of the cluster of Nodes (its key) the check sees
// changing now, none to clear them: a control-plane Machine being deleted, or without a Node (a
// replacement joining, one whose Node is gone). No lease records those (a lease belongs to a Node), so
// every other check of the manager learns of them here: until the check says otherwise (or Forget), no
// other check's control-plane start in that cluster is admitted. The check's own starts are its own
// rule's (it counts them busy itself).
func (c *ControlPlaneClaim) Changing(cluster, check string, targets []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(targets) == 0 {
		delete(c.changing, check)
		return
	}
	if c.changing == nil {
		c.changing = map[string]changingTargets{}
	}
	c.changing[check] = changingTargets{cluster: cluster, targets: slices.Sorted(slices.Values(targets))}
}

// Forget drops what the claim holds of a check that is gone.
func (c *ControlPlaneClaim) Forget(check string) { c.Changing("", check, nil) }

// changingElsewhere returns a control-plane target of cluster that a check other than check sees
// changing, and that check ("", "": none), the first by check key.
func (c *ControlPlaneClaim) changingElsewhere(cluster, check string) (target, by string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(c.changing)) {
		if ch := c.changing[k]; k != check && ch.cluster == cluster {
			return ch.targets[0], k
		}
	}
	return "", ""
}

// NodeCluster is one cluster of Nodes as the claim sees it.
type NodeCluster struct {
	// Key names the cluster: "" for the manager's own.
	Key string
	// Leases reads the cluster's node leases from the API server itself (a manager's API reader): a cache
	// may not show yet the lease another check took a moment ago.
	Leases client.Reader
	// LeaseNamespace is where the node leases live.
	LeaseNamespace string
	// IsControlPlane reports whether the named Node has a control-plane role (from a cache: roles do not
	// race). A Node that is gone is not one.
	IsControlPlane func(ctx context.Context, node string) (bool, error)
	// Clock judges whether a lease is still valid.
	Clock clock.PassiveClock
}

// ControlPlaneRefusal says why Start did not take the lease: another control-plane Node's lease is held,
// or the claim is warming up after a start.
type ControlPlaneRefusal struct {
	// Node is the other control-plane Node, Holder who holds its lease.
	Node, Holder string
	// WaitingFor are the checks the warm-up waits for.
	WaitingFor []string
	// Changing: Node is a control-plane target Holder (a check) sees changing (ControlPlaneClaim.Changing).
	Changing bool
	// RetryAt is when to look again.
	RetryAt time.Time
}

// Message is the skip message of the refusal: the one-at-a-time rule's, or the warm-up's.
func (r *ControlPlaneRefusal) Message() string {
	if r.Changing {
		return fmt.Sprintf("Control-plane %s is being deleted or has no Node (%s sees it): one control-plane node at a time, "+
			"and the control plane is changing", r.Node, r.Holder)
	}
	if len(r.WaitingFor) == 0 {
		return ControlPlaneBusyMessage("node", r.Node)
	}
	names := r.WaitingFor
	if len(names) > 3 {
		names = append(slices.Clone(names[:3]), fmt.Sprintf("%d more", len(r.WaitingFor)-3))
	}
	return "The manager has just started: no control-plane remediation starts until every check has looked once " +
		"and taken again the node leases that ran out while it was down (waiting for " + strings.Join(names, ", ") + ")"
}

// Start starts a new remediation of the control-plane Node node of cluster: while it holds the cluster's
// claim it lists the cluster's node leases live and, if no other control-plane Node's lease is validly
// held (by anyone: a check's own lease on another control-plane Node is a remediation of that Node too),
// calls take, which takes node's lease. Otherwise take is not called and the refusal names the other Node.
// While the claim warms up after a start, no check but check (the one starting, by its key) is waited for,
// and the refusal names those it waits for. The error is take's, or that of a read (take is then not called
// either).
func (c *ControlPlaneClaim) Start(ctx context.Context, cluster NodeCluster, check, node string, take func(ctx context.Context) error) (*ControlPlaneRefusal, error) {
	now := cluster.Clock.Now()
	pending, err := c.waiting(ctx, check, now)
	if err != nil {
		return nil, err
	}
	if len(pending) > 0 {
		return &ControlPlaneRefusal{WaitingFor: pending, RetryAt: now.Add(WarmUpRecheck)}, nil
	}
	if target, by := c.changingElsewhere(cluster.Key, check); target != "" {
		return &ControlPlaneRefusal{Node: target, Holder: by, Changing: true, RetryAt: now.Add(ControlPlaneRecheck)}, nil
	}
	release, err := c.acquire(ctx, cluster.Key)
	if err != nil {
		return nil, err
	}
	defer release()
	refusal, err := otherControlPlaneHeld(ctx, cluster, node)
	if err != nil || refusal != nil {
		return refusal, err
	}
	return nil, take(ctx)
}

// acquire takes the cluster's token, waiting for it no longer than ctx lasts, and returns how to give it
// back.
func (c *ControlPlaneClaim) acquire(ctx context.Context, key string) (func(), error) {
	c.mu.Lock()
	if c.slots == nil {
		c.slots = map[string]chan struct{}{}
	}
	slot, ok := c.slots[key]
	if !ok {
		slot = make(chan struct{}, 1)
		c.slots[key] = slot
	}
	c.mu.Unlock()
	select {
	case slot <- struct{}{}:
		return func() { <-slot }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the control-plane claim: %w", context.Cause(ctx))
	}
}

// otherControlPlaneHeld reads the cluster's node leases live and returns the first (by Node name)
// control-plane Node other than node whose lease is validly held, nil when there is none.
func otherControlPlaneHeld(ctx context.Context, cluster NodeCluster, node string) (*ControlPlaneRefusal, error) {
	held, err := ListLeases(ctx, cluster.Leases, cluster.LeaseNamespace)
	if err != nil {
		return nil, err
	}
	others := make([]string, 0, len(held))
	for other := range held {
		others = append(others, other)
	}
	slices.Sort(others)
	now := cluster.Clock.Now()
	for _, other := range others {
		l := held[other]
		if other == node || !l.ValidAt(now) {
			continue
		}
		cp, err := cluster.IsControlPlane(ctx, other)
		if err != nil {
			return nil, err
		}
		if cp {
			return &ControlPlaneRefusal{Node: other, Holder: l.Holder, RetryAt: now.Add(ControlPlaneRecheck)}, nil
		}
	}
	return nil, nil
}
