package powercycle

// Event reasons of the power-cycle remediator besides those in remediation_events.go: the hand-over (one
// hand per host), the trust gate and the bounds of its waits.
const (
	// EventHandedOver (Normal): the request let go of its node as it was, for another request of the node
	// to carry on: it was timed out by its health check, or deleted while another request remediates the
	// node.
	EventHandedOver = "HandedOver"
	// EventNamespaceNotTrusted (Warning): a request in a namespace the remediator does not act in
	// (--remediation-namespaces) was refused; nothing was done.
	EventNamespaceNotTrusted = "NamespaceNotTrusted"
	// EventNodeNotInThisCluster (Warning): a request whose Machine's Node lives in a workload cluster was
	// refused; nothing was done to the same-named Node of this cluster or its host.
	EventNodeNotInThisCluster = "NodeNotInThisCluster"
	// EventWorkloadClusterUnreachable (Warning): the workload cluster of the request's Node cannot be
	// reached; the request waits, doing nothing to the host.
	EventWorkloadClusterUnreachable = "WorkloadClusterUnreachable"
)
