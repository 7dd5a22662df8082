// Package powercycle is metalheal's bundled remediator. It reconciles PowerCycleRemediation requests
// with an explicit state machine (Pending → PoweringOff → PoweredOff → PoweringOn → WaitingForNode →
// Succeeded, plus Retrying, Escalating and Failed) whose only memory is the request's status, powering
// hosts off and on through the BMC drivers of pkg/bmc. A spec may ask each attempt to let the host go
// down on its own first, within bounds (phase_host.go): a diagnostic interrupt for a kernel dump
// (Diagnosing), then a graceful shutdown (ShuttingDown), before the forced power-off. The BMC inventory, which checks every BMC object
// for reachability, valid credentials and power state, is its subpackage bmcinventory.
//
// # Shape
//
// Reconcile reads top to bottom (remediation_reconcile.go): fetch the request, take the step it is due,
// record what changed. The step is the same for every phase: a request from an untrusted namespace moves
// nothing; a deleted or timed-out one is cleaned up; the others wait for their health check's lease and
// for another request of the Node to let go of it, get the finalizer, and run their phase's handler
// (phase.go and the phase_*.go files). Whatever must be durable before the remediator acts (a power
// request, a taint) is written first, guarded by the resourceVersion it was read at, so a restart resumes
// from the status alone.
//
// Who may act on a host is not the reconciler's to decide alone: it asks its hostClaim (claim.go), which
// knows the other requests of the Node and holds the node lease. The BMC is reached only through
// remediation_bmc.go.
//
// The process keeps one thing the status does not (memory, remediation_memory.go): the object its own
// last write of each request left, until the cache shows it, so that the next step does not wait for the
// watch event of our own write. It was measured in a wave of 500 power cycles (BENCHMARKS.md, the A/B);
// a new process starts without it and loses nothing but those seconds.
//
// One hand per host: several requests may name one Node (a health check's escalation steps). A request
// marked timed out by its health check stops at a safe point (it lands a power request in flight, fences
// a host confirmed off) and hands the host over as it is, reporting Processing=False, HandedOver; it
// restores nothing. A deleted request restores the Node (power-on unless power-off is its strategy,
// metalheal's taints, the node lease) only as the last remediation of the Node: one deleted while another
// request of the Node lives lets go without touching anything but passing on its record of the taints,
// and of several deleted at once the newest restores. The taints belong to the Node's remediations
// together (recorded in their status only: nothing on a Node, which many may write, is taken as a
// record), and the node lease passes from a request that let go of the Node to the next in one update.
// A request the remediator refused is no remediation of its Node (actsOn). See claim.go, claim_handover.go
// and docs/powercycle.md.
//
// Two clusters, one name: the Node of a request owned by a Cluster API Machine may live in a workload
// cluster, where node names repeat. Before it acts the request is placed (remediation_cluster.go): this
// cluster's Node when it is the Machine's, else the workload cluster's, recorded in status.clusterName
// and reached through internal/workload; the taints, the wait for Ready and the node lease are then on
// that Node, the BMC is the one naming that cluster, and the host of the management cluster's same-named
// Node is never touched. A host is always known by cluster and node together (bmcaccess.Host).
package powercycle
