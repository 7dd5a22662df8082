package nhc

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/metalheal/metalheal/internal/engine"
)

// Event reasons. Each is emitted on the NodeHealthCheck (with the Node as the related object when there is
// one) when a decision changes, never on every reconcile.
const (
	// EventRemediationCreated: a remediation request was created for an unhealthy Node.
	EventRemediationCreated = "RemediationCreated"
	// EventRemediationTimedOut: an escalation step ran out of time, or its step was removed from the spec;
	// its request was marked timed out.
	EventRemediationTimedOut = engine.EventRemediationTimedOut
	// EventRemediationFailed: the remediator reported Succeeded=False; the request was marked timed out,
	// unless it was the last step's (engine.Ending.Marked).
	EventRemediationFailed = engine.EventRemediationFailed
	// EventRemediationsExhausted: the last step ended and the Node is still unhealthy.
	EventRemediationsExhausted = engine.EventRemediationsExhausted
	// EventRemediationFinished: the Node is healthy again; its remediation requests are being deleted.
	EventRemediationFinished = engine.EventRemediationFinished
	// EventWaitingForConfirmation: a Node is healthy again and, healthyDelay being negative, its
	// remediation waits for a person to confirm it (v1alpha1.AnnotationConfirmedHealthy).
	EventWaitingForConfirmation = engine.EventWaitingForConfirmation
	// EventNodeGone: a remediated Node was deleted; its remediation requests are being deleted.
	EventNodeGone = "NodeGone"
	// EventWaitingForHandOver: the next escalation step waits until the request of the step that ended is
	// finished with the host (deleted, or Processing=False); emitted once per request waited for.
	EventWaitingForHandOver = engine.EventWaitingForHandOver
	// EventHandOverTimedOut: a request of an ended step did not report that it is finished with the host
	// within template.HandOverBound of its timed-out mark; the next step starts anyway.
	EventHandOverTimedOut = engine.EventHandOverTimedOut

	// EventSkippedExcluded: the Node carries the exclude-from-remediation label.
	EventSkippedExcluded = "SkippedExcluded"
	// EventSkippedOwnedByOtherCheck: another NodeHealthCheck owns the Node (the overlapping rule).
	EventSkippedOwnedByOtherCheck = "SkippedOwnedByOtherCheck"
	// EventSkippedControlPlaneBusy: another control-plane Node is being remediated.
	EventSkippedControlPlaneBusy = "SkippedControlPlaneBusy"
	// EventSkippedLeaseHeld: someone else (e.g. node maintenance) holds the Node's lease.
	EventSkippedLeaseHeld = "SkippedLeaseHeld"
	// EventSkippedRemediationExists: a remediation request with the Node's name exists that this check did
	// not create.
	EventSkippedRemediationExists = "SkippedRemediationExists"
	// EventRemediationBackingOff (Normal): the Node is unhealthy again after too many remediations within
	// remediationBackoff's window; its next remediation waits (once per hold, with the hold's end).
	EventRemediationBackingOff = engine.EventRemediationBackingOff
	// EventLeaseNotRenewed: the lease of a Node under remediation could not be renewed.
	EventLeaseNotRenewed = "LeaseNotRenewed"
	// EventNodeLeaseReleased (Normal): the check released the lease of a Node it no longer remediates.
	EventNodeLeaseReleased = "NodeLeaseReleased"

	// The check-wide events (engine.DecideCheckWide): EventRemediationShortCircuited, too many Nodes are
	// unhealthy, no new remediation starts (a storm); EventStormCooldown, the budget is met again,
	// remediation resumes after stormCooldownDuration; EventStormEnded, remediation resumes after a storm;
	// EventPaused and EventUnpaused, pauseRequests were set or cleared; EventDisabled, a remediation
	// template is missing or malformed, or the spec cannot be used; EventEnabled, the check works again.
	EventRemediationShortCircuited = engine.EventRemediationShortCircuited
	EventStormCooldown             = engine.EventStormCooldown
	EventStormEnded                = engine.EventStormEnded
	EventPaused                    = engine.EventPaused
	EventUnpaused                  = engine.EventUnpaused
	EventDisabled                  = engine.EventDisabled
	EventEnabled                   = engine.EventEnabled
)

// Event actions (the events.k8s.io "action" field).
const (
	actionCreate  = "CreateRemediation"
	actionTimeout = "TimeOutRemediation"
	actionDelete  = "DeleteRemediation"
	actionSkip    = "SkipRemediation"
	actionLease   = "RenewLease"
	actionCheck   = "CheckNodes"
	// actionWait is a decision recorded in status (waitingFor), like actionSkip and actionCheck.
	actionWait = "WaitForHandOver"
)

// eventActions are the actions of the engine's events; a skip's is actionSkip.
var eventActions = map[string]string{
	engine.EventRemediationTimedOut:    actionTimeout,
	engine.EventRemediationFailed:      actionTimeout,
	engine.EventRemediationsExhausted:  actionTimeout,
	engine.EventWaitingForHandOver:     actionWait,
	engine.EventHandOverTimedOut:       actionCreate,
	engine.EventWaitingForConfirmation: actionWait,
	engine.EventRemediationFinished:    actionDelete,
	EventRemediationShortCircuited:     actionCheck,
	EventStormCooldown:                 actionCheck,
	EventStormEnded:                    actionCheck,
	EventPaused:                        actionCheck,
	EventUnpaused:                      actionCheck,
	EventDisabled:                      actionCheck,
	EventEnabled:                       actionCheck,
}

// skipEvents maps a per-node skip reason to its event reason.
var skipEvents = map[string]string{
	SkipExcluded:          EventSkippedExcluded,
	SkipOwnedByOtherCheck: EventSkippedOwnedByOtherCheck,
	SkipControlPlaneBusy:  EventSkippedControlPlaneBusy,
	SkipLeaseHeldByOther:  EventSkippedLeaseHeld,
	SkipRemediationExists: EventSkippedRemediationExists,
}

// event is an event decide asks for; execute emits it.
type event struct {
	Type    string
	Reason  string
	Action  string
	Node    string // the related Node, if any
	Message string
}

func normal(reason, action, node, msg string) event {
	return event{Type: corev1.EventTypeNormal, Reason: reason, Action: action, Node: node, Message: msg}
}

func warning(reason, action, node, msg string) event {
	return event{Type: corev1.EventTypeWarning, Reason: reason, Action: action, Node: node, Message: msg}
}
