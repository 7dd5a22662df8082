package v1alpha1

// Condition types and reasons. The remediation request conditions (Processing, Succeeded,
// PermanentNodeDeletionExpected) are the external remediation contract that health checkers from other
// projects (medik8s NodeHealthCheck) read: keep their names.
const (
	// ConditionProcessing is True while a remediation is acting on its target.
	ConditionProcessing = "Processing"
	// ConditionSucceeded is True when the remediation brought the target back (or fenced it, for
	// power-off), False when it gave up: the health check then escalates to its next template.
	ConditionSucceeded = "Succeeded"
	// ConditionPermanentNodeDeletionExpected is True when the remediation will delete the target (its
	// Machine), so the health check does not wait for the same Node to come back.
	ConditionPermanentNodeDeletionExpected = "PermanentNodeDeletionExpected"
	// ConditionLeaseAcquired is True while the remediation holds the node's maintenance lease.
	ConditionLeaseAcquired = "LeaseAcquired"
	// ConditionBMCReady is True when the node's BMC and its credentials were found and a driver built.
	ConditionBMCReady = "BMCReady"
	// ConditionWorkloadClusterReachable (PowerCycleRemediation) is False while the Cluster API workload
	// cluster that holds the request's Node cannot be reached; set only for such a request.
	ConditionWorkloadClusterReachable = "WorkloadClusterReachable"

	// ConditionReachable (BMC) is True when the BMC answered the last check.
	ConditionReachable = "Reachable"
	// ConditionCredentialsValid (BMC) is True when the BMC accepted the credentials at the last check.
	ConditionCredentialsValid = "CredentialsValid"
	// ConditionCredentialsProtected (BMC) is False when the BMC's credentials travel where anyone on the
	// network path can take them: in clear (plain HTTP: redfish+http, ironic without +https), or over TLS
	// to whoever answers (certificate verification disabled). It says how the address and spec send them,
	// whatever the last check found, and does not stop the BMC from being used: it is the admin's warning.
	ConditionCredentialsProtected = "CredentialsProtected"

	// ConditionRemediationAllowed (health checks) is False while the unhealthy budget short-circuits.
	ConditionRemediationAllowed = "RemediationAllowed"
	// ConditionStormActive (NodeHealthCheck, MachineHealthCheck) is True while a remediation storm holds remediation back,
	// including the cooldown after it.
	ConditionStormActive = "StormActive"
	// ConditionDisabled (NodeHealthCheck, MachineHealthCheck) is True when the check cannot work, e.g. its
	// template is missing or its kinds cannot be watched.
	ConditionDisabled = "Disabled"
	// ConditionPaused (health checks) is True while remediation is paused.
	ConditionPaused = "Paused"
)

// Condition reasons.
const (
	ReasonRemediationStarted   = "RemediationStarted"
	ReasonDiagnosing           = "Diagnosing"
	ReasonShuttingDown         = "ShuttingDown"
	ReasonPoweringOff          = "PoweringOff"
	ReasonPoweringOn           = "PoweringOn"
	ReasonWaitingForNode       = "WaitingForNode"
	ReasonNodeReady            = "NodeReady"
	ReasonFenced               = "Fenced"
	ReasonRetrying             = "Retrying"
	ReasonRetriesExhausted     = "RetriesExhausted"
	ReasonMachineDeleted       = "MachineDeleted"
	ReasonTimedOut             = "TimedOut"
	ReasonRemediationCancelled = "RemediationCancelled"
	ReasonLeaseHeldByOther     = "LeaseHeldByOther"
	ReasonLeaseAcquired        = "LeaseAcquired"
	ReasonNodeNotFound         = "NodeNotFound"
	ReasonBMCNotFound          = "BMCNotFound"
	ReasonBMCAmbiguous         = "BMCAmbiguous"
	ReasonSecretNotFound       = "SecretNotFound"
	ReasonInvalidCredentials   = "InvalidCredentials"
	ReasonInvalidAddress       = "InvalidAddress"
	ReasonBMCUnreachable       = "Unreachable"
	ReasonAuthenticationFailed = "AuthenticationFailed"
	ReasonBMCTimeout           = "Timeout"
	ReasonUnsupported          = "Unsupported"
	ReasonCheckSucceeded       = "CheckSucceeded"
	ReasonTemplateNotFound     = "TemplateNotFound"
	ReasonTemplateInvalid      = "TemplateInvalid"
	ReasonInvalidBudget        = "InvalidBudget"
	ReasonInvalidSelector      = "InvalidSelector"
	ReasonPauseRequested       = "PauseRequested"
	ReasonTooManyUnhealthy     = "TooManyUnhealthy"
	ReasonWithinBudget         = "WithinBudget"
	ReasonStormCooldown        = "StormCooldown"
	ReasonNoStorm              = "NoStorm"
	ReasonAsExpected           = "AsExpected"

	// Reasons of a BMC's CredentialsProtected condition.
	//
	// ReasonPlainHTTP (False): the address's scheme is plain HTTP (redfish+http, ironic, ironic+http): the
	// Redfish login or basic-auth header, or Ironic's basic auth, crosses the network readable.
	ReasonPlainHTTP = "PlainHTTP"
	// ReasonCertificateNotVerified (False): HTTPS with spec.disableCertificateVerification: encrypted, but
	// to whoever answers at the BMC's address.
	ReasonCertificateNotVerified = "CertificateNotVerified"
	// ReasonTLSVerified (True): HTTPS, with the BMC's certificate verified.
	ReasonTLSVerified = "TLSVerified"
	// ReasonIPMISession (True): IPMI over an RMCP+ session: the password itself is never sent.
	ReasonIPMISession = "IPMISession"

	// ReasonNamespaceNotTrusted (Processing=False, Succeeded=False on a PowerCycleRemediation): the
	// request is in a namespace the remediator was not told to act in (--remediation-namespaces); it was
	// refused without touching the host, its node or its lease.
	ReasonNamespaceNotTrusted = "NamespaceNotTrusted"
	// ReasonNodeNotInThisCluster (Processing=False, Succeeded=False on a PowerCycleRemediation): the
	// request's Machine has its Node in a Cluster API workload cluster, and the Node of that name in the
	// remediator's own cluster is not the Machine's; it was refused without touching a host, a Node or a
	// lease.
	ReasonNodeNotInThisCluster = "NodeNotInThisCluster"
	// ReasonWorkloadClusterUnreachable (WorkloadClusterReachable=False on a PowerCycleRemediation): the
	// workload cluster of the request's Node does not answer, or its kubeconfig Secret cannot be used.
	ReasonWorkloadClusterUnreachable = "WorkloadClusterUnreachable"
	// ReasonRemediationKindNotWatchable (Disabled): the manager cannot watch a template or remediation
	// kind the check names (typically no ClusterRole grants it get, list and watch); the message says which
	// and how to grant it. The kind is tried again with a backoff.
	ReasonRemediationKindNotWatchable = "RemediationKindNotWatchable"
	// ReasonRemediationKindRefused (Disabled): a kind the check names is not a remediation kind (a
	// built-in kind such as Node, one of Cluster API's own kinds such as Machine, or too many distinct
	// kinds); the message says which. Nothing of it is watched; the check works again once its spec is
	// fixed.
	ReasonRemediationKindRefused = "RemediationKindRefused"
	// ReasonClusterAPINotInstalled (Disabled, MachineHealthCheck): the API server serves no Cluster API
	// Machines and Clusters in a version the controller reads (v1beta2 or v1beta1). Looked at again every
	// --cluster-api-recheck-interval: installing Cluster API needs no restart.
	ReasonClusterAPINotInstalled = "ClusterAPINotInstalled"
	// ReasonKubeconfigNotReadable (Disabled, MachineHealthCheck): the manager may not read the Cluster's
	// <cluster>-kubeconfig Secret; the message names the Role it needs (the Cluster's namespace is missing
	// from --cluster-namespaces and the kubeconfig-readers component).
	ReasonKubeconfigNotReadable = "KubeconfigNotReadable"
)

// The Node condition the power watch writes (BMC spec.powerWatch): a health check that lists
// {type: PoweredOff, status: "True", duration: 0s} among its unhealthy conditions fences the host on its
// BMC's word, at once. Only this condition is written, with a strategic merge patch of the Node's status;
// the kubelet keeps its own.
const (
	// NodeConditionPoweredOff is True when the host's BMC reported it off, read it off again, and the
	// host's kubelet did not answer either, while no metalheal remediation was at work on it; False once
	// the host is back: the BMC reads it on and its kubelet reported Ready since. Absent on Nodes whose BMC
	// never reported them off.
	NodeConditionPoweredOff = "PoweredOff"
	// ReasonBMCReportedOff (PoweredOff=True): the BMC reported the host off (message: when, and whether
	// its event stream or a poll told), and the kubelet did not answer.
	ReasonBMCReportedOff = "BMCReportedOff"
	// ReasonBMCReportedOn (PoweredOff=False): the BMC reports the host on again, and its kubelet reported
	// Ready since it went off.
	ReasonBMCReportedOn = "BMCReportedOn"
)

// Condition reasons of a remediation that lets go of its Node while another request for the same Node
// carries on (one hand per host).
const (
	// ReasonHandedOver (Processing=False): the request is done with the host and left it as it was (off
	// and fenced, say) for the next remediation of the Node: it was timed out by its health check.
	ReasonHandedOver = "HandedOver"
)

// Well-known annotations, labels and taints.
const (
	// AnnotationNodeName on a remediation request names the Node to remediate (medik8s convention).
	AnnotationNodeName = "remediation.medik8s.io/node-name"
	// AnnotationTemplateName on a remediation request names the template it was made from.
	AnnotationTemplateName = "remediation.medik8s.io/template-name"
	// AnnotationTimedOut on a remediation request says the health check gave up on it (RFC 3339 time):
	// the remediator must stop and clean up.
	AnnotationTimedOut = "remediation.medik8s.io/nhc-timed-out"
	// AnnotationClonedFromName and AnnotationClonedFromGroupKind record the template (Cluster API).
	AnnotationClonedFromName      = "cluster.x-k8s.io/cloned-from-name"
	AnnotationClonedFromGroupKind = "cluster.x-k8s.io/cloned-from-groupkind"
	// LabelExcludeFromRemediation=true on a Node keeps every health check and remediator away from it.
	LabelExcludeFromRemediation = "remediation.medik8s.io/exclude-from-remediation"
	// AnnotationConfirmedHealthy on a Node is a person's word that it is healthy again (medik8s'
	// annotation): with a negative healthyDelay, a health check keeps the Node's remediation until it is
	// set, and removes it once it has deleted the requests it confirmed.
	AnnotationConfirmedHealthy = "remediation.medik8s.io/manually-confirmed-healthy"

	// TaintOutOfService is Kubernetes' non-graceful node shutdown taint key (value nodeshutdown,
	// effect NoExecute): pods are force-deleted and volumes detached.
	TaintOutOfService = "node.kubernetes.io/out-of-service"
	// TaintOutOfServiceValue is the value metalheal sets on the out-of-service taint.
	TaintOutOfServiceValue = "nodeshutdown"
	// TaintRemediation (NoSchedule) marks a Node being remediated by metalheal.
	TaintRemediation = "remediation.metalheal.io/power-cycle"

	// AnnotationAppliedTaints is a Node annotation that earlier versions wrote to list the taints
	// metalheal's remediations added. It is no longer written or read: anyone who may patch a Node's
	// annotations could write it, so which taints are metalheal's is recorded only in the requests'
	// status.appliedTaints. The remediator drops it from a Node it untaints.
	AnnotationAppliedTaints = "remediation.metalheal.io/applied-taints"

	// FinalizerPowerCycle lets the remediator power the host back on and clean up before a request goes.
	FinalizerPowerCycle = "remediation.metalheal.io/power-cycle"
)
