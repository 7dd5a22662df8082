package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// MaxRecentRemediations is how many ended remediations a BMC's status keeps (status.recentRemediations):
// the oldest is dropped when another is added.
const MaxRecentRemediations = 10

// MaxRecordedPowerChanges is how many power changes one remediation's record keeps (the last ones).
const MaxRecordedPowerChanges = 20

// MaxRecordMessage bounds, in bytes, the message of a remediation's record.
const MaxRecordMessage = 1024

// RemediationResult is how a remediation of a host ended.
// +kubebuilder:validation:Enum=Succeeded;Failed;Cancelled;HandedOver
type RemediationResult string

const (
	// RemediationSucceeded: the node came back (NodeReady), was fenced as asked (Fenced, power-off
	// strategy), or its Machine was deleted to be replaced (MachineDeleted).
	RemediationSucceeded RemediationResult = "Succeeded"
	// RemediationFailed: the remediation gave up (Succeeded=False): RetriesExhausted (a bare node left
	// powered off and fenced), TimedOut, NodeExcluded, LeaseHeldByOther.
	RemediationFailed RemediationResult = "Failed"
	// RemediationCancelled: the request was deleted before the remediation reached an outcome (the node
	// recovered on its own, or someone deleted it); the remediator restored the host.
	RemediationCancelled RemediationResult = "Cancelled"
	// RemediationHandedOver: the request let go of the host as it was, for another request of the node
	// to carry on: timed out by its health check (an escalation's next step), or deleted while another
	// request remediates the node.
	RemediationHandedOver RemediationResult = "HandedOver"
)

// HealthCheckReference names the health check that asked for a remediation: an owner of the request.
type HealthCheckReference struct {
	// apiVersion of the health check: remediation.metalheal.io/v1alpha1, medik8s'
	// remediation.medik8s.io/v1alpha1, or Cluster API's.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	APIVersion string `json:"apiVersion"`

	// kind of the health check: NodeHealthCheck or MachineHealthCheck.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// name of the health check; a MachineHealthCheck is in the request's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// PowerChange is a power change the remediator asked of a host's BMC.
type PowerChange struct {
	// target is the power state asked for: On or Off.
	// +required
	Target PowerState `json:"target"`

	// requested is when the change was recorded, just before it was sent to the BMC.
	// +required
	Requested metav1.Time `json:"requested"`

	// confirmed is when the BMC read the host in the target state; absent when it never did (the change
	// was not carried out in time, or the remediation ended first).
	// +optional
	Confirmed *metav1.Time `json:"confirmed,omitempty"`
}

// RemediationRecord is one ended remediation of a host: which request asked for it and who created the
// request, when it started and ended, the power changes made, and how it ended. The remediator writes it
// on the host's BMC when the request lets go of the host, so that it outlives the request and its events.
// It holds nothing secret: names, times, reasons and the remediator's own message.
type RemediationRecord struct {
	// kind of the remediation request: PowerCycleRemediation.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// namespace of the request.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// name of the request.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid of the request: a request created again under the same name (the next incident) is another
	// remediation, with another record.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UID types.UID `json:"uid"`

	// healthCheck is the health check that asked for the remediation (an owner of the request); absent
	// when the request names none (Cluster API's MachineHealthCheck makes the Machine its only owner).
	// +optional
	HealthCheck *HealthCheckReference `json:"healthCheck,omitempty"`

	// nodeName is the Node that was remediated.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// clusterName is the Cluster API Cluster, in the request's namespace, whose workload cluster holds the
	// Node; empty for a Node of the cluster the manager runs in.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ClusterName string `json:"clusterName,omitempty"`

	// strategy of the remediation: reboot, escalate or power-off.
	// +optional
	Strategy Strategy `json:"strategy,omitempty"`

	// started is when the request was created: when its health check asked for the remediation.
	// +required
	Started metav1.Time `json:"started"`

	// finished is when the remediation ended: when it reported its outcome (Succeeded, Failed), was
	// handed over, or, for a request deleted before any outcome, when its clean-up was done.
	// +required
	Finished metav1.Time `json:"finished"`

	// result is how it ended: Succeeded, Failed, Cancelled or HandedOver.
	// +required
	Result RemediationResult `json:"result"`

	// reason is the machine-readable cause of the result, in the words of the request's conditions:
	// NodeReady, Fenced, MachineDeleted, RetriesExhausted, TimedOut, NodeExcluded, LeaseHeldByOther,
	// RemediationCancelled or HandedOver.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`

	// attempts is how many power cycles were started.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Attempts int32 `json:"attempts,omitempty"`

	// powerChanges are the power changes asked of the host's BMC, oldest first: each attempt's power-off
	// (once the BMC confirmed it) and power-on, and the clean-up's power-on. At most 20: the last ones.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	PowerChanges []PowerChange `json:"powerChanges,omitempty"`

	// message says how it ended, in the remediator's words (at most 1024 bytes).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}
