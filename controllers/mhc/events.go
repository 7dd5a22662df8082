package mhc

import "github.com/metalheal/metalheal/internal/engine"

// Event reasons. Events about one Machine regard the Machine (with the MachineHealthCheck as related
// object); events about the whole check regard the MachineHealthCheck. They are emitted on transitions,
// not on every reconcile.
const (
	// EventMachineMarkedUnhealthy (Normal): OwnerRemediated was set to False so the Machine's owner
	// replaces it (condition-based remediation).
	EventMachineMarkedUnhealthy = "MachineMarkedUnhealthy"
	// EventRemediationRequestCreated (Normal): a remediation request was created from a template.
	EventRemediationRequestCreated = "RemediationRequestCreated"
	// EventRemediationRequestTimedOut (Warning): a remediation step ended (its timeout passed, its request
	// reported Succeeded=False, or its step was removed from the spec) and its request was marked timed
	// out; the last step's failed request is not marked, and gets no such event (engine.Ending.Marked).
	EventRemediationRequestTimedOut = "RemediationRequestTimedOut"
	// EventRemediationsExhausted (Warning): the last remediation step ended and the Machine is still
	// unhealthy; nothing more is tried until it recovers or the spec changes.
	EventRemediationsExhausted = "RemediationsExhausted"
	// EventRemediationRequestDeleted (Normal): the Machine is healthy again (or, after a spec change, an
	// ended step's request holds the name the next step needs) and its remediation request was deleted.
	EventRemediationRequestDeleted = "RemediationRequestDeleted"
	// EventWaitingForConfirmation: the Machine's Node is healthy again and, healthyDelay being negative,
	// its remediation waits for a person to confirm it (v1alpha1.AnnotationConfirmedHealthy).
	EventWaitingForConfirmation = engine.EventWaitingForConfirmation
	// EventWaitingForHandOver (Normal): the next escalation step waits until the request of the step that
	// ended is finished with the host (deleted, or Processing=False); once per request waited for.
	EventWaitingForHandOver = "WaitingForHandOver"
	// EventHandOverTimedOut (Warning): a request of an ended step did not report that it is finished with
	// the host within template.HandOverBound of its timed-out mark; the next step starts anyway.
	EventHandOverTimedOut = "HandOverTimedOut"
	// EventRemediationBackingOff (Normal): the Machine is unhealthy again after too many remediations within
	// remediationBackoff's window; its next remediation waits (once per hold, with the hold's end).
	EventRemediationBackingOff = engine.EventRemediationBackingOff
	// EventMachineNotRemediable (Warning): an unhealthy Machine is not controlled by a MachineSet or a
	// control plane; it is reported, not remediated.
	EventMachineNotRemediable = "MachineNotRemediable"
	// EventRemediationRestricted (Warning): the unhealthy budget (maxUnhealthy or unhealthyRange) stops
	// remediation.
	EventRemediationRestricted = "RemediationRestricted"
	// EventWorkloadClusterUnreachable (Warning): the workload cluster's Nodes cannot be read through the
	// <clusterName>-kubeconfig Secret.
	EventWorkloadClusterUnreachable = "WorkloadClusterUnreachable"
	// EventDisabled (Warning): the check cannot work (its Disabled condition says why: a template missing
	// or unusable, a spec the API server let through but the check cannot act on, a kind it names that
	// cannot be watched, ...); no remediation starts until it can. EventEnabled (Normal): it can again.
	EventDisabled = engine.EventDisabled
	EventEnabled  = engine.EventEnabled
	// EventRemediationSkipped (Warning): an unhealthy Machine is not remediated because of a safety gate
	// shared with the NodeHealthCheck: another check owns it (OwnedByOtherCheck), another control-plane
	// Machine is being remediated (ControlPlaneBusy), its Node's lease is held by someone else
	// (LeaseHeldByOther), or a request of its name exists that this check did not create
	// (RemediationExists). Once per reason and message; status.unhealthyMachines[].skipReason says so too.
	EventRemediationSkipped = "RemediationSkipped"
	// EventStormCooldown (Normal): the budget is satisfied again but remediation waits out
	// stormCooldownDuration. EventStormEnded (Normal): the storm is over, remediation resumes.
	EventStormCooldown = engine.EventStormCooldown
	EventStormEnded    = engine.EventStormEnded
	// EventPaused and EventUnpaused: the check (pauseRequests... or its Cluster) was paused, or no longer is.
	EventPaused   = engine.EventPaused
	EventUnpaused = engine.EventUnpaused
	// EventLeaseNotRenewed (Warning): a Machine's remediation runs but its Node's lease is now held by
	// someone else.
	EventLeaseNotRenewed = "LeaseNotRenewed"
)

// Event actions (the events.k8s.io "action" field).
const (
	actionCheck     = "HealthCheck"
	actionRemediate = "Remediate"
)
