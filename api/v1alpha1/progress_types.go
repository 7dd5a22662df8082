package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// RemediationProgress is what a health check remembers of a target (a Node, or a Machine) it remediates:
// the requests it created for it and where that remediation stands. Both kinds keep it the same way,
// inline in status.unhealthyNodes[] and status.unhealthyMachines[].
type RemediationProgress struct {
	// remediations are the remediation requests created for the target, oldest first: one per escalation
	// step tried.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Remediations []RequestRecord `json:"remediations,omitempty"`

	// conditionsHealthyTimestamp is when the target was first seen healthy again while it still had a
	// remediation request; the request is deleted healthyDelay after it (or once a person confirms the
	// Node healthy, when healthyDelay is negative).
	// +optional
	ConditionsHealthyTimestamp *metav1.Time `json:"conditionsHealthyTimestamp,omitempty"`

	// skipReason says why the check does not remediate the target now, when the cause is the target's
	// own: Excluded, OwnedByOtherCheck, ControlPlaneBusy, LeaseHeldByOther, RemediationExists or
	// BackingOff (remediationBackoff: recentRemediations[].backoffUntil says until when); or DryRun, for a
	// target a check in dry run (spec.dryRun) would remediate now (skipMessage says what it would do).
	// Empty while it is remediated, and when a check-wide cause (pause, storm, a disabled check) holds
	// every target back: the conditions say so then.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SkipReason string `json:"skipReason,omitempty"`

	// skipMessage explains skipReason for humans, e.g. which check or lease holder has the target.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	SkipMessage string `json:"skipMessage,omitempty"`

	// waitingFor names the request of an ended escalation step ("Kind namespace/name") that the next step
	// waits for: it starts once that request is finished with the host (deleted, or Processing=False), at
	// the latest 5 minutes after the request was marked timed out. Empty when nothing is waited for.
	// +optional
	// +kubebuilder:validation:MaxLength=400
	WaitingFor string `json:"waitingFor,omitempty"`
}

// SkipDryRun is the skipReason of a target that a check in dry run (spec.dryRun) would remediate: it
// passed every gate, and nothing was started.
const SkipDryRun = "DryRun"

// RequestRecord is one remediation request a health check created for a target. Records written before a
// field was kept leave it empty: an empty namespace or name is the target's (the request is then found by
// its kind and template).
type RequestRecord struct {
	// apiVersion of the remediation request, e.g. remediation.metalheal.io/v1alpha1.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	APIVersion string `json:"apiVersion,omitempty"`

	// kind of the remediation request, e.g. PowerCycleRemediation.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// namespace of the remediation request: its template's (a NodeHealthCheck's), or its Machine's.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// name of the remediation request: the target's name, or for a later escalation step whose request
	// would take the same name as an earlier one's, "<target>-<template>-<hash>".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// templateName is the template it was made from.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	TemplateName string `json:"templateName,omitempty"`

	// started is when the request was created.
	// +required
	Started metav1.Time `json:"started"`

	// timedOut is when the check gave up on the request (its escalation step's timeout passed, it
	// reported Succeeded=False, or its step left the spec) and moved on to the next step.
	// +optional
	TimedOut *metav1.Time `json:"timedOut,omitempty"`
}
