package template

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// HandOverBound is how long after its timed-out mark a checker waits for an ended step's request to be
// finished with the host before it starts the next step anyway. A remediator that honours the mark hands
// the host over within seconds (a power request in flight is the longest thing it waits for); one that
// never reports it must not hold the Node's remediation forever.
const HandOverBound = 5 * time.Minute

// HandOverState says whether the request of an ended escalation step is finished with its host, so that
// the next step's request may be created: at most one remediation acts on a host at any instant.
type HandOverState int

const (
	// HandedOver: the request reports Processing=False, or has no Processing condition at all (a
	// remediator that reports nothing cannot be waited for). A request that is gone is handed over too;
	// the caller knows that without asking.
	HandedOver HandOverState = iota
	// Holding: Processing is True, Unknown or unreadable, and HandOverBound has not passed since the
	// timed-out mark: the next step waits.
	Holding
	// Overdue: still not finished HandOverBound after the mark: the next step starts anyway, and the
	// checker warns that the request did not hand the host over.
	Overdue
)

// HandOver tells how far the request of a step that ended at markedAt (its timed-out mark) has handed its
// host over, from the status of its Processing condition ("" when it has none; see ProcessingStatus), and
// the instant the wait for it ends (markedAt plus HandOverBound; zero when it is handed over).
//
// Processing=False counts whenever it was set: before the mark (with Succeeded set, the remediator had
// already stopped) as after it. Its transition time is the remediator's clock, which cannot be compared
// with the checker's mark reliably.
func HandOver(processing metav1.ConditionStatus, markedAt, now time.Time) (HandOverState, time.Time) {
	if processing == "" || processing == metav1.ConditionFalse {
		return HandedOver, time.Time{}
	}
	deadline := markedAt.Add(HandOverBound)
	if now.Before(deadline) {
		return Holding, deadline
	}
	return Overdue, deadline
}

// ProcessingStatus is the status of a request's Processing condition: "" when it has none, Unknown when
// status.conditions cannot be read (what a remediator reports unreadably is not taken for "done").
func ProcessingStatus(obj *unstructured.Unstructured) metav1.ConditionStatus {
	c, err := FindCondition(obj, ConditionProcessing)
	switch {
	case err != nil:
		return metav1.ConditionUnknown
	case c == nil:
		return ""
	}
	return c.Status
}

// maxNameLength is the longest object name (a DNS subdomain).
const maxNameLength = 253

// nameHashLength is how many hex digits of the hash end a later step's request name.
const nameHashLength = 8

// StepKey is what naming needs to know about one remediation step: the group and kind of the requests it
// makes, their namespace, and the name of its template.
type StepKey struct {
	Kind      schema.GroupKind
	Namespace string
	Template  string
}

// RequestName is the name of the request that step i of steps (in escalation order) creates for target,
// a Node's (NodeHealthCheck) or a Machine's (MachineHealthCheck) name. It is the contract name, target
// itself, unless an earlier step makes requests of the same kind in the same namespace: then that name
// may still be taken by the earlier step's request, which is never deleted to make room (it may still
// hold the host), and the step gets a name of its own (LaterStepName). The name depends on the spec
// only, so every pass, and a restart, finds the same one.
func RequestName(target string, steps []StepKey, i int) string {
	if i <= 0 || i >= len(steps) {
		return target
	}
	for _, s := range steps[:i] {
		if s.Kind == steps[i].Kind && s.Namespace == steps[i].Namespace {
			return LaterStepName(target, steps[i].Template)
		}
	}
	return target
}

// LaterStepName is "<target>-<template>-<hash>", cut to a valid object name: the hash (of target and
// template) keeps it distinct from the contract name of any other target (a Node named
// "worker-1-power-off" would otherwise find its own request's name taken by worker-1's "power-off" step)
// and tells apart two long names cut to the same prefix.
func LaterStepName(target, template string) string {
	sum := sha256.Sum256([]byte(target + "/" + template))
	suffix := "-" + hex.EncodeToString(sum[:])[:nameHashLength]
	prefix := target + "-" + template
	if len(prefix)+len(suffix) > maxNameLength {
		// Both parts are DNS subdomains, so any prefix of their join that ends in a letter or digit is one
		// too.
		prefix = strings.TrimRight(prefix[:maxNameLength-len(suffix)], "-.")
	}
	return prefix + suffix
}
