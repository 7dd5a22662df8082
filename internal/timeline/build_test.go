package timeline

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/controllers/nhc"
	"github.com/metalheal/metalheal/controllers/powercycle"
)

var t0 = time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// ev is an events.k8s.io event at a time since t0 (micro: as our controllers write them), or a core one
// (core: stamped to the second, as the node lifecycle controller's).
func ev(reason string, secs float64, regarding corev1.ObjectReference, related *corev1.ObjectReference, core bool) eventsv1.Event {
	e := eventsv1.Event{Reason: reason, Note: "said " + reason, Regarding: regarding, Related: related}
	if core {
		e.DeprecatedFirstTimestamp = metav1.NewTime(at(secs).Truncate(time.Second))
	} else {
		e.EventTime = metav1.NewMicroTime(at(secs))
	}
	return e
}

func warn(e eventsv1.Event) eventsv1.Event {
	e.Type = corev1.EventTypeWarning
	return e
}

var (
	nodeRef  = corev1.ObjectReference{Kind: "Node", Name: "w-2"}
	checkRef = corev1.ObjectReference{Kind: "NodeHealthCheck", Name: "demo"}
	pcrRef   = corev1.ObjectReference{Kind: "PowerCycleRemediation", Namespace: "ns", Name: "w-2"}
)

// finished is what the cluster keeps after a remediation: events only, and the Node Ready again.
func finished(offset float64) []eventsv1.Event {
	o := func(s float64) float64 { return s + offset }
	return []eventsv1.Event{
		ev(ReasonNodeNotReady, o(8.4), nodeRef, nil, true),
		ev(ReasonRemediationCreated, o(13.5), checkRef, &nodeRef, false),
		ev(ReasonPoweringOff, o(13.6), pcrRef, nil, false),
		ev(ReasonPoweredOff, o(14.8), pcrRef, nil, false),
		ev(ReasonPoweringOn, o(14.9), pcrRef, nil, false),
		ev(ReasonPoweredOn, o(16.0), pcrRef, nil, false),
		ev(ReasonRemediated, o(19.2), pcrRef, nil, false),
		ev(ReasonRemediationFinished, o(22.3), checkRef, &nodeRef, false),
		ev(ReasonCleanedUp, o(22.4), pcrRef, nil, false),
	}
}

func readyNode(status corev1.ConditionStatus, since time.Time, taints ...corev1.Taint) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-2"}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Because",
		Message: "so", LastTransitionTime: metav1.NewTime(since)}}
	n.Spec.Taints = taints
	return n
}

// recorded is the host's BMC once the remediation of finished(0) ended: its record, to the second.
func recorded(result v1alpha1.RemediationResult, message string) []v1alpha1.BMC {
	tm := func(s float64) metav1.Time { return metav1.NewTime(at(s).Truncate(time.Second)) }
	ptm := func(s float64) *metav1.Time { return ptr.To(tm(s)) }
	return []v1alpha1.BMC{{ObjectMeta: metav1.ObjectMeta{Namespace: "metalheal-system", Name: "w-2", ResourceVersion: "77"},
		Status: v1alpha1.BMCStatus{RecentRemediations: []v1alpha1.RemediationRecord{
			{Kind: "PowerCycleRemediation", Namespace: "ns", Name: "earlier", UID: "u-0", NodeName: "w-2",
				Started: metav1.NewTime(at(-86400)), Finished: metav1.NewTime(at(-86340)), Result: v1alpha1.RemediationFailed},
			{Kind: "PowerCycleRemediation", Namespace: "ns", Name: "w-2", UID: "u-1", NodeName: "w-2",
				HealthCheck: &v1alpha1.HealthCheckReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "NodeHealthCheck", Name: "demo"},
				Started:     tm(13.5), Finished: tm(19.2), Result: result, Reason: "NodeReady", Attempts: 1, Message: message,
				PowerChanges: []v1alpha1.PowerChange{
					{Target: v1alpha1.PowerOff, Requested: tm(13.6), Confirmed: ptm(14.8)},
					{Target: v1alpha1.PowerOn, Requested: tm(14.9), Confirmed: ptm(16.0)},
				}},
		}}}}
}

func TestBuild(t *testing.T) {
	other := corev1.ObjectReference{Kind: "Node", Name: "w-1"}
	tests := []struct {
		name        string
		record      Record
		wantStart   time.Time
		want        []Step
		wantAt      map[Step]float64 // seconds since the start
		wantNotes   []string
		wantDetails map[Step]string
		notOnRecord []Step
	}{
		{
			name: "after the remediation: events and the Ready node tell the story; others' events do not count",
			record: Record{Node: "w-2", NodeObject: readyNode(corev1.ConditionTrue, at(18.9)),
				Events: append(finished(0),
					ev(ReasonNodeNotReady, 9, other, nil, true),
					ev(ReasonPoweringOff, 13, corev1.ObjectReference{Kind: "PowerCycleRemediation", Name: "w-1"}, nil, false),
					ev(ReasonRemediationCreated, 13, checkRef, &other, false))},
			wantStart: at(8),
			want: []Step{StepNotReady, StepEMRCreated, StepPoweringOff, StepPoweredOff, StepPoweringOn, StepPoweredOn,
				StepNodeReady, StepRemediated, StepEMRDeleted, StepEMRGone},
			wantAt:      map[Step]float64{StepNotReady: 0, StepEMRCreated: 5.5, StepNodeReady: 10.9, StepEMRGone: 14.4},
			wantDetails: map[Step]string{StepPoweredOff: "said PoweredOff", StepNodeReady: "Ready=True (Because): so"},
			notOnRecord: []Step{StepLeaseTaken, StepCordoned, StepHostOff, StepFenced, StepHostOn, StepTaintsRemoved,
				StepLeaseReleased},
		},
		{
			name: "after the remediation: the remediator's and the check's events of the lease and the taints complete it",
			record: Record{Node: "w-2", NodeObject: readyNode(corev1.ConditionTrue, at(18.9)),
				Events: append(finished(0),
					ev(ReasonNodeLeaseTaken, 13.55, pcrRef, nil, false),
					ev(ReasonNodeCordoned, 13.65, pcrRef, nil, false),
					ev(ReasonOutOfServiceTaintAdded, 14.85, pcrRef, nil, false),
					ev(ReasonTaintsRemoved, 19.1, pcrRef, nil, false),
					ev(ReasonNodeLeaseReleased, 22.6, checkRef, &nodeRef, false),
					ev(ReasonNodeLeaseReleased, 13, checkRef, &other, false))}, // another node's
			wantStart: at(8),
			want: []Step{StepNotReady, StepEMRCreated, StepLeaseTaken, StepPoweringOff, StepCordoned, StepPoweredOff,
				StepFenced, StepPoweringOn, StepPoweredOn, StepNodeReady, StepTaintsRemoved, StepRemediated,
				StepEMRDeleted, StepEMRGone, StepLeaseReleased},
			wantAt:      map[Step]float64{StepLeaseTaken: 5.55, StepCordoned: 5.65, StepTaintsRemoved: 11.1, StepLeaseReleased: 14.6},
			wantDetails: map[Step]string{StepCordoned: "said NodeCordoned", StepLeaseReleased: "said NodeLeaseReleased"},
			notOnRecord: []Step{StepHostOff, StepHostOn},
		},
		{
			name: "the events expired, the request gone: the BMC's record tells the last remediation, the Node its return",
			record: Record{Node: "w-2", NodeObject: readyNode(corev1.ConditionTrue, at(18.9)),
				BMCs: recorded(v1alpha1.RemediationSucceeded, "Node w-2 is Ready again after 1 attempt(s)")},
			wantStart: at(13),
			want: []Step{StepEMRCreated, StepPoweringOff, StepPoweredOff, StepPoweringOn, StepPoweredOn, StepNodeReady,
				StepRemediated},
			wantAt: map[Step]float64{StepEMRCreated: 0, StepPoweredOff: 1, StepNodeReady: 5.9, StepRemediated: 6},
			wantDetails: map[Step]string{
				StepEMRCreated:  "PowerCycleRemediation ns/w-2, by NodeHealthCheck demo (as recorded on the host's BMC)",
				StepPoweredOff:  PoweredOffDetail,
				StepRemediated:  "Node w-2 is Ready again after 1 attempt(s)",
				StepPoweringOff: PoweringOffDetail,
			},
			notOnRecord: []Step{StepNotReady, StepLeaseTaken, StepCordoned, StepHostOff, StepFenced, StepHostOn,
				StepTaintsRemoved, StepEMRDeleted, StepEMRGone, StepLeaseReleased},
		},
		{
			name: "the events and the BMC's record of the same remediation: each step once, in the events' words",
			record: Record{Node: "w-2", NodeObject: readyNode(corev1.ConditionTrue, at(18.9)), Events: finished(0),
				BMCs: recorded(v1alpha1.RemediationSucceeded, "Node w-2 is Ready again after 1 attempt(s)")},
			wantStart: at(8),
			want: []Step{StepNotReady, StepEMRCreated, StepPoweringOff, StepPoweredOff, StepPoweringOn, StepPoweredOn,
				StepNodeReady, StepRemediated, StepEMRDeleted, StepEMRGone},
			wantAt:      map[Step]float64{StepEMRCreated: 5.5, StepRemediated: 11.2},
			wantDetails: map[Step]string{StepEMRCreated: "said RemediationCreated", StepPoweredOff: "said PoweredOff", StepRemediated: "said Remediated"},
		},
		{
			name: "a failure the BMC recorded is a note, once beside the remediator's own warning",
			record: Record{Node: "w-2", BMCs: recorded(v1alpha1.RemediationFailed, "2 attempts failed"),
				Events: []eventsv1.Event{warn(ev(ReasonRemediationFailed, 19.3, pcrRef, nil, false))}},
			wantStart: at(13),
			want:      []Step{StepEMRCreated, StepPoweringOff, StepPoweredOff, StepPoweringOn, StepPoweredOn},
			wantNotes: []string{"WARNING Failed"},
		},
		{
			name:        "a request cancelled by its deletion: gone once its clean-up was done",
			record:      Record{Node: "w-2", BMCs: recorded(v1alpha1.RemediationCancelled, "The request was deleted in phase WaitingForNode, after 1 attempt(s)")},
			wantStart:   at(13),
			want:        []Step{StepEMRCreated, StepPoweringOff, StepPoweredOff, StepPoweringOn, StepPoweredOn, StepEMRGone},
			wantDetails: map[Step]string{StepEMRGone: "The request was deleted in phase WaitingForNode, after 1 attempt(s)"},
		},
		{
			name: "a check's event written after the remediator's record of what followed is moved before it",
			record: Record{Node: "w-2", Events: []eventsv1.Event{
				ev(ReasonRemediationCreated, 13.7, checkRef, &nodeRef, false),
				ev(ReasonPoweringOff, 13.6, pcrRef, nil, false),
				ev(ReasonRemediationFinished, 22.5, checkRef, &nodeRef, false),
				ev(ReasonCleanedUp, 22.4, pcrRef, nil, false),
			}},
			wantStart: at(13.6),
			want:      []Step{StepEMRCreated, StepPoweringOff, StepEMRDeleted, StepEMRGone},
			wantAt:    map[Step]float64{StepEMRCreated: 0, StepPoweringOff: 0, StepEMRDeleted: 8.8, StepEMRGone: 8.8},
		},
		{
			name: "the remediator's word that the check holds the lease for the request proves the request was created",
			record: Record{Node: "w-2", Events: []eventsv1.Event{
				ev(ReasonRemediationCreated, 13.7, checkRef, &nodeRef, false),
				ev(ReasonNodeLeaseTaken, 13.55, pcrRef, nil, false),
				ev(ReasonPoweringOff, 13.8, pcrRef, nil, false),
			}},
			wantStart: at(13.55),
			want:      []Step{StepEMRCreated, StepLeaseTaken, StepPoweringOff},
			wantAt:    map[Step]float64{StepEMRCreated: 0, StepLeaseTaken: 0, StepPoweringOff: 0.25},
		},
		{
			name: "the check's warnings while the story lasts are notes; after its end they are another story",
			record: Record{Node: "w-2", NodeObject: readyNode(corev1.ConditionTrue, at(18.9)),
				Events: append(finished(0),
					warn(ev("RemediationShortCircuited", 15, checkRef, nil, false)),
					warn(ev("RemediationShortCircuited", 30, checkRef, nil, false)),
					warn(ev("RemediationShortCircuited", 16, corev1.ObjectReference{Kind: "NodeHealthCheck", Name: "other"}, nil, false)))},
			wantStart: at(8),
			want: []Step{StepNotReady, StepEMRCreated, StepPoweringOff, StepPoweredOff, StepPoweringOn, StepPoweredOn,
				StepNodeReady, StepRemediated, StepEMRDeleted, StepEMRGone},
			wantNotes: []string{"WARNING RemediationShortCircuited"},
		},
		{
			name: "a second failure of the node: only the latest episode",
			record: Record{Node: "w-2", NodeObject: readyNode(corev1.ConditionTrue, at(1018.9)),
				Events: append(finished(0), finished(1000)...)},
			wantStart: at(1008),
			want: []Step{StepNotReady, StepEMRCreated, StepPoweringOff, StepPoweredOff, StepPoweringOn, StepPoweredOn,
				StepNodeReady, StepRemediated, StepEMRDeleted, StepEMRGone},
			wantAt: map[Step]float64{StepEMRCreated: 5.5},
		},
		{
			name: "in flight: the request's status, the lease and the node's taints, in the remediator's words",
			record: Record{Node: "w-2",
				NodeObject: readyNode(corev1.ConditionUnknown, at(8),
					corev1.Taint{Key: v1alpha1.TaintRemediation, Effect: corev1.TaintEffectNoSchedule},
					corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute,
						TimeAdded: ptr.To(metav1.NewTime(at(15)))}),
				Requests: []v1alpha1.PowerCycleRemediation{{
					ObjectMeta: metav1.ObjectMeta{Name: "w-2", Namespace: "ns", CreationTimestamp: metav1.NewTime(at(13)),
						Annotations:     map[string]string{"remediation.medik8s.io/template-name": "demo"},
						OwnerReferences: []metav1.OwnerReference{{Kind: "NodeHealthCheck", Name: "demo"}}},
					Status: v1alpha1.PowerCycleRemediationStatus{Phase: v1alpha1.PhasePoweringOn,
						Attempts: []v1alpha1.PowerCycleAttempt{{Number: 1, Started: metav1.NewTime(at(13.6)),
							PoweredOff: ptr.To(metav1.NewTime(at(14.8))), PowerOnRequested: ptr.To(metav1.NewTime(at(15.2)))}},
						Conditions: []metav1.Condition{
							{Type: v1alpha1.ConditionProcessing, Status: metav1.ConditionTrue, Message: "Powering on"},
							{Type: v1alpha1.ConditionLeaseAcquired, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(at(13.5))},
						}},
				}},
				Lease: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "medik8s-leases", Name: "node-w-2"},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("NodeHealthCheck-demo"), AcquireTime: ptr.To(metav1.NewMicroTime(at(13.4)))}},
			},
			wantStart: at(8),
			want:      []Step{StepNotReady, StepEMRCreated, StepLeaseTaken, StepPoweringOff, StepPoweredOff, StepFenced, StepPoweringOn},
			wantDetails: map[Step]string{
				StepNotReady:    "Ready=Unknown (Because): so",
				StepEMRCreated:  "PowerCycleRemediation ns/w-2, by NodeHealthCheck demo from template demo",
				StepLeaseTaken:  "medik8s-leases/node-w-2 held by NodeHealthCheck-demo: nobody else (node maintenance, another check) acts on the node",
				StepPoweringOff: PoweringOffDetail,
				StepFenced:      "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute: Kubernetes moves its pods and volumes",
				StepPoweringOn:  "Powering on",
			},
		},
		{
			name: "a kernel dump and a graceful shutdown asked first are notes; the power-off is dated after them",
			record: Record{Node: "w-2", Requests: []v1alpha1.PowerCycleRemediation{{
				ObjectMeta: metav1.ObjectMeta{Name: "w-2", Namespace: "ns", CreationTimestamp: metav1.NewTime(at(13))},
				Status: v1alpha1.PowerCycleRemediationStatus{Phase: v1alpha1.PhasePoweredOff,
					Attempts: []v1alpha1.PowerCycleAttempt{{Number: 1, Started: metav1.NewTime(at(13.6)),
						DiagnosticInterrupt: &v1alpha1.HostRequest{Requested: ptr.To(metav1.NewTime(at(13.6))),
							Ended: ptr.To(metav1.NewTime(at(18.6))), Result: v1alpha1.HostRequestTimedOut, Message: "still on"},
						GracefulShutdown: &v1alpha1.HostRequest{Requested: ptr.To(metav1.NewTime(at(18.7))),
							Ended: ptr.To(metav1.NewTime(at(20))), Result: v1alpha1.HostRequestPoweredOff},
						PoweredOff: ptr.To(metav1.NewTime(at(20.5)))}}},
			}}},
			wantStart: at(13),
			want:      []Step{StepEMRCreated, StepPoweringOff, StepPoweredOff},
			wantAt:    map[Step]float64{StepPoweringOff: 7, StepPoweredOff: 7.5},
			wantNotes: []string{DiagnosticInterruptLabel, GracefulShutdownLabel},
		},
		{
			name: "a failed attempt, giving up and the warnings about the node and its request are notes",
			record: Record{Node: "w-2", Events: []eventsv1.Event{
				ev(ReasonRemediationCreated, 13, checkRef, &nodeRef, false),
				ev(ReasonPoweringOff, 13.5, pcrRef, nil, false),
				ev(ReasonAttemptFailed, 24, pcrRef, nil, false),
				ev(ReasonRemediationFailed, 60, pcrRef, nil, false),
				warn(ev("RemediationTimedOut", 70, checkRef, &nodeRef, false)),
				warn(ev("BMCNotReady", 10, pcrRef, nil, false)), // before the story
				ev("RemediationStarted", 13.4, pcrRef, nil, false),
				warn(ev("RemediationTimedOut", 70, checkRef, &corev1.ObjectReference{Kind: "Node", Name: "w-1"}, false)),
			}},
			wantStart: at(13),
			want:      []Step{StepEMRCreated, StepPoweringOff},
			wantNotes: []string{"WARNING Retrying", "WARNING Failed", "WARNING RemediationTimedOut"},
		},
		{
			name:        "no remediation on record",
			record:      Record{Node: "w-2", NodeObject: readyNode(corev1.ConditionTrue, at(0))},
			notOnRecord: StorySteps[1:],
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tl := Build(tc.record)
			g.Expect(tl.Start).To(BeTemporally("==", tc.wantStart))
			var steps []Step
			var notes []string
			for i, e := range tl.Entries {
				if i > 0 {
					g.Expect(e.At).To(BeNumerically(">=", tl.Entries[i-1].At), "in order of time")
				}
				if e.Step == StepNote {
					notes = append(notes, e.Label)
					continue
				}
				steps = append(steps, e.Step)
				g.Expect(e.Label).To(Equal(e.Step.String()))
				if want, ok := tc.wantAt[e.Step]; ok {
					g.Expect(e.At.Seconds()).To(BeNumerically("~", want, 0.001), "%s", e.Step)
				}
				if want, ok := tc.wantDetails[e.Step]; ok {
					g.Expect(e.Detail).To(Equal(want), "%s", e.Step)
				}
			}
			g.Expect(steps).To(Equal(tc.want))
			g.Expect(notes).To(Equal(tc.wantNotes))
			if tc.notOnRecord != nil {
				g.Expect(tl.NotOnRecord).To(Equal(tc.notOnRecord))
			}
		})
	}
}

func TestFormatEntry(t *testing.T) {
	g := NewWithT(t)
	g.Expect(FormatEntry(Entry{At: 7500 * time.Millisecond, Step: StepNotReady, Label: "node NotReady", Detail: "x "})).
		To(Equal("    +7.5s  node NotReady          x"))
}

// The reasons Build reads are the ones the controllers emit.
func TestReasonsAreTheControllers(t *testing.T) {
	g := NewWithT(t)
	for ours, theirs := range map[string]string{
		ReasonRemediationCreated:     nhc.EventRemediationCreated,
		ReasonRemediationFinished:    nhc.EventRemediationFinished,
		ReasonPoweringOff:            powercycle.EventPoweringOff,
		ReasonPoweredOff:             powercycle.EventPoweredOff,
		ReasonPoweringOn:             powercycle.EventPoweringOn,
		ReasonPoweredOn:              powercycle.EventPoweredOn,
		ReasonRemediated:             powercycle.EventRemediated,
		ReasonCleanedUp:              powercycle.EventCleanedUp,
		ReasonAttemptFailed:          powercycle.EventAttemptFailed,
		ReasonEscalating:             powercycle.EventEscalating,
		ReasonRemediationFailed:      powercycle.EventRemediationFailed,
		ReasonNodeLeaseTaken:         powercycle.EventNodeLeaseTaken,
		ReasonNodeLeaseReleased:      powercycle.EventNodeLeaseReleased,
		ReasonNodeCordoned:           powercycle.EventNodeCordoned,
		ReasonTaintsRemoved:          powercycle.EventTaintsRemoved,
		ReasonOutOfServiceTaintAdded: powercycle.EventOutOfServiceTaintAdded,
	} {
		g.Expect(ours).To(Equal(theirs))
	}
	g.Expect(nhc.EventNodeLeaseReleased).To(Equal(ReasonNodeLeaseReleased), "the check releases the lease it held")
}
