// Package nhc is the NodeHealthCheck controller: for clusters without a Machine API it checks Nodes
// directly against a NodeHealthCheck's conditions and, within the unhealthy budget, creates an external
// remediation request (any kind, from a template) for each Node that stays unhealthy, deleting it once
// the Node is healthy again.
//
// # Shape
//
// Reconcile is a thin shell: observe reads everything from the informer cache (the selected Nodes, the
// templates, the remediation requests of the templates' kinds, the node leases, the other checks), decide
// is a pure function of that and now that returns a plan (what to create, time out, delete, which leases
// to take and release, the status, the events, and when to look again), and execute carries it out. The
// controller requeues at the earliest deadline decide found: a condition expiring (detection never waits
// for a resync), healthyDelay, an escalation step's timeout, the bound of a wait for an ended step's
// request to hand the host over, a lease renewal, the end of a storm cooldown. The resync period is only
// a safety net. A reconcile writes through the engine's executor (engine.Executor), the Nodes in parallel:
// the requests of Nodes that have just failed go out before the other Nodes' writes (deletions, leases),
// and the status follows; an expiry that comes while they are under way is the next reconcile's. Nothing
// else writes for a check: no second writer races the reconcile (BENCHMARKS.md's A/B measured one, and it
// did not pay for itself).
//
// # Cost at scale
//
// A reconcile makes no API call per Node: the Nodes are read from the node informer's store itself (a
// cached List would copy every one), the conditions of each are matched in memory (a few microseconds),
// and only the Nodes that are unhealthy or being remediated are looked at further. Node events that
// change neither labels nor the type, status or transition time of a condition (the kubelet's
// heartbeats) are dropped before they reach the queue, and so are the remediator's progress reports on a
// request (updates that change neither its annotations, owners, deletion nor the status of its Succeeded
// or Processing condition). The status lists only the Nodes being remediated or skipped for a reason of
// their own, so a quiet 5,000-node check has a status of a few hundred bytes, and it is written only when
// it changes. Unstructured reads (templates, remediation requests of any kind) go through the manager's
// cache. The watches of the template and remediation kinds the checks name are kept by internal/kindwatch: a
// kind is watched from the first reconcile of a check naming it, and never read before its watch has
// synced, so one kind the manager cannot watch (no ClusterRole grants it) disables only the checks naming
// it (after 30 s, RemediationKindNotWatchable) while the others go on; its watch is dropped when no check
// names it any more.
//
// # Rules
//
//   - Unhealthy: any unhealthyConditions entry has held for its duration (internal/conditions).
//   - Budget: maxUnhealthy (percent rounded down) or minHealthy (percent rounded up); remediation stops
//     while the unhealthy Nodes exceed it (internal/budget, the Cluster API book's rule). That is a storm:
//     StormActive is True, and stays True for stormCooldownDuration after the budget is met again (the
//     cooldown runs from RemediationAllowed's last transition to True). Requests in flight go on.
//   - Steps: remediationTemplate is one step without timeout; escalatingRemediations are steps in
//     ascending order. A step ends when its timeout passes or its request reports Succeeded=False; the
//     request is then annotated remediation.medik8s.io/nhc-timed-out. The next step's request is created
//     once the ended one is finished with the host (one hand per host, template.HandOver): gone,
//     Processing=False or no Processing condition, or 5 minutes after the mark (a HandOverTimedOut
//     warning); meanwhile status.unhealthyNodes[].waitingFor names it. A step's request is named after
//     the Node, in its template's namespace, except a later step of the same kind and namespace as an
//     earlier one: "<node>-<template>-<hash>" (template.RequestName). No request is deleted to make room.
//   - Overlapping checks: a Node selected by several checks is remediated by at most one. A check already
//     remediating the Node keeps it; otherwise the oldest check (creation time, then name) that selects the
//     Node and finds it unhealthy owns it. Disabled checks own nothing; paused or storm-bound ones do. The
//     others skip the Node with skipReason OwnedByOtherCheck and an event naming the owner.
//   - Control-plane Nodes (node-role.kubernetes.io/control-plane or master) are remediated one at a time,
//     across all checks; one whose lease someone else holds (e.g. under maintenance) counts as that one.
//     A control-plane Node's lease is taken before its request, after the reconcile's lease releases,
//     under the manager's ControlPlaneClaim (internal/gates, shared with the MachineHealthChecks) and only
//     while the API server shows no other control-plane Node's lease held: checks deciding at the same
//     moment from the same cache do not start two. A refusal is a ControlPlaneBusy skip, looked at again
//     after gates.ControlPlaneRecheck.
//   - Leases (pkg/leases, medik8s-compatible): the check takes the Node's lease as
//     "NodeHealthCheck.remediation.metalheal.io-<name>" (not medik8s' "NodeHealthCheck-<name>": the two
//     checks of one name must not share a lease) before it creates a request (a worker's
//     PowerCycleRemediation: right after, engine.LeaseAfter, as a MachineHealthCheck's), renews it at half-time
//     while any request of its own for the Node exists (taking it over from the remediator of such a
//     request, which may have taken it first), and releases it once they are all gone. A valid lease held by anyone else (e.g.
//     node-maintenance) hands the Node off: no request, an event naming the holder, a look again when the
//     lease runs out (and when the lease changes). Leases are read from the cache: a write made from a
//     copy that lags behind our own last one costs a needless renewal or a delete of a lease already
//     gone, nothing more.
//   - pauseRequests and a missing or malformed template (phase Disabled) stop new requests; requests in
//     flight are still timed out and deleted. Nodes labelled
//     remediation.medik8s.io/exclude-from-remediation=true are never remediated.
//
// # Cache requirements (for main)
//
// The Lease watch and the lease reads go through the manager's cache: restrict it to the lease namespace
// (cache.Options.ByObject for coordinationv1.Lease), or the first read opens an informer over every Lease
// in the cluster, kubelet heartbeats included.
//
// docs/nodehealthcheck.md is the administrator's reference; docs/healthchecks.md describes the rules the
// NodeHealthCheck shares with the MachineHealthCheck.
package nhc
