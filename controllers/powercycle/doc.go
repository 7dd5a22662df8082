// Package powercycle is metalheal's bundled remediator. It reconciles PowerCycleRemediation requests
// with an explicit state machine (Pending → PoweringOff → PoweredOff → PoweringOn → WaitingForNode →
// Succeeded, plus Retrying, Escalating and Failed) whose only memory is the request's status, powering
// hosts off and on through the BMC drivers of pkg/bmc. It also keeps the BMC inventory current: every BMC
// object is checked for reachability, valid credentials and power state.
//
// One hand per host: several requests may name one Node (a health check's escalation steps). A request
// marked timed out by its health check stops at a safe point (it lands a power request in flight, fences
// a host confirmed off) and hands the host over as it is, reporting Processing=False, HandedOver; it
// restores nothing. A deleted request restores the Node (power-on unless power-off is its strategy,
// metalheal's taints, the node lease) only as the last remediation of the Node: one deleted while another
// request of the Node lives lets go without touching anything, and of several deleted at once the newest
// restores. The taints belong to the Node's remediations together (the Node's applied-taints
// annotation), and the node lease passes from a request that let go of the Node to the next in one
// update. See remediation_handover.go and docs/powercycle.md.
package powercycle
