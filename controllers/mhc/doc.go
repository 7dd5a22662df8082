// Package mhc is the MachineHealthCheck controller: it checks Cluster API Machines (cluster.x-k8s.io, in
// whichever of v1beta2 and v1beta1 the API server serves: capiversion.go) and their Nodes against a MachineHealthCheck's criteria and, within the
// unhealthy budget, remediates the unhealthy ones — by marking the Machine for its owner to replace
// (Cluster API's condition-based remediation) or by creating an external remediation request from a
// template.
//
// A reconcile is three steps:
//
//   - observe reads the check's inputs from the informer cache: the selected Machines, their Nodes (from
//     the management cluster, or from the workload cluster named by clusterName when its
//     <clusterName>-kubeconfig Secret exists, through a Node cache kept per workload cluster), the
//     Cluster, and the check's own remediation requests (any kind; metalheal's own PowerCycleRemediations
//     from the remediator's typed informer, engine.ListRequests). A request's events reach the check only
//     when they change what it reads (engine.RequestKind): the remediator's progress reports cost nothing.
//   - planChecks decides, as a pure function of those inputs and now: each Machine's verdict
//     (checkTarget: healthy, pending or unhealthy, and when that can next change), which Machines are
//     skipped, whether the budget short-circuits remediation, what to write on each Machine, which
//     requests to create, time out or delete (engine.Pass, the NodeHealthCheck's too, walks
//     escalatingRemediations and puts each start through the gates), the check's new status and the
//     earliest instant to look again.
//   - execute writes only what changed, Machine by Machine (engine.Executor, in the NodeHealthCheck's
//     order), so a failure for one never holds up another; the status is patched last and Reconcile
//     requeues at the earliest expiry.
//
// Escalation keeps one hand per host: the next step's request is created only once the ended step's
// request is finished with the host (gone, Processing=False or no Processing condition, or 5 minutes
// after its timed-out mark, with a HandOverTimedOut warning: template.HandOver); meanwhile
// status.unhealthyMachines[].waitingFor names it. A later step of the same kind as an earlier one gets a
// request name of its own, "<machine>-<template>-<hash>" (template.RequestName); no request is deleted
// to make room. Requests are mapped to their Machine by its owner reference.
//
// The safety rules are the NodeHealthCheck's, decided by the same code (internal/gates, see safety.go):
// node leases (holder "MachineHealthCheck.remediation.metalheal.io-<name>", the form of
// metalheal's NodeHealthCheck: taken before a request, or right after a worker's PowerCycleRemediation
// (engine.LeaseAfter, as the NodeHealthCheck's), renewed while it lives,
// released after; a lease held by anyone else hands the Node off; held in the cluster the Nodes are read
// from, the workload cluster's included: nodeSite), StormActive with stormCooldownDuration,
// healthyDelay, control-plane Machines one at a time across all checks of both kinds, and the
// overlapping rule (the check already remediating keeps a Machine, else the oldest claiming check owns
// it). observeSafety reads what they need from the cache after observe; planChecks applies them through
// engine.Pass (template remediation), applyGate (the owner's, through engine.Gate), holdHealthy,
// keepLease and releaseLeases, and skips are reported in status.unhealthyMachines[].skipReason and a
// RemediationSkipped event. execute takes the
// lease of a control-plane Machine's Node for a new remediation (a request, or the hand-over to its owner)
// under the manager's ControlPlaneClaim, shared with the NodeHealthChecks, and only while the API server
// shows no other control-plane Node's lease held (engine.Starter, the NodeHealthCheck's writes too): checks deciding at the same moment from
// the same cache do not start two. A workload cluster's control plane is claimed under its own key and
// confirmed against its own API server.
//
// Inside, a Machine is always a v1beta2 object: v1beta1 ones are converted with Cluster API's conversion
// and keep their served apiVersion in TypeMeta, so that what is written about them (conditions, the
// request's owner reference, events) is in their own version. The served version is discovered, not
// assumed, and asked again every recheck interval: no check waits for a restart to see Cluster API
// installed or upgraded, and while it is absent each check says so in its Disabled condition.
//
// status.unhealthyMachines is the check's memory across restarts: which remediation steps were started
// for which Machine and when they were given up on.
//
// docs/machinehealthcheck.md is the administrator's reference; docs/healthchecks.md describes the rules
// the MachineHealthCheck shares with the NodeHealthCheck.
package mhc
