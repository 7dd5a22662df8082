package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// NodeHealthCheckSpec says which Nodes to check, when one is unhealthy, how many may be remediated at
// once, and with which remediation template(s).
// +kubebuilder:validation:XValidation:rule="!(has(self.minHealthy) && has(self.maxUnhealthy))",message="set minHealthy or maxUnhealthy, not both"
// +kubebuilder:validation:XValidation:rule="has(self.remediationTemplate) != has(self.escalatingRemediations)",message="set exactly one of remediationTemplate or escalatingRemediations"
type NodeHealthCheckSpec struct {
	// selector selects the Nodes to check. Defaults to the worker nodes
	// (node-role.kubernetes.io/worker exists). It must not be empty: an empty selector would select
	// every Node, control plane included; omit it for the default.
	// +optional
	// +kubebuilder:default={matchExpressions:{{key:"node-role.kubernetes.io/worker",operator:"Exists"}}}
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="selector must not be empty: give matchLabels or matchExpressions, or omit it to select worker nodes"
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// unhealthyConditions are the Node conditions that make a Node unhealthy when any one of them has held
	// for at least its duration (logical OR). Defaults to Ready=False and Ready=Unknown for 300s.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:default={{type:"Ready",status:"False",duration:"300s"},{type:"Ready",status:"Unknown",duration:"300s"}}
	UnhealthyConditions []NodeUnhealthyCondition `json:"unhealthyConditions,omitempty"`

	// maxUnhealthy stops new remediations while more than this many selected Nodes are unhealthy: an
	// integer, or a percentage of the selected Nodes rounded down. When neither maxUnhealthy nor
	// minHealthy is set, maxUnhealthy 49% applies. Mutually exclusive with minHealthy.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxUnhealthy must be a non-negative integer or a percentage from 0% to 100%, e.g. 49%"
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`

	// minHealthy stops new remediations while fewer than this many selected Nodes are healthy: an integer,
	// or a percentage of the selected Nodes rounded up. Mutually exclusive with maxUnhealthy.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="minHealthy must be a non-negative integer or a percentage from 0% to 100%, e.g. 51%"
	MinHealthy *intstr.IntOrString `json:"minHealthy,omitempty"`

	// remediationTemplate is the template of the remediation request to create for an unhealthy Node.
	// Its namespace is required. Mutually exclusive with escalatingRemediations.
	// +optional
	// +kubebuilder:validation:XValidation:rule="has(self.__namespace__) && size(self.__namespace__) > 0",message="remediationTemplate.namespace is required: a NodeHealthCheck is cluster-scoped"
	RemediationTemplate *TemplateReference `json:"remediationTemplate,omitempty"`

	// escalatingRemediations are remediation steps tried in ascending order: a step ends when its timeout
	// passes or its request reports Succeeded=False, and the next step starts. Mutually exclusive with
	// remediationTemplate.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y.order == x.order))",message="escalatingRemediations must have distinct order values"
	// +kubebuilder:validation:XValidation:rule="self.all(x, has(x.remediationTemplate.__namespace__) && size(x.remediationTemplate.__namespace__) > 0)",message="each escalation step's remediationTemplate.namespace is required: a NodeHealthCheck is cluster-scoped"
	EscalatingRemediations []EscalatingRemediation `json:"escalatingRemediations,omitempty"`

	// dryRun, when true, makes the check decide everything and start nothing: a target it would remediate
	// is reported in status (skipReason DryRun, and what it would create or do in skipMessage), in one
	// WouldRemediate event per target and step, and in metalheal_healthcheck_would_remediate, but no
	// request is created, no lease taken and no Machine handed to its owner. Remediations already running
	// (started before dryRun was set) go on and are cleaned up as usual. For adopting metalheal on a live
	// fleet: see what it would have done before it acts.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`

	// pauseRequests pause new remediations while non-empty: each entry is a free-text reason, e.g.
	// "cluster upgrade". Remediations already running continue.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	PauseRequests []string `json:"pauseRequests,omitempty"`

	// healthyDelay is how long a Node must stay healthy before its remediation request is deleted, so a
	// flapping Node is not released too early. A negative value keeps the request until a person annotates
	// the Node remediation.medik8s.io/manually-confirmed-healthy (medik8s' rule). Defaults to 0s.
	// +optional
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^-?([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h), or a negative one such as -1s: kept until a person annotates the Node remediation.medik8s.io/manually-confirmed-healthy"
	HealthyDelay *metav1.Duration `json:"healthyDelay,omitempty"`

	// stormCooldownDuration keeps remediation paused this long after a remediation storm ends (the
	// unhealthy budget was exceeded and is satisfied again), so a cluster-wide outage is not followed by
	// a burst of power cycles while it settles. Defaults to 0s.
	// +optional
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	StormCooldownDuration *metav1.Duration `json:"stormCooldownDuration,omitempty"`

	// remediationBackoff slows down the remediation of a Node that keeps failing again after its
	// remediations (see RemediationBackoff). On by default: after 3 remediations within 6h, the next waits
	// 15m after the last started, doubling up to 2h; after: 0 turns it off.
	// +optional
	// +kubebuilder:default={}
	RemediationBackoff *RemediationBackoff `json:"remediationBackoff,omitempty"`
}

// NodeUnhealthyCondition is a Node condition that makes a Node unhealthy once it has held for duration.
type NodeUnhealthyCondition struct {
	// type is the Node condition type, e.g. Ready.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	Type string `json:"type"`

	// status is the condition status that counts as unhealthy: True, False or Unknown.
	// +required
	Status ConditionStatusString `json:"status"`

	// duration is how long the condition must hold, e.g. 300s or 5m.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	Duration metav1.Duration `json:"duration"`
}

// NodeHealthCheckPhase summarises what a NodeHealthCheck is doing.
// +kubebuilder:validation:Enum=Disabled;Paused;Remediating;Enabled
type NodeHealthCheckPhase string

const (
	// PhaseDisabled: the check cannot work (e.g. its template is missing); reason says why.
	PhaseDisabled NodeHealthCheckPhase = "Disabled"
	// PhasePaused: pauseRequests are set; no new remediation starts.
	PhasePaused NodeHealthCheckPhase = "Paused"
	// PhaseRemediating: at least one remediation is in flight.
	PhaseRemediating NodeHealthCheckPhase = "Remediating"
	// PhaseEnabled: the check works and no remediation is in flight. Unhealthy Nodes may still be
	// waiting for their duration, skipped, or held back by a storm: reason says which.
	PhaseEnabled NodeHealthCheckPhase = "Enabled"
)

// UnhealthyNode is a Node the check found unhealthy and the remediations it started for it.
type UnhealthyNode struct {
	// name is the Node's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	RemediationProgress `json:",inline"`
}

// NodeHealthCheckStatus is what the check last observed.
type NodeHealthCheckStatus struct {
	// observedNodes is the number of Nodes the selector matches.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedNodes *int32 `json:"observedNodes,omitempty"`

	// healthyNodes is the number of those Nodes that fail none of unhealthyConditions now: a Node failing
	// one whose duration has not passed yet is not counted, as the budget does not count it as healthy.
	// +optional
	// +kubebuilder:validation:Minimum=0
	HealthyNodes *int32 `json:"healthyNodes,omitempty"`

	// inFlightRemediations maps a Node's name to when its remediation started.
	// +optional
	InFlightRemediations map[string]metav1.Time `json:"inFlightRemediations,omitempty"`

	// unhealthyNodes are the Nodes found unhealthy, with the remediations started for them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=10000
	UnhealthyNodes []UnhealthyNode `json:"unhealthyNodes,omitempty"`

	// phase summarises what the check is doing: Disabled (it cannot work), Paused (pauseRequests are
	// set), Remediating (at least one remediation is in flight) or Enabled (none is; a storm leaves the
	// phase as it is, and reason and the StormActive condition say so).
	// +optional
	Phase NodeHealthCheckPhase `json:"phase,omitempty"`

	// reason explains the phase in a sentence for humans.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// lastUpdateTime is when the status last changed.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`

	// recentRemediations are the Nodes whose remediation started within remediationBackoff's window, with
	// the start times: the back-off's memory. Empty when the back-off is off.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=10000
	RecentRemediations []RecentRemediation `json:"recentRemediations,omitempty"`

	// conditions: Disabled (True while the check cannot work), Paused (True while pauseRequests are set),
	// RemediationAllowed (False while the budget short-circuits remediation) and StormActive (True while
	// the budget is exceeded and for stormCooldownDuration after).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeHealthCheck checks the health of Nodes directly (no Machine API needed, e.g. user-provisioned and
// bare-metal clusters) and creates remediation requests for the unhealthy ones within a budget.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=nodehealthchecks,scope=Cluster,shortName=nhc,categories=metalheal
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Observed",type=integer,JSONPath=`.status.observedNodes`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.healthyNodes`
// +kubebuilder:printcolumn:name="Storm",type=string,JSONPath=`.status.conditions[?(@.type=="StormActive")].status`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeHealthCheck struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what to check and how to remediate.
	// +required
	Spec NodeHealthCheckSpec `json:"spec"`

	// status is what the check last observed.
	// +optional
	Status NodeHealthCheckStatus `json:"status,omitempty"`
}

// NodeHealthCheckList is a list of NodeHealthChecks.
// +kubebuilder:object:root=true
type NodeHealthCheckList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeHealthCheck `json:"items"`
}
