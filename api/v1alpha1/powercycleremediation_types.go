package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Strategy is what a PowerCycleRemediation does to a broken host.
// +kubebuilder:validation:Enum=reboot;escalate;power-off
type Strategy string

const (
	// StrategyReboot power-cycles the host and, while it stays broken, keeps power-cycling it with a
	// growing backoff: for hosts that are worth waiting for.
	StrategyReboot Strategy = "reboot"
	// StrategyEscalate power-cycles the host up to deleteAfterRetries times, then escalates: an owning
	// Machine is deleted so it is replaced; a bare Node is left powered off and fenced with Succeeded=False
	// so its health check can try its next remediation.
	StrategyEscalate Strategy = "escalate"
	// StrategyPowerOff fences the host: powers it off, confirms it, moves its workloads, leaves it off.
	StrategyPowerOff Strategy = "power-off"
)

// PowerCycleRemediationSpec is how to power-cycle a host.
type PowerCycleRemediationSpec struct {
	// strategy is reboot (power-cycle, retry with backoff until the node is back), escalate (power-cycle up
	// to deleteAfterRetries times, then escalate) or power-off (fence only). Defaults to reboot.
	// +optional
	// +kubebuilder:default=reboot
	Strategy Strategy `json:"strategy,omitempty"`

	// deleteAfterRetries is how many power cycles the escalate strategy tries before it escalates.
	// Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	DeleteAfterRetries *int32 `json:"deleteAfterRetries,omitempty"`

	// powerOffTimeoutSeconds bounds the wait for the BMC to confirm the host is off; past it the attempt
	// fails (and nothing that assumes the host is dead is done). Defaults to 120.
	// +optional
	// +kubebuilder:default=120
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=3600
	PowerOffTimeoutSeconds int32 `json:"powerOffTimeoutSeconds,omitempty"`

	// powerOnTimeoutSeconds bounds the wait from power-on until the Node is Ready; past it the attempt
	// fails. Defaults to 600.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=7200
	PowerOnTimeoutSeconds int32 `json:"powerOnTimeoutSeconds,omitempty"`

	// retryBackoff is the wait between a failed attempt and the next one.
	// +optional
	// +kubebuilder:default={initial:"30s",max:"10m"}
	RetryBackoff *RetryBackoff `json:"retryBackoff,omitempty"`

	// outOfServiceTaint, when true, adds node.kubernetes.io/out-of-service=nodeshutdown:NoExecute once the
	// power-off is confirmed, so Kubernetes force-deletes the Node's pods and detaches their volumes
	// (non-graceful node shutdown) and stateful workloads move. Removed when the Node is Ready again.
	// Defaults to true.
	// +optional
	// +kubebuilder:default=true
	OutOfServiceTaint *bool `json:"outOfServiceTaint,omitempty"`

	// diagnosticInterrupt, when set, asks each attempt's host for a kernel dump before its power-off: the
	// BMC sends the host a diagnostic interrupt (an NMI: Redfish's Nmi reset, IPMI's chassis power diag,
	// Ironic's inject_nmi), the remediator waits up to timeoutSeconds for the host to write its dump and
	// power off or reboot on its own (phase Diagnosing), then powers it off as ever, confirmed. A BMC that
	// cannot send one is no failure: it is recorded as NotSupported and the power-off goes on at once.
	// Unset (the default), no interrupt is sent.
	// +optional
	DiagnosticInterrupt *DiagnosticInterrupt `json:"diagnosticInterrupt,omitempty"`

	// gracefulShutdown, when set, asks each attempt's host to shut down (Redfish's GracefulShutdown, IPMI's
	// chassis power soft, Ironic's soft power off) before its power is cut, and waits up to timeoutSeconds
	// for it to be off (phase ShuttingDown, after Diagnosing); a host still on then, or a BMC that offers
	// no graceful shutdown, is powered off by force. Unset (the default), the power is cut at once.
	// +optional
	GracefulShutdown *GracefulShutdown `json:"gracefulShutdown,omitempty"`
}

// DiagnosticInterrupt is the kernel dump asked of a host before it is powered off.
type DiagnosticInterrupt struct {
	// timeoutSeconds bounds the wait, from the interrupt, for the host to write its kernel dump and power
	// off or reboot on its own; past it the host is powered off by force. Defaults to 300.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=3600
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// GracefulShutdown is the shutdown asked of a host's operating system before its power is cut.
type GracefulShutdown struct {
	// timeoutSeconds bounds the wait, from the request, for the host to shut down; past it the host is
	// powered off by force. Defaults to 60.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=1800
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// RetryBackoff is an exponential backoff: initial, doubled after each failed attempt, capped at max.
// +kubebuilder:validation:XValidation:rule="!self.initial.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.max.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.max) >= duration(self.initial)",message="retryBackoff.max must be at least retryBackoff.initial"
type RetryBackoff struct {
	// initial is the wait after the first failed attempt, e.g. 30s. At least 1s.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) >= duration('1s')",message="retryBackoff.initial must be at least 1s"
	Initial metav1.Duration `json:"initial"`

	// max caps the wait, e.g. 10m. At most 24h.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('24h')",message="retryBackoff.max must be at most 24h"
	Max metav1.Duration `json:"max"`
}

// PowerCyclePhase is where a PowerCycleRemediation is in its state machine. The phase is the machine's
// memory: a restarted controller resumes from it.
// +kubebuilder:validation:Enum=Pending;Diagnosing;ShuttingDown;PoweringOff;PoweredOff;PoweringOn;WaitingForNode;Retrying;Escalating;Succeeded;Failed
type PowerCyclePhase string

const (
	// PhasePending: accepted; resolving the node, its BMC and the node lease.
	PhasePending PowerCyclePhase = "Pending"
	// PhaseDiagnosing: a diagnostic interrupt (NMI) was sent (spec.diagnosticInterrupt); waiting for the
	// host to write its kernel dump and power off or reboot on its own.
	PhaseDiagnosing PowerCyclePhase = "Diagnosing"
	// PhaseShuttingDown: a graceful shutdown was asked (spec.gracefulShutdown); waiting for the host to
	// power off.
	PhaseShuttingDown PowerCyclePhase = "ShuttingDown"
	// PhasePoweringOff: power-off requested; waiting for the BMC to confirm it.
	PhasePoweringOff PowerCyclePhase = "PoweringOff"
	// PhasePoweredOff: power-off confirmed; the node is fenced (out-of-service taint).
	PhasePoweredOff PowerCyclePhase = "PoweredOff"
	// PhasePoweringOn: power-on requested; waiting for the BMC to confirm it.
	PhasePoweringOn PowerCyclePhase = "PoweringOn"
	// PhaseWaitingForNode: the host is on; waiting for the Node to be Ready.
	PhaseWaitingForNode PowerCyclePhase = "WaitingForNode"
	// PhaseRetrying: an attempt failed; waiting for the backoff before the next one.
	PhaseRetrying PowerCyclePhase = "Retrying"
	// PhaseEscalating: retries are exhausted; escalating (deleting the Machine or staying fenced).
	PhaseEscalating PowerCyclePhase = "Escalating"
	// PhaseSucceeded: the node is back (or, for power-off, fenced). Terminal.
	PhaseSucceeded PowerCyclePhase = "Succeeded"
	// PhaseFailed: remediation gave up. Terminal.
	PhaseFailed PowerCyclePhase = "Failed"
)

// PowerCycleAttempt records one power cycle.
type PowerCycleAttempt struct {
	// number counts attempts from 1.
	// +required
	// +kubebuilder:validation:Minimum=1
	Number int32 `json:"number"`

	// started is when the attempt began: its first request to the BMC (the diagnostic interrupt, the
	// graceful shutdown or the power-off) followed at once.
	// +required
	Started metav1.Time `json:"started"`

	// diagnosticInterrupt is the diagnostic interrupt (NMI) sent to the host before its power-off
	// (spec.diagnosticInterrupt), and how the wait for its kernel dump ended.
	// +optional
	DiagnosticInterrupt *HostRequest `json:"diagnosticInterrupt,omitempty"`

	// gracefulShutdown is the graceful shutdown asked of the host before its power was cut
	// (spec.gracefulShutdown), and how the wait for it ended.
	// +optional
	GracefulShutdown *HostRequest `json:"gracefulShutdown,omitempty"`

	// poweredOff is when the BMC confirmed the host off.
	// +optional
	PoweredOff *metav1.Time `json:"poweredOff,omitempty"`

	// powerOnRequested is when power-on was requested; powerOnTimeoutSeconds counts from it.
	// +optional
	PowerOnRequested *metav1.Time `json:"powerOnRequested,omitempty"`

	// poweredOn is when the BMC confirmed the host on.
	// +optional
	PoweredOn *metav1.Time `json:"poweredOn,omitempty"`

	// finished is when the attempt ended.
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`

	// result is Succeeded, Failed or empty while the attempt runs.
	// +optional
	// +kubebuilder:validation:Enum=Succeeded;Failed
	Result string `json:"result,omitempty"`

	// message says why the attempt failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// HostRequestResult is how the wait after a request answered by the host itself (a diagnostic interrupt,
// a graceful shutdown) ended.
// +kubebuilder:validation:Enum=PoweredOff;Rebooted;TimedOut;NotSupported
type HostRequestResult string

const (
	// HostRequestPoweredOff: the host powered off on its own.
	HostRequestPoweredOff HostRequestResult = "PoweredOff"
	// HostRequestRebooted: the BMC reported the host going down and coming back on (a kernel dump, then a
	// reboot). A reboot the BMC does not report (a warm one: the power stays on) is not seen.
	HostRequestRebooted HostRequestResult = "Rebooted"
	// HostRequestTimedOut: the host was still on at the end of the wait (or the BMC could not be used
	// until then).
	HostRequestTimedOut HostRequestResult = "TimedOut"
	// HostRequestNotSupported: the BMC does not offer the request. Not a failure: the power-off goes on.
	HostRequestNotSupported HostRequestResult = "NotSupported"
)

// HostRequest records a request that the host itself answers, sent before its power is cut, and how the
// wait after it ended. The forced power-off follows whatever the result.
type HostRequest struct {
	// requested is when the request was recorded, just before it was sent to the BMC; empty when it could
	// not be sent (the BMC could not be used before the wait ended).
	// +optional
	Requested *metav1.Time `json:"requested,omitempty"`

	// wentDown is when the BMC first read the host neither on nor off after the request (powering off or
	// on): read on again later, it rebooted.
	// +optional
	WentDown *metav1.Time `json:"wentDown,omitempty"`

	// ended is when the wait ended.
	// +optional
	Ended *metav1.Time `json:"ended,omitempty"`

	// result is how the wait ended: PoweredOff, Rebooted, TimedOut or NotSupported; empty while it runs.
	// +optional
	Result HostRequestResult `json:"result,omitempty"`

	// message says what was seen, or what the BMC answered.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// PowerRequest is a power change asked of a BMC.
type PowerRequest struct {
	// target is the power state asked for: On or Off.
	// +required
	Target PowerState `json:"target"`

	// time is when the request was recorded, just before it was sent.
	// +required
	Time metav1.Time `json:"time"`
}

// PowerCycleRemediationStatus is the remediation's state machine and its record.
type PowerCycleRemediationStatus struct {
	// phase is where the remediation is: Pending, Diagnosing, ShuttingDown, PoweringOff, PoweredOff,
	// PoweringOn, WaitingForNode, Retrying, Escalating, Succeeded or Failed.
	// +optional
	Phase PowerCyclePhase `json:"phase,omitempty"`

	// lastTransitionTime is when the current phase was entered; the phase's timeout counts from it.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`

	// nodeName is the Node being remediated.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// clusterName is the Cluster API Cluster, in the request's namespace, whose workload cluster holds
	// the Node, as found from the request's Machine before anything was done; empty: the Node is one of
	// the cluster the remediator runs in. Cordon, taints, the wait for Ready and the node lease are in the
	// Node's own cluster.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ClusterName string `json:"clusterName,omitempty"`

	// bmcName is the BMC object used to reach the host.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BMCName string `json:"bmcName,omitempty"`

	// powerState is the host's power state as last read from its BMC: On or Off, or Unknown when the
	// BMC could not be read. Readings in the middle of a transition are not recorded.
	// +optional
	PowerState PowerState `json:"powerState,omitempty"`

	// retryCount is the number of failed power-cycle attempts so far.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RetryCount int32 `json:"retryCount,omitempty"`

	// nextRetryTime is when the next attempt starts, while Retrying.
	// +optional
	NextRetryTime *metav1.Time `json:"nextRetryTime,omitempty"`

	// powerRequest is the power change asked of the BMC in the current phase. It is recorded before the
	// request is sent, so a restarted controller never sends it twice; every phase transition clears it.
	// In Diagnosing and ShuttingDown it is the diagnostic interrupt or the graceful shutdown (target Off:
	// the host is expected to power off on its own).
	// +optional
	PowerRequest *PowerRequest `json:"powerRequest,omitempty"`

	// appliedTaints are the keys of the taints this remediation added to the Node (a taint that was
	// already there is not listed). Each is recorded before it is added; cleanup removes exactly these.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=317
	AppliedTaints []string `json:"appliedTaints,omitempty"`

	// attempts is the history of the most recent attempts, oldest first (at most 10).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Attempts []PowerCycleAttempt `json:"attempts,omitempty"`

	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Processing, Succeeded and PermanentNodeDeletionExpected (the external remediation
	// contract health checks read), plus LeaseAcquired and BMCReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PowerCycleRemediation is one external remediation request: a node being power-cycled through its BMC.
// Health checks create it from a PowerCycleRemediationTemplate and delete it when the node is healthy.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=powercycleremediations,shortName=pcr,categories=metalheal
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.clusterName`,priority=1
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.powerState`
// +kubebuilder:printcolumn:name="Retries",type=integer,JSONPath=`.status.retryCount`
// +kubebuilder:printcolumn:name="Succeeded",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].status`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PowerCycleRemediation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is how to power-cycle.
	// +optional
	Spec PowerCycleRemediationSpec `json:"spec,omitempty"`

	// status is the state machine.
	// +optional
	Status PowerCycleRemediationStatus `json:"status,omitempty"`
}

// PowerCycleRemediationList is a list of PowerCycleRemediations.
// +kubebuilder:object:root=true
type PowerCycleRemediationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PowerCycleRemediation `json:"items"`
}

// PowerCycleRemediationTemplateResource is what a template stamps out.
type PowerCycleRemediationTemplateResource struct {
	// spec of the PowerCycleRemediations made from this template.
	// +required
	Spec PowerCycleRemediationSpec `json:"spec"`
}

// PowerCycleRemediationTemplateSpec holds the template.
type PowerCycleRemediationTemplateSpec struct {
	// template is the PowerCycleRemediation to create for each unhealthy node.
	// +required
	Template PowerCycleRemediationTemplateResource `json:"template"`
}

// PowerCycleRemediationTemplate says how to power-cycle the nodes of one pool; health checks reference
// it in remediationTemplate. Write one per node pool.
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=powercycleremediationtemplates,shortName=pcrt,categories=metalheal
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.template.spec.strategy`
// +kubebuilder:printcolumn:name="Retries",type=integer,JSONPath=`.spec.template.spec.deleteAfterRetries`
// +kubebuilder:printcolumn:name="Off-Timeout",type=integer,JSONPath=`.spec.template.spec.powerOffTimeoutSeconds`
// +kubebuilder:printcolumn:name="On-Timeout",type=integer,JSONPath=`.spec.template.spec.powerOnTimeoutSeconds`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PowerCycleRemediationTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the template.
	// +required
	Spec PowerCycleRemediationTemplateSpec `json:"spec"`
}

// PowerCycleRemediationTemplateList is a list of PowerCycleRemediationTemplates.
// +kubebuilder:object:root=true
type PowerCycleRemediationTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PowerCycleRemediationTemplate `json:"items"`
}

// GetConditions returns the remediation's conditions. Health checks read a request's Succeeded condition
// through it when they serve this kind from a typed cache.
func (r *PowerCycleRemediation) GetConditions() []metav1.Condition { return r.Status.Conditions }
