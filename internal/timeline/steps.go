package timeline

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// Step is one moment of the story. The constants are in the order the moments happen.
type Step int

const (
	StepInjected      Step = iota // the failure (the demo injects it; a real cluster keeps no record of it)
	StepNotReady                  // the node lifecycle controller marks the node Ready=Unknown
	StepEMRCreated                // the health check creates the remediation request (detection)
	StepLeaseTaken                // the node lease appears in the lease namespace
	StepPoweringOff               // the remediation enters PoweringOff, the power-off request on record
	StepCordoned                  // the remediator's NoSchedule taint is on the node
	StepHostOff                   // the host is Off (as the BMC simulator tells it)
	StepPoweredOff                // the remediator read Off from the BMC: power-off confirmed
	StepFenced                    // the out-of-service taint is on the node
	StepPoweringOn                // the remediation enters PoweringOn
	StepHostOn                    // the host is On (as the BMC simulator tells it)
	StepPoweredOn                 // the remediator read On: waiting for the node
	StepNodeReady                 // the node is Ready again
	StepTaintsRemoved             // the remediator's taints are gone from the node
	StepRemediated                // the remediation reports Succeeded
	StepEMRDeleted                // the health check deleted the request (deletion timestamp set)
	StepEMRGone                   // the remediator's finalizer is done: the request is gone
	StepLeaseReleased             // the node lease is gone
	StepNote                      // not a step: a remark on the way (a BMC transition, a warning)
)

// labels name the steps in the timeline.
var labels = map[Step]string{
	StepInjected:      "failure injected",
	StepNotReady:      "node NotReady",
	StepEMRCreated:    "EMR created",
	StepLeaseTaken:    "lease taken",
	StepCordoned:      "node cordoned",
	StepPoweringOff:   "powering off",
	StepHostOff:       "host off",
	StepPoweredOff:    "power-off confirmed",
	StepFenced:        "out-of-service taint",
	StepPoweringOn:    "powering on",
	StepHostOn:        "host on",
	StepPoweredOn:     "power-on confirmed",
	StepNodeReady:     "node Ready",
	StepTaintsRemoved: "taints removed",
	StepRemediated:    "remediation succeeded",
	StepEMRDeleted:    "EMR deleted",
	StepEMRGone:       "EMR finalized",
	StepLeaseReleased: "lease released",
}

func (s Step) String() string {
	if l, ok := labels[s]; ok {
		return l
	}
	return "note"
}

// StorySteps are the steps of a successful story, in order.
var StorySteps = []Step{
	StepInjected, StepNotReady, StepEMRCreated, StepLeaseTaken, StepPoweringOff, StepCordoned, StepHostOff,
	StepPoweredOff, StepFenced, StepPoweringOn, StepHostOn, StepPoweredOn, StepNodeReady, StepTaintsRemoved,
	StepRemediated, StepEMRDeleted, StepEMRGone, StepLeaseReleased,
}

// Entry is one line of the timeline.
type Entry struct {
	// At is the time since the failure.
	At   time.Duration
	Step Step
	// Label is the step's name, or a note's.
	Label  string
	Detail string
	// Revision is the resourceVersion of the object version that showed the step (for a deletion: of the
	// deletion); empty for what the API did not tell (the failure, the BMC's power).
	Revision string
	// Time is when the step happened, for a timeline rebuilt from records (Build); the demo, which sees
	// the steps as they happen, leaves it zero.
	Time time.Time
}

// FormatEntry is one line of the timeline: "  +12.3s  label                  detail".
func FormatEntry(e Entry) string {
	return strings.TrimRight(fmt.Sprintf("  %7s  %-21s  %s", FormatOffset(e.At), e.Label, e.Detail), " ")
}

// FormatOffset prints a duration since the failure, to a tenth of a second.
func FormatOffset(d time.Duration) string {
	return fmt.Sprintf("+%.1fs", d.Seconds())
}

// The words of each step: what the line says after its label.

// NotReadyDetail says why the node is not Ready, from its Ready condition.
func NotReadyDetail(c *corev1.NodeCondition) string {
	return fmt.Sprintf("Ready=%s (%s): %s", c.Status, c.Reason, c.Message)
}

// ReadyDetail says the node is Ready again, from its Ready condition.
func ReadyDetail(c *corev1.NodeCondition) string {
	return fmt.Sprintf("Ready=True (%s): %s", c.Reason, c.Message)
}

// CordonedDetail is the remediation taint's line.
func CordonedDetail(t corev1.Taint) string {
	return fmt.Sprintf("%s:%s: no new pods while it is remediated", t.Key, t.Effect)
}

// FencedDetail is the out-of-service taint's line.
func FencedDetail(t corev1.Taint) string {
	return fmt.Sprintf("%s=%s:%s: Kubernetes moves its pods and volumes", t.Key, t.Value, t.Effect)
}

// TaintsRemovedDetail is the line of the taints' removal.
const TaintsRemovedDetail = "the remediator removed the taints it added"

// RequestCreatedDetail names the request, its creator and its template.
func RequestCreatedDetail(namespace, name, by, template string) string {
	return fmt.Sprintf("PowerCycleRemediation %s/%s, by %s from template %s", namespace, name, by, template)
}

// RequestCreator names the health check owning a request ("NodeHealthCheck demo"), or "?".
func RequestCreator(p *v1alpha1.PowerCycleRemediation) string {
	by := "?"
	for _, o := range p.OwnerReferences {
		if o.Kind == "NodeHealthCheck" || o.Kind == "MachineHealthCheck" {
			by = o.Kind + " " + o.Name
		}
	}
	return by
}

// RecordedRequestDetail names a request as its host's BMC recorded it, once it had ended: its kind, its
// namespace and name, and the health check that created it ("?" when unknown).
func RecordedRequestDetail(kind, namespace, name, by string) string {
	return fmt.Sprintf("%s %s/%s, by %s (as recorded on the host's BMC)", kind, namespace, name, by)
}

// HandedOverLabel is the label of a note of a request that let go of its node as it was, for another
// request of the node to carry on.
const HandedOverLabel = "handed over"

// LeaseTakenDetail is the lease's line.
func LeaseTakenDetail(namespace, name, holder string) string {
	return fmt.Sprintf("%s/%s held by %s: nobody else (node maintenance, another check) acts on the node", namespace, name, holder)
}

// LeaseHolderNote is the note of a lease changing hands.
func LeaseHolderNote(namespace, name, holder string) string {
	return fmt.Sprintf("%s/%s now held by %q", namespace, name, holder)
}

// LeaseReleasedDetail is the line of the lease's release.
func LeaseReleasedDetail(namespace, name string) string {
	return fmt.Sprintf("%s/%s deleted by its holder", namespace, name)
}

// What a phase step says when the remediator's own message for it is not at hand.
const (
	PoweringOffDetail = "powering the host off through its BMC"
	PoweredOffDetail  = "the BMC reads Off"
	PoweringOnDetail  = "powering the host on"
	PoweredOnDetail   = "the BMC reads On; waiting for the node"
	RemediatedDetail  = "the node is back"
)

// The request's end.
const (
	RequestDeletingDetail = "the node is healthy again: the NodeHealthCheck deleted the request; the remediator cleans up"
	RequestDeletedDetail  = "the node is healthy again: the NodeHealthCheck deleted the request"
	RequestGoneDetail     = "the remediator's finalizer is done (host on, taints off): the request is gone"
)

// The labels of the requests a host answers before its power is cut (a template's diagnosticInterrupt and
// gracefulShutdown).
const (
	DiagnosticInterruptLabel = "diagnostic interrupt"
	GracefulShutdownLabel    = "graceful shutdown"
)

// HostRequestDetail says how a request the host answers ended: its result and what was seen, or that the
// wait still runs.
func HostRequestDetail(r *v1alpha1.HostRequest) string {
	if r.Result == "" {
		return "sent; waiting for the host"
	}
	if r.Message == "" {
		return string(r.Result)
	}
	return fmt.Sprintf("%s: %s", r.Result, r.Message)
}

// WarningLabel is the label of a note about a phase entered because something went wrong.
func WarningLabel(phase v1alpha1.PowerCyclePhase) string { return "WARNING " + string(phase) }

// HostPowerDetail is the line of a host's power transition as the BMC simulator tells it.
func HostPowerDetail(system, from, to string) string {
	detail := fmt.Sprintf("BMC system %s: %s → %s", system, from, to)
	switch to {
	case "Off":
		return detail + " (the hung host loses power)"
	case "On":
		return detail + " (the host boots)"
	}
	return detail
}

// PhaseMessage is what the remediator says about its current phase: the Succeeded condition's message
// once it is decided, else Processing's.
func PhaseMessage(p *v1alpha1.PowerCycleRemediation) string {
	var processing, succeeded *metav1.Condition
	for i, c := range p.Status.Conditions {
		switch c.Type {
		case v1alpha1.ConditionProcessing:
			processing = &p.Status.Conditions[i]
		case v1alpha1.ConditionSucceeded:
			succeeded = &p.Status.Conditions[i]
		}
	}
	switch {
	case succeeded != nil && succeeded.Status != metav1.ConditionUnknown:
		return succeeded.Message
	case processing != nil:
		return processing.Message
	}
	return ""
}

// ReadyCondition is the node's Ready condition, nil when it has none.
func ReadyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
