package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

func node(name string, ready corev1.ConditionStatus, taints ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "Because"}}
	for _, t := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: t, Effect: corev1.TaintEffectNoExecute})
	}
	return n
}

func remediation(name string, phase v1alpha1.PowerCyclePhase, attempt *v1alpha1.PowerCycleAttempt) *v1alpha1.PowerCycleRemediation {
	p := &v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{{Kind: "NodeHealthCheck", Name: "demo"}}}}
	p.Status.Phase = phase
	p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProcessing, Status: metav1.ConditionTrue, Message: "said " + string(phase)}}
	if attempt != nil {
		p.Status.Attempts = []v1alpha1.PowerCycleAttempt{*attempt}
	}
	return p
}

func lease(name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "medik8s-leases"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
}

func TestStory(t *testing.T) {
	stamp := ptr.To(metav1.Now())
	tests := []struct {
		name        string
		before      func(s *story) // before the failure: must be ignored
		after       func(s *story, clk *clocktesting.FakeClock)
		want        []step // every step recorded, in order (notes left out)
		wantNotes   []string
		wantFailure bool
	}{
		{
			name:   "nothing counts before the failure",
			before: func(s *story) { s.observeNode(node("w-2", corev1.ConditionUnknown)) },
			after:  func(*story, *clocktesting.FakeClock) {},
			want:   []step{stepInjected},
		},
		{
			name: "the node goes NotReady, then Ready; other nodes are ignored",
			after: func(s *story, clk *clocktesting.FakeClock) {
				s.observeNode(node("w-2", corev1.ConditionTrue))
				s.observeNode(node("w-1", corev1.ConditionUnknown))
				clk.Step(8 * time.Second)
				s.observeNode(node("w-2", corev1.ConditionUnknown))
				s.observeNode(node("w-2", corev1.ConditionUnknown))
				clk.Step(time.Second)
				s.observeNode(node("w-2", corev1.ConditionTrue))
			},
			want: []step{stepInjected, stepNotReady, stepNodeReady},
		},
		{
			name: "taints: cordoned, fenced, then removed",
			after: func(s *story, clk *clocktesting.FakeClock) {
				s.observeNode(node("w-2", corev1.ConditionUnknown, v1alpha1.TaintRemediation))
				s.observeNode(node("w-2", corev1.ConditionUnknown, v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))
				s.observeNode(node("w-2", corev1.ConditionTrue, "node.kubernetes.io/unreachable"))
			},
			want: []step{stepInjected, stepNotReady, stepCordoned, stepFenced, stepNodeReady, stepTaintsRemoved},
		},
		{
			name: "a remediation seen late still tells every step it went through, in order",
			after: func(s *story, clk *clocktesting.FakeClock) {
				s.observeRemediation(remediation("w-2", v1alpha1.PhaseWaitingForNode,
					&v1alpha1.PowerCycleAttempt{Number: 1, PoweredOff: stamp, PowerOnRequested: stamp, PoweredOn: stamp}))
				p := remediation("w-2", v1alpha1.PhaseSucceeded, nil)
				p.DeletionTimestamp = stamp
				s.observeRemediation(p)
				s.remediationGone(p)
			},
			want: []step{stepInjected, stepEMRCreated, stepPoweringOff, stepPoweredOff, stepPoweringOn, stepPoweredOn,
				stepRemediated, stepEMRDeleted, stepEMRGone},
		},
		{
			name: "a remediation's phases one by one; another node's is ignored",
			after: func(s *story, clk *clocktesting.FakeClock) {
				s.observeRemediation(remediation("w-1", v1alpha1.PhasePoweringOff, nil))
				for _, ph := range []v1alpha1.PowerCyclePhase{"", v1alpha1.PhasePending, v1alpha1.PhasePoweringOff,
					v1alpha1.PhasePoweredOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode} {
					clk.Step(time.Second)
					s.observeRemediation(remediation("w-2", ph, nil))
				}
				s.remediationGone(remediation("w-2", v1alpha1.PhaseWaitingForNode, nil))
			},
			want: []step{stepInjected, stepEMRCreated, stepPoweringOff, stepPoweredOff, stepPoweringOn, stepPoweredOn,
				stepEMRDeleted, stepEMRGone},
		},
		{
			name: "a failed attempt is a warning; giving up is a failure",
			after: func(s *story, clk *clocktesting.FakeClock) {
				s.observeRemediation(remediation("w-2", v1alpha1.PhaseRetrying, &v1alpha1.PowerCycleAttempt{Number: 1}))
				s.observeRemediation(remediation("w-2", v1alpha1.PhaseRetrying, &v1alpha1.PowerCycleAttempt{Number: 1}))
				s.observeRemediation(remediation("w-2", v1alpha1.PhaseFailed, &v1alpha1.PowerCycleAttempt{Number: 3}))
			},
			want:        []step{stepInjected, stepEMRCreated, stepPoweringOff},
			wantNotes:   []string{"WARNING Retrying", "WARNING Failed"},
			wantFailure: true,
		},
		{
			name: "the lease: taken, handed over, released; other leases are ignored",
			after: func(s *story, clk *clocktesting.FakeClock) {
				s.leaseGone(lease("node-w-2", "nobody")) // never taken: nothing to release
				s.observeLease(lease("node-w-1", "NodeHealthCheck-demo"))
				s.observeLease(lease("node-w-2", "NodeHealthCheck-demo"))
				s.observeLease(lease("node-w-2", "NodeHealthCheck-demo"))
				s.observeLease(lease("node-w-2", "node-maintenance"))
				s.leaseGone(lease("node-w-1", "NodeHealthCheck-demo"))
				s.leaseGone(lease("node-w-2", "node-maintenance"))
			},
			want:      []step{stepInjected, stepLeaseTaken, stepLeaseReleased},
			wantNotes: []string{"lease holder"},
		},
		{
			name: "nothing counts after the end",
			after: func(s *story, clk *clocktesting.FakeClock) {
				s.observeNode(node("w-2", corev1.ConditionUnknown))
				s.end()
				s.observePower("2", "On", "PoweringOff")
				s.observeNode(node("w-2", corev1.ConditionTrue))
			},
			want: []step{stepInjected, stepNotReady},
		},
		{
			name: "the BMC's power steps of the broken host only",
			after: func(s *story, clk *clocktesting.FakeClock) {
				s.observePower("1", "On", "PoweringOff")
				s.observePower("2", "On", "PoweringOff")
				s.observePower("2", "PoweringOff", "Off")
				s.observePower("2", "Off", "PoweringOn")
				s.observePower("2", "PoweringOn", "On")
			},
			want:      []step{stepInjected, stepHostOff, stepHostOn},
			wantNotes: []string{"BMC", "BMC"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			var out bytes.Buffer
			s := newStory(clk, &out, "w-2", "2")
			if tc.before != nil {
				tc.before(s)
			}
			s.begin("broken")
			tc.after(s, clk)

			var steps []step
			var notes []string
			for _, e := range s.Timeline() {
				if e.Step == stepNote {
					notes = append(notes, e.Label)
				} else {
					steps = append(steps, e.Step)
				}
			}
			g.Expect(steps).To(Equal(tc.want))
			g.Expect(notes).To(Equal(tc.wantNotes))
			if tc.wantFailure {
				g.Expect(s.Failure()).To(MatchError(ErrRemediationFailed))
			} else {
				g.Expect(s.Failure()).NotTo(HaveOccurred())
			}
			// Every entry was printed, one line each, as it happened.
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			g.Expect(lines).To(HaveLen(len(s.Timeline())))
			for i, e := range s.Timeline() {
				g.Expect(lines[i]).To(Equal(formatEntry(e)))
			}
		})
	}
}

func TestStoryTimesStepsFromTheFailure(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newStory(clk, &bytes.Buffer{}, "w-2", "2")
	clk.Step(time.Minute) // setting up the world does not count
	s.begin("broken")
	clk.Step(7500 * time.Millisecond)
	n := node("w-2", corev1.ConditionUnknown)
	n.ResourceVersion = "42"
	s.observeNode(n)
	s.observePower("2", "On", "PoweringOff")

	g.Expect(s.Timeline()).To(HaveExactElements(
		HaveField("Revision", ""), HaveField("Revision", "42"), HaveField("Revision", ""))) // only the API's revisions
	g.Expect(s.Seen()).To(Equal(map[step]time.Duration{stepInjected: 0, stepNotReady: 7500 * time.Millisecond}))
	g.Expect(formatEntry(s.Timeline()[1])).To(Equal("    +7.5s  node NotReady          Ready=Unknown (Because):"))
	g.Expect(s.Missing()).To(HaveLen(len(storySteps) - 2))
	g.Expect(s.Missing()[0]).To(Equal(stepEMRCreated))
	g.Expect(s.Where()).To(HavePrefix("still waiting for: EMR created, lease taken, "))
}

func TestSummarize(t *testing.T) {
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	cfg := timings{GracePeriod: 8 * time.Second, UnhealthyFor: 5 * time.Second, BootDelay: 3 * time.Second,
		HealthyDelay: 3 * time.Second, SimulatedBMCTime: time.Second}
	tests := []struct {
		name string
		seen map[step]time.Duration
		want []string // substrings, one per line
	}{
		{
			name: "a complete story",
			seen: map[step]time.Duration{stepInjected: 0, stepNotReady: sec(7), stepEMRCreated: sec(12.1),
				stepPoweringOff: sec(12.2), stepFenced: sec(13.4), stepNodeReady: sec(17.2), stepTaintsRemoved: sec(17.3),
				stepEMRDeleted: sec(20.2), stepEMRGone: sec(20.3), stepLeaseReleased: sec(20.4)},
			want: []string{
				"detected    +12.1s  the node lifecycle controller marked the node NotReady after 7.0s (grace period 8s)",
				"the NodeHealthCheck created the request 5.1s later (duration 5s, from the condition's transition)",
				"fenced      +13.4s  1.3s after the request",
				"recovered   +17.2s  node Ready 5.0s after the power-off began (BMC 1s per transition, boot 3s)",
				"clean       +20.4s  request deleted 3.0s after Ready (healthy delay 3s)",
			},
		},
		{
			name: "an unfinished story says what is not known",
			seen: map[step]time.Duration{stepInjected: 0, stepNotReady: sec(7)},
			want: []string{
				"detected       n/a  the node lifecycle controller marked the node NotReady after 7.0s",
				"created the request n/a later",
				"fenced         n/a  n/a after the request",
				"recovered      n/a  node Ready n/a after",
				"clean          n/a  request deleted n/a after Ready",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			lines := summarize(tc.seen, cfg)
			g.Expect(lines).To(HaveLen(len(tc.want)))
			for i, w := range tc.want {
				g.Expect(lines[i]).To(ContainSubstring(w))
			}
		})
	}
}
