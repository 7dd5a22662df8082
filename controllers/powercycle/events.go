package powercycle

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Event reasons of the powercycle package's controllers. Events are emitted on transitions only.
const (
	// EventBMCUnreachable (Warning): a BMC stopped answering, or timed out.
	EventBMCUnreachable = "BMCUnreachable"
	// EventBMCCredentialsInvalid (Warning): a BMC refused its credentials, or its Secret is missing or
	// incomplete.
	EventBMCCredentialsInvalid = "BMCCredentialsInvalid"
	// EventBMCMisconfigured (Warning): a BMC's address is invalid, or no driver here can use it.
	EventBMCMisconfigured = "BMCMisconfigured"
	// EventBMCRecovered (Normal): a BMC that had a problem answered and accepted its credentials again.
	EventBMCRecovered = "BMCRecovered"
)

// Event actions (the events.k8s.io "action" field): what the controller was doing.
const (
	// ActionCheckBMC is the BMC inventory's periodic reachability and credentials check.
	ActionCheckBMC = "CheckBMC"
)

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

// boundedNotes is an event recorder whose notes are at most bmcMaxNote bytes, cut on a rune boundary. The
// remediator's events quote BMC errors, and a BMC (or whoever answers in its place) chooses what its
// errors say: events.k8s.io refuses a note over 1024 bytes, and the event would be lost.
type boundedNotes struct{ events.EventRecorder }

func (r boundedNotes) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", truncateUTF8(fmt.Sprintf(note, args...), bmcMaxNote))
}
