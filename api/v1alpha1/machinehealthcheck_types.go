package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MachineHealthCheckSpec says which Cluster API Machines to check, when one is unhealthy, how many may be
// remediated at once, and how.
// +kubebuilder:validation:XValidation:rule="!(has(self.remediationTemplate) && has(self.escalatingRemediations))",message="set remediationTemplate or escalatingRemediations, not both"
type MachineHealthCheckSpec struct {
	// clusterName is the Cluster API cluster the Machines belong to. When it is set and the Secret
	// <clusterName>-kubeconfig exists in this namespace, Nodes are read from that workload cluster;
	// otherwise from this API server.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ClusterName string `json:"clusterName,omitempty"`

	// selector selects the Machines to check. It must not be empty: an empty selector would select every
	// Machine in the namespace.
	// +required
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="selector must not be empty: give matchLabels or matchExpressions"
	Selector metav1.LabelSelector `json:"selector"`

	// unhealthyConditions are the Node conditions that make a Machine unhealthy when any one of them has
	// held for at least its timeout (logical OR).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	UnhealthyConditions []MachineUnhealthyCondition `json:"unhealthyConditions,omitempty"`

	// unhealthyMachineConditions are the Machine's own conditions that make it unhealthy when any one of
	// them has held for at least its timeout (Cluster API v1.14's checks.unhealthyMachineConditions): an
	// infrastructure provider's report that the host failed, say, before its Node notices anything. They
	// are looked at whatever the Node's state, and a Machine they find unhealthy is reported with reason
	// UnhealthyMachine.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	UnhealthyMachineConditions []MachineUnhealthyCondition `json:"unhealthyMachineConditions,omitempty"`

	// nodeStartupTimeout is how long a Machine may take to get a Node before it is unhealthy. "0s"
	// disables the check; otherwise it must be at least 30s. Defaults to 10m.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) == duration('0s') || duration(self) >= duration('30s')",message="nodeStartupTimeout must be 0s (disabled) or at least 30s"
	NodeStartupTimeout *metav1.Duration `json:"nodeStartupTimeout,omitempty"`

	// maxUnhealthy stops remediation while more than this many selected Machines are unhealthy: an
	// integer, or a percentage of the selected Machines rounded down. Defaults to 100%.
	// +optional
	// +kubebuilder:default="100%"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxUnhealthy must be a non-negative integer or a percentage from 0% to 100%, e.g. 40%"
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`

	// unhealthyRange allows remediation only while the number of unhealthy Machines is within the
	// inclusive range "[min-max]", e.g. "[3-5]". It takes precedence over maxUnhealthy.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^\\\\[[0-9]+-[0-9]+\\\\]$')",message="unhealthyRange must be an inclusive range like [3-5]"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^\\\\[[0-9]+-[0-9]+\\\\]$') || int(self.substring(1, self.indexOf('-'))) <= int(self.substring(self.indexOf('-') + 1, size(self) - 1))",message="unhealthyRange must be [min-max] with min <= max"
	UnhealthyRange string `json:"unhealthyRange,omitempty"`

	// remediationTemplate is the template of the external remediation request to create for an unhealthy
	// Machine, in this namespace. Without it (and without escalatingRemediations) the Machine is marked
	// for its owner (MachineSet or control plane) to replace: Cluster API's condition-based remediation.
	// +optional
	RemediationTemplate *TemplateReference `json:"remediationTemplate,omitempty"`

	// escalatingRemediations are remediation steps tried in ascending order: a step ends when its timeout
	// passes or its request reports Succeeded=False, and the next step starts.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y.order == x.order))",message="escalatingRemediations must have distinct order values"
	EscalatingRemediations []EscalatingRemediation `json:"escalatingRemediations,omitempty"`

	// healthyDelay is how long a Machine's Node must stay healthy before its remediation request is
	// deleted, so a flapping Node keeps its request (the NodeHealthCheck's healthyDelay). A negative value
	// keeps the request until a person annotates the Node remediation.medik8s.io/manually-confirmed-healthy
	// (medik8s' NodeHealthCheck's rule). Defaults to 0s.
	// +optional
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^-?([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h), or a negative one such as -1s: kept until a person annotates the Node remediation.medik8s.io/manually-confirmed-healthy"
	HealthyDelay *metav1.Duration `json:"healthyDelay,omitempty"`

	// dryRun, when true, makes the check decide everything and start nothing: a target it would remediate
	// is reported in status (skipReason DryRun, and what it would create or do in skipMessage), in one
	// WouldRemediate event per target and step, and in metalheal_healthcheck_would_remediate, but no
	// request is created, no lease taken and no Machine handed to its owner. Remediations already running
	// (started before dryRun was set) go on and are cleaned up as usual. For adopting metalheal on a live
	// fleet: see what it would have done before it acts.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`

	// stormCooldownDuration keeps remediation paused this long after a remediation storm ends (the
	// unhealthy budget was exceeded and is satisfied again): condition StormActive, reason StormCooldown
	// (the NodeHealthCheck's stormCooldownDuration). Defaults to 0s.
	// +optional
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	StormCooldownDuration *metav1.Duration `json:"stormCooldownDuration,omitempty"`

	// remediationBackoff slows down the remediation of a Machine that keeps failing again after its
	// remediations from a template (see RemediationBackoff). On by default: after 3 remediations within
	// 6h, the next waits 15m after the last started, doubling up to 2h; after: 0 turns it off.
	// Condition-based remediation (no template) is not held back: the owner replaces the Machine.
	// +optional
	// +kubebuilder:default={}
	RemediationBackoff *RemediationBackoff `json:"remediationBackoff,omitempty"`
}

// MachineUnhealthyCondition is a Node condition that makes a Machine unhealthy once it has held for timeout.
type MachineUnhealthyCondition struct {
	// type is the condition type, e.g. Ready (a Node's) or InfrastructureReady (a Machine's).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	Type string `json:"type"`

	// status is the condition status that counts as unhealthy: True, False or Unknown.
	// +required
	Status ConditionStatusString `json:"status"`

	// timeout is how long the condition must hold, e.g. 300s or 5m.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	Timeout metav1.Duration `json:"timeout"`
}

// EscalatingRemediation is one step of an escalation: a template tried for at most timeout.
type EscalatingRemediation struct {
	// remediationTemplate is the template of this step's remediation request.
	// +required
	RemediationTemplate TemplateReference `json:"remediationTemplate"`

	// order ranks the steps: lower orders are tried first. Orders must be distinct.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Order int32 `json:"order"`

	// timeout is how long this step may take before the next one starts, e.g. 20m. At least 1m.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) >= duration('1m')",message="timeout of an escalation step must be at least 1m"
	Timeout metav1.Duration `json:"timeout"`
}

// MachineHealthCheckStatus is what the check last observed.
type MachineHealthCheckStatus struct {
	// expectedMachines is the number of Machines the check selects: those the selector matches, less the
	// ones annotated cluster.x-k8s.io/skip-remediation or cluster.x-k8s.io/paused, which it leaves out.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ExpectedMachines *int32 `json:"expectedMachines,omitempty"`

	// currentHealthy is the number of those Machines that are healthy as the budget counts them: failing
	// no criterion (not even one whose timeout has not passed yet), with a Node, and not being deleted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CurrentHealthy *int32 `json:"currentHealthy,omitempty"`

	// remediationsAllowed is the budget's headroom: how many more Machines may become unhealthy before
	// the budget (maxUnhealthy or unhealthyRange) short-circuits; 0 while it short-circuits. It reflects
	// the budget alone: during a storm's cooldown, a pause or while the check is disabled it can be above
	// 0 while nothing new starts; the StormActive, Paused and Disabled conditions say so.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RemediationsAllowed *int32 `json:"remediationsAllowed,omitempty"`

	// targets are the names of the Machines the check selects (those counted in expectedMachines).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MaxLength=253
	Targets []string `json:"targets,omitempty"`

	// unhealthyMachines are the selected Machines found unhealthy, why, and the remediation requests
	// created for each (with remediationTemplate or escalatingRemediations). A Machine healthy again stays
	// in the list as long as its requests exist: through healthyDelay (conditionsHealthyTimestamp is set)
	// and while they are being deleted. The list is the check's memory of which escalation steps were tried.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=10000
	UnhealthyMachines []UnhealthyMachine `json:"unhealthyMachines,omitempty"`

	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// recentRemediations are the Machines whose remediation (from a template) started within
	// remediationBackoff's window, with the start times: the back-off's memory. backoffUntil says until
	// when an unhealthy Machine's next remediation is held back. Empty when the back-off is off.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=10000
	RecentRemediations []RecentRemediation `json:"recentRemediations,omitempty"`

	// conditions: Disabled (True while the check cannot work: the reason says why), RemediationAllowed
	// (False while the budget short-circuits remediation), StormActive (True while the budget is exceeded
	// and for stormCooldownDuration after) and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// UnhealthyMachine is a Machine a MachineHealthCheck found unhealthy, and the remediation requests it
// created for it.
type UnhealthyMachine struct {
	// name is the Machine's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// reason says why the Machine is unhealthy, with Cluster API's HealthCheckSucceeded reasons:
	// UnhealthyNode, NodeStartupTimeout, NodeDeleted, UnhealthyMachine (a terminal failure) or
	// HasRemediateAnnotation.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`

	RemediationProgress `json:",inline"`
}

// MachineHealthCheck checks the health of Cluster API Machines (cluster.x-k8s.io/v1beta2) and their Nodes,
// and remediates the unhealthy ones within a budget.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=machinehealthchecks,shortName=mmhc,categories=metalheal
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Expected",type=integer,JSONPath=`.status.expectedMachines`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.currentHealthy`
// +kubebuilder:printcolumn:name="Allowed",type=integer,JSONPath=`.status.remediationsAllowed`,description="More Machines that may become unhealthy before the budget short-circuits"
// +kubebuilder:printcolumn:name="Remediating",type=string,JSONPath=`.status.conditions[?(@.type=="RemediationAllowed")].status`,priority=1
// +kubebuilder:printcolumn:name="Storm",type=string,JSONPath=`.status.conditions[?(@.type=="StormActive")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MachineHealthCheck struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what to check and how to remediate.
	// +required
	Spec MachineHealthCheckSpec `json:"spec"`

	// status is what the check last observed.
	// +optional
	Status MachineHealthCheckStatus `json:"status,omitempty"`
}

// MachineHealthCheckList is a list of MachineHealthChecks.
// +kubebuilder:object:root=true
type MachineHealthCheckList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachineHealthCheck `json:"items"`
}
