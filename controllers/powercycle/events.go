package powercycle

// Event reasons of the power-cycle remediator. Each phase transition emits one (Warning for Retrying,
// Escalating and Failed); the others are emitted when something blocks or ends the work, once per change.
const (
	// EventRemediationStarted (Normal): a new request was accepted (phase Pending).
	EventRemediationStarted = "RemediationStarted"
	// EventDiagnosing (Normal): a diagnostic interrupt (NMI) is sent to the host for a kernel dump
	// (spec.diagnosticInterrupt); waiting for it to power off or reboot on its own.
	EventDiagnosing = "Diagnosing"
	// EventShuttingDown (Normal): the host is asked to shut down gracefully (spec.gracefulShutdown);
	// waiting for it to power off.
	EventShuttingDown = "ShuttingDown"
	// EventPoweringOff (Normal): the host is being powered off by force.
	EventPoweringOff = "PoweringOff"
	// EventPoweredOff (Normal): the BMC confirmed the host off; the node is being fenced.
	EventPoweredOff = "PoweredOff"
	// EventPoweringOn (Normal): the host is being powered back on.
	EventPoweringOn = "PoweringOn"
	// EventPoweredOn (Normal): the BMC confirmed the host on; waiting for the node to be Ready.
	EventPoweredOn = "PoweredOn"
	// EventRemediated (Normal): the node is Ready again, fenced (power-off), or its Machine was deleted.
	EventRemediated = "Remediated"
	// EventAttemptFailed (Warning): an attempt failed; the next one starts after a backoff.
	EventAttemptFailed = "AttemptFailed"
	// EventEscalating (Warning): the escalate strategy used up its attempts.
	EventEscalating = "Escalating"
	// EventRemediationFailed (Warning): the remediation gave up (Succeeded=False) or was timed out.
	EventRemediationFailed = "RemediationFailed"

	// EventNodeLeaseHeld (Warning): someone else (e.g. node-maintenance) holds the node lease; waiting.
	EventNodeLeaseHeld = "NodeLeaseHeld"
	// EventBMCNotReady (Warning): the node's BMC, its Secret or the BMC itself cannot be used.
	EventBMCNotReady = "BMCNotReady"
	// EventNodeNotFound (Warning): the node to remediate does not exist.
	EventNodeNotFound = "NodeNotFound"
	// EventMachineDeleted (Warning): the owning Machine was deleted to be replaced.
	EventMachineDeleted = "MachineDeleted"
	// EventPoweringOffManagerNode (Warning): the node being powered off runs this manager.
	EventPoweringOffManagerNode = "PoweringOffManagerNode"
	// EventCleanedUp (Normal): the request was deleted or timed out and the node is cleaned up.
	EventCleanedUp = "CleanedUp"
	// EventPowerOnAbandoned (Warning): cleanup could not power the host back on in time.
	EventPowerOnAbandoned = "PowerOnAbandoned"
	// EventRemediationNotRecorded (Warning): the API server refused the remediation's record on the host's
	// BMC for good (the manager may not patch BMC status); the request let go of the host all the same.
	EventRemediationNotRecorded = "RemediationNotRecorded"

	// EventDiagnosticInterruptEnded (Normal): the wait after a diagnostic interrupt ended: the host powered
	// off (PoweredOff) or rebooted (Rebooted) on its own, was still on (TimedOut), or the BMC cannot send
	// one (NotSupported). The forced power-off follows.
	EventDiagnosticInterruptEnded = "DiagnosticInterruptEnded"
	// EventGracefulShutdownEnded (Normal): the wait after a graceful shutdown ended: the host powered off
	// (PoweredOff), was still on (TimedOut), or the BMC offers none (NotSupported). The forced power-off
	// follows unless it is off.
	EventGracefulShutdownEnded = "GracefulShutdownEnded"

	// What the remediation did to the node and its lease, kept as events because the Node's taints and the
	// lease are gone once it is over (kubectl metalheal timeline reads them). Each is emitted once, when
	// the change is made (or, for a lease held by the request's owner, first seen), never per reconcile.

	// EventNodeLeaseTaken (Normal): the node lease is held for this remediation (by it, or by its owner).
	EventNodeLeaseTaken = "NodeLeaseTaken"
	// EventNodeLeaseReleased (Normal): the remediation gave back the node lease it held.
	EventNodeLeaseReleased = "NodeLeaseReleased"
	// EventNodeCordoned (Normal): the remediation taint (NoSchedule) was added to the node.
	EventNodeCordoned = "NodeCordoned"
	// EventOutOfServiceTaintAdded (Normal): the out-of-service taint (NoExecute) was added to the node.
	EventOutOfServiceTaintAdded = "OutOfServiceTaintAdded"
	// EventTaintsRemoved (Normal): the remediation removed metalheal's taints from the node.
	EventTaintsRemoved = "TaintsRemoved"
)

// Event reasons of the hand-over (one hand per host), the trust gate and the Node's cluster.
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

// Event actions of the power-cycle remediator (the events.k8s.io "action" field).
const (
	// ActionPowerCycle is the remediation's own work.
	ActionPowerCycle = "PowerCycle"
	// ActionCleanUp is the work done when the request is deleted or timed out.
	ActionCleanUp = "CleanUp"
)
