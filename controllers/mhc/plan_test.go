package mhc

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/template"
)

func controlledBy(apiVersion, kind string) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "owner-uid", Controller: ptr.To(true)}}
	}
}

var byMachineSet = controlledBy("cluster.x-k8s.io/v1beta2", "MachineSet")

func unitCheck(mutate ...func(*v1alpha1.MachineHealthCheck)) *v1alpha1.MachineHealthCheck {
	mhc := &v1alpha1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: "check", Namespace: "ns", UID: "mhc-uid", Generation: 1},
		Spec: v1alpha1.MachineHealthCheckSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
				{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: 300 * time.Second}},
				{Type: "Ready", Status: "False", Timeout: metav1.Duration{Duration: 300 * time.Second}},
			},
		},
	}
	for _, f := range mutate {
		f(mhc)
	}
	return mhc
}

func healthyTarget(name string, mutate ...func(*clusterv1.Machine)) observedTarget {
	m := unitMachine(name, append([]func(*clusterv1.Machine){byMachineSet}, mutate...)...)
	return observedTarget{Machine: m, Node: unitNode(m.Status.NodeRef.Name, nodeCond(corev1.ConditionTrue, time.Hour))}
}

func unhealthyTarget(name string, mutate ...func(*clusterv1.Machine)) observedTarget {
	m := unitMachine(name, append([]func(*clusterv1.Machine){byMachineSet}, mutate...)...)
	return observedTarget{Machine: m, Node: unitNode(m.Status.NodeRef.Name, nodeCond(corev1.ConditionUnknown, 10*time.Minute))}
}

func mustPlan(g Gomega, mhc *v1alpha1.MachineHealthCheck, paused string, targets ...observedTarget) plan {
	steps, err := stepsFor(mhc)
	g.Expect(err).NotTo(HaveOccurred())
	p, err := planChecks(planInput{Check: mhc, Spec: checkSpecFor(mhc), Steps: steps, Paused: paused, Machines: targets, Now: t0})
	g.Expect(err).NotTo(HaveOccurred())
	return p
}

func pool(healthy, unhealthy int) []observedTarget {
	var out []observedTarget
	for i := range unhealthy {
		out = append(out, unhealthyTarget(fmt.Sprintf("sick-%02d", i)))
	}
	for i := range healthy {
		out = append(out, healthyTarget(fmt.Sprintf("well-%02d", i)))
	}
	return out
}

func conditionOf(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

func eventReasons(events []checkEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Reason)
	}
	return out
}

// TestPlanBudget: the user guide's "Remediation Short-Circuiting" examples, row by row.
func TestPlanBudget(t *testing.T) {
	tests := []struct {
		name             string
		maxUnhealthy     *intstr.IntOrString
		unhealthyRange   string
		total, unhealthy int
		wantAllowed      bool
		wantRemaining    int32
		// belowRange: fewer unhealthy than unhealthyRange's minimum: nothing is remediated, but it is no
		// storm (no StormActive, no RemediationRestricted).
		belowRange bool
	}{
		{name: "maxUnhealthy 2: 2 unhealthy are remediated", maxUnhealthy: ptr.To(intstr.FromInt32(2)), total: 10, unhealthy: 2, wantAllowed: true},
		{name: "maxUnhealthy 2: 3 unhealthy are not", maxUnhealthy: ptr.To(intstr.FromInt32(2)), total: 10, unhealthy: 3},
		{name: "maxUnhealthy 2 is independent of the pool size", maxUnhealthy: ptr.To(intstr.FromInt32(2)), total: 30, unhealthy: 3},
		{name: "40% of 25: 10 unhealthy are remediated", maxUnhealthy: ptr.To(intstr.FromString("40%")), total: 25, unhealthy: 10, wantAllowed: true},
		{name: "40% of 25: 11 unhealthy are not", maxUnhealthy: ptr.To(intstr.FromString("40%")), total: 25, unhealthy: 11},
		{name: "40% of 6 rounds down to 2: 2 unhealthy are remediated", maxUnhealthy: ptr.To(intstr.FromString("40%")), total: 6, unhealthy: 2, wantAllowed: true},
		{name: "40% of 6 rounds down to 2: 3 unhealthy are not", maxUnhealthy: ptr.To(intstr.FromString("40%")), total: 6, unhealthy: 3},
		{name: "40% of 6 with 1 unhealthy leaves room for 1 more", maxUnhealthy: ptr.To(intstr.FromString("40%")), total: 6, unhealthy: 1, wantAllowed: true, wantRemaining: 1},
		{name: "unhealthyRange [3-5] of 10: 2 unhealthy are not remediated", unhealthyRange: "[3-5]", total: 10, unhealthy: 2, belowRange: true},
		{name: "unhealthyRange [3-5] of 10: none unhealthy is no storm", unhealthyRange: "[3-5]", total: 10, unhealthy: 0, belowRange: true},
		{name: "unhealthyRange [3-5] of 10: 3 unhealthy are remediated", unhealthyRange: "[3-5]", total: 10, unhealthy: 3, wantAllowed: true, wantRemaining: 2},
		{name: "unhealthyRange [3-5] of 10: 5 unhealthy are remediated", unhealthyRange: "[3-5]", total: 10, unhealthy: 5, wantAllowed: true},
		{name: "unhealthyRange [3-5] of 10: 6 unhealthy are not remediated", unhealthyRange: "[3-5]", total: 10, unhealthy: 6},
		{name: "unhealthyRange takes precedence over maxUnhealthy", maxUnhealthy: ptr.To(intstr.FromInt32(1)), unhealthyRange: "[3-5]", total: 10, unhealthy: 4, wantAllowed: true, wantRemaining: 1},
		{name: "no budget (the default 100%): all unhealthy are remediated", total: 4, unhealthy: 4, wantAllowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			mhc := unitCheck(func(c *v1alpha1.MachineHealthCheck) {
				c.Spec.MaxUnhealthy, c.Spec.UnhealthyRange = tt.maxUnhealthy, tt.unhealthyRange
			})
			p := mustPlan(g, mhc, "", pool(tt.total-tt.unhealthy, tt.unhealthy)...)

			g.Expect(p.Status.ExpectedMachines).To(HaveValue(BeEquivalentTo(tt.total)))
			g.Expect(p.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(tt.total - tt.unhealthy)))
			g.Expect(p.Status.RemediationsAllowed).To(HaveValue(Equal(tt.wantRemaining)))
			g.Expect(p.Status.UnhealthyMachines).To(HaveLen(tt.unhealthy))
			allowed := conditionOf(p.Status.Conditions, v1alpha1.ConditionRemediationAllowed)
			g.Expect(allowed).NotTo(BeNil())
			g.Expect(allowed.Status == metav1.ConditionTrue).To(Equal(tt.wantAllowed))
			storm := conditionOf(p.Status.Conditions, v1alpha1.ConditionStormActive)
			g.Expect(storm.Status == metav1.ConditionTrue).To(Equal(!tt.wantAllowed && !tt.belowRange), "StormActive")
			if tt.wantAllowed || tt.belowRange {
				g.Expect(eventReasons(p.Events)).NotTo(ContainElement(EventRemediationRestricted))
			} else {
				g.Expect(allowed.Reason).To(Equal(v1alpha1.ReasonTooManyUnhealthy))
				g.Expect(eventReasons(p.Events)).To(ContainElement(EventRemediationRestricted))
			}
			for _, tp := range p.Targets {
				hc := conditionOf(tp.Conditions, clusterv1.MachineHealthCheckSucceededCondition)
				g.Expect(hc).NotTo(BeNil(), "machine %s is reported", tp.Machine.Name)
				if tp.Verdict.State != stateUnhealthy {
					g.Expect(hc.Status).To(Equal(metav1.ConditionTrue))
					continue
				}
				// Unhealthy Machines are reported even while short-circuited; only remediation waits.
				g.Expect(hc.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(tp.MarkedForOwner).To(Equal(tt.wantAllowed), "machine %s", tp.Machine.Name)
				g.Expect(conditionOf(tp.Conditions, clusterv1.MachineOwnerRemediatedCondition) != nil).To(Equal(tt.wantAllowed))
			}
		})
	}
}

func TestPlanRestrictedEventOnlyOnTransition(t *testing.T) {
	g := NewWithT(t)
	mhc := unitCheck(func(c *v1alpha1.MachineHealthCheck) { c.Spec.MaxUnhealthy = ptr.To(intstr.FromInt32(1)) })
	first := mustPlan(g, mhc, "", pool(2, 2)...)
	g.Expect(eventReasons(first.Events)).To(ConsistOf(EventRemediationRestricted))

	mhc.Status = first.Status
	second := mustPlan(g, mhc, "", pool(2, 2)...)
	g.Expect(second.Events).To(BeEmpty())
	g.Expect(second.Status.Conditions).To(Equal(first.Status.Conditions), "transition time kept")
}

func TestPlanSkipRules(t *testing.T) {
	tests := []struct {
		name        string
		target      observedTarget
		paused      string
		wantTarget  bool
		wantBlocked blocker
		// wantReported: HealthCheckSucceeded=False is set on the Machine.
		wantReported bool
		wantEvent    string
	}{
		{name: "skip-remediation annotation: not a target", target: unhealthyTarget("m", func(m *clusterv1.Machine) {
			m.Annotations = map[string]string{clusterv1.MachineSkipRemediationAnnotation: ""}
		})},
		{name: "paused annotation on the Machine: not a target", target: unhealthyTarget("m", func(m *clusterv1.Machine) {
			m.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
		})},
		{name: "paused check or Cluster: reported in status, Machine untouched", target: unhealthyTarget("m"), paused: "paused",
			wantTarget: true, wantBlocked: blockedPaused},
		{name: "no controller: reported in status and by an event, Machine untouched", target: unhealthyTarget("m", func(m *clusterv1.Machine) {
			m.OwnerReferences = nil
		}), wantTarget: true, wantBlocked: blockedNotControlled, wantEvent: EventMachineNotRemediable},
		{name: "owned but not controlled: left alone", target: unhealthyTarget("m", func(m *clusterv1.Machine) {
			m.OwnerReferences[0].Controller = nil
		}), wantTarget: true, wantBlocked: blockedNotControlled, wantEvent: EventMachineNotRemediable},
		{name: "controlled by a MachineDeployment directly: left alone", target: unhealthyTarget("m",
			controlledBy("cluster.x-k8s.io/v1beta2", "MachineDeployment")), wantTarget: true, wantBlocked: blockedNotControlled, wantEvent: EventMachineNotRemediable},
		{name: "controlled by a KubeadmControlPlane: remediated", target: unhealthyTarget("m",
			controlledBy("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane")), wantTarget: true, wantReported: true},
		{name: "being deleted: left alone", target: unhealthyTarget("m", func(m *clusterv1.Machine) {
			m.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		}), wantTarget: true, wantBlocked: blockedDeleting},
		{name: "Node excluded from remediation: reported, not remediated", target: func() observedTarget {
			o := unhealthyTarget("m")
			o.Node.Labels = map[string]string{v1alpha1.LabelExcludeFromRemediation: "true"}
			return o
		}(), wantTarget: true, wantBlocked: blockedExcluded, wantReported: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p := mustPlan(g, unitCheck(), tt.paused, tt.target, healthyTarget("other"))
			if !tt.wantTarget {
				g.Expect(p.Status.Targets).To(Equal([]string{"other"}))
				g.Expect(p.Status.UnhealthyMachines).To(BeEmpty())
				return
			}
			g.Expect(p.Status.Targets).To(Equal([]string{"m", "other"}))
			g.Expect(p.Status.UnhealthyMachines).To(ConsistOf(HaveField("Name", "m")))
			tp := p.Targets[0]
			g.Expect(tp.Blocked).To(Equal(tt.wantBlocked))
			g.Expect(tp.MarkedForOwner).To(Equal(tt.wantBlocked == notBlocked))
			g.Expect(tp.create()).To(BeNil())
			if tt.wantReported {
				g.Expect(conditionOf(tp.Conditions, clusterv1.MachineHealthCheckSucceededCondition)).To(HaveField("Status", metav1.ConditionFalse))
			} else {
				g.Expect(tp.Conditions).To(BeNil(), "the Machine is not touched")
			}
			if tt.wantEvent != "" {
				g.Expect(eventReasons(p.Events)).To(ContainElement(tt.wantEvent))
			}
			paused := conditionOf(p.Status.Conditions, v1alpha1.ConditionPaused)
			g.Expect(paused.Status == metav1.ConditionTrue).To(Equal(tt.paused != ""))
			if tt.paused != "" {
				g.Expect(p.Targets[1].Conditions).To(BeNil(), "a paused check touches no Machine, healthy ones included")
			}
		})
	}
}

func TestPlanConditionRemediation(t *testing.T) {
	withOwnerRemediated := func(s metav1.ConditionStatus) func(*clusterv1.Machine) {
		return func(m *clusterv1.Machine) {
			m.Status.Conditions = []metav1.Condition{
				{Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionFalse,
					Reason: clusterv1.MachineHealthCheckUnhealthyNodeReason, Message: "Health check failed: condition Ready on Node node-m has been Unknown for more than 5m0s",
					LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute))},
				{Type: clusterv1.MachineOwnerRemediatedCondition, Status: s, Reason: "Whatever", LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute))},
			}
		}
	}
	tests := []struct {
		name           string
		target         observedTarget
		wantMarked     bool
		wantConditions bool
	}{
		{name: "first failure: both conditions set", target: unhealthyTarget("m"), wantMarked: true, wantConditions: true},
		{name: "owner finished an earlier remediation (True): asked again", target: unhealthyTarget("m", withOwnerRemediated(metav1.ConditionTrue)),
			wantMarked: true, wantConditions: true},
		{name: "owner is remediating (False): not overwritten, nothing to write", target: unhealthyTarget("m", withOwnerRemediated(metav1.ConditionFalse))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p := mustPlan(g, unitCheck(), "", tt.target)
			tp := p.Targets[0]
			g.Expect(tp.MarkedForOwner).To(Equal(tt.wantMarked))
			if !tt.wantConditions {
				g.Expect(tp.Conditions).To(BeNil())
				return
			}
			hc := conditionOf(tp.Conditions, clusterv1.MachineHealthCheckSucceededCondition)
			g.Expect(hc).To(HaveField("Status", metav1.ConditionFalse))
			g.Expect(hc.Reason).To(Equal(clusterv1.MachineHealthCheckUnhealthyNodeReason))
			or := conditionOf(tp.Conditions, clusterv1.MachineOwnerRemediatedCondition)
			g.Expect(or).To(HaveField("Status", metav1.ConditionFalse))
			g.Expect(or.Reason).To(Equal(clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
			g.Expect(or.LastTransitionTime.Time).To(BeTemporally("==", t0))
		})
	}
}

func TestPlanHealthyWritesOnlyChanges(t *testing.T) {
	g := NewWithT(t)
	p := mustPlan(g, unitCheck(), "", healthyTarget("m"))
	g.Expect(conditionOf(p.Targets[0].Conditions, clusterv1.MachineHealthCheckSucceededCondition)).To(HaveField("Status", metav1.ConditionTrue))

	again := healthyTarget("m", func(m *clusterv1.Machine) { m.Status.Conditions = p.Targets[0].Conditions })
	p = mustPlan(g, unitCheck(), "", again)
	g.Expect(p.Targets[0].Conditions).To(BeNil())
}

func TestPlanNextCheckIsTheEarliestExpiry(t *testing.T) {
	g := NewWithT(t)
	soon := healthyTarget("soon")
	soon.Node.Status.Conditions = []corev1.NodeCondition{nodeCond(corev1.ConditionFalse, 4*time.Minute)} // expires in 1m
	later := healthyTarget("later")
	later.Node.Status.Conditions = []corev1.NodeCondition{nodeCond(corev1.ConditionUnknown, time.Minute)} // expires in 4m
	starting := healthyTarget("starting", func(m *clusterv1.Machine) {
		m.Status.NodeRef.Name = ""
		m.CreationTimestamp = metav1.NewTime(t0.Add(-8 * time.Minute)) // startup expires in 2m
	})
	starting.Node = nil
	p := mustPlan(g, unitCheck(), "", later, starting, soon, unhealthyTarget("sick"))
	g.Expect(p.NextCheck).To(BeTemporally("==", t0.Add(time.Minute)))
	g.Expect(p.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(0)),
		"as Cluster API counts: Machines likely to go unhealthy and a Machine without a Node are not healthy")
	g.Expect(p.Unhealthy).To(Equal(1), "only the sick Machine is remediated")
	g.Expect(p.Decision.Message).To(ContainSubstring("4"), "all four count against the budget")
}

var (
	pcrGVK  = schema.GroupVersionKind{Group: "remediation.metalheal.io", Version: "v1alpha1", Kind: "PowerCycleRemediation"}
	m3GVK   = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta1", Kind: "Metal3Remediation"}
	reboot  = engine.Step{GVK: pcrGVK, Namespace: "ns", Template: "reboot", Timeout: 10 * time.Minute}
	fence   = engine.Step{GVK: pcrGVK, Namespace: "ns", Template: "fence", Timeout: 20 * time.Minute}
	metal3  = engine.Step{GVK: m3GVK, Namespace: "ns", Template: "m3", Timeout: 20 * time.Minute}
	noLimit = engine.Step{GVK: pcrGVK, Namespace: "ns", Template: "reboot"}
)

// request is a request of step s for Machine m, as observe reads it.
func request(s engine.Step, started time.Time, mutate ...func(*unstructured.Unstructured)) engine.Request {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(s.GVK)
	u.SetName("m")
	u.SetNamespace("ns")
	u.SetCreationTimestamp(metav1.NewTime(started))
	u.SetAnnotations(map[string]string{template.AnnotationTemplateName: s.Template})
	for _, f := range mutate {
		f(u)
	}
	return engine.RequestOf(engine.RefOf(u), u)
}

func record(s engine.Step, started time.Time, timedOut *time.Time) v1alpha1.RequestRecord {
	r := v1alpha1.RequestRecord{APIVersion: s.GVK.GroupVersion().String(), Kind: s.GVK.Kind, TemplateName: s.Template,
		Started: metav1.NewTime(started)}
	if timedOut != nil {
		r.TimedOut = ptr.To(metav1.NewTime(*timedOut))
	}
	return r
}

func succeeded(status metav1.ConditionStatus) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Succeeded", "status": string(status),
			"reason": "Done", "message": "", "lastTransitionTime": t0.Format(time.RFC3339)}}, "status", "conditions")
	}
}

func deleting(u *unstructured.Unstructured) { u.SetDeletionTimestamp(ptr.To(metav1.NewTime(t0))) }

// processing adds the remediator's Processing condition to a request.
func processing(status metav1.ConditionStatus) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		conds = append(conds, map[string]any{"type": "Processing", "status": string(status),
			"reason": "Test", "message": "", "lastTransitionTime": t0.Format(time.RFC3339)})
		_ = unstructured.SetNestedSlice(u.Object, conds, "status", "conditions")
	}
}

// markedAt gives a request the timed-out mark set at at.
func markedAt(at time.Time) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) { template.MarkTimedOut(u, at) }
}

// named renames a request.
func named(name string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) { u.SetName(name) }
}

// fenceName is the name of fence's request for Machine m: a later step of reboot's kind.
var fenceName = template.LaterStepName("m", fence.Template)

func TestPlanTemplateRemediation(t *testing.T) {
	withSteps := func(c *v1alpha1.MachineHealthCheck) {
		c.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
			{RemediationTemplate: metal3.Ref(), Order: 2, Timeout: metav1.Duration{Duration: 20 * time.Minute}},
			{RemediationTemplate: reboot.Ref(), Order: 1, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
		}
	}

	t.Run("an unhealthy Machine gets the first step's request and nothing from its owner", func(t *testing.T) {
		g := NewWithT(t)
		p := mustPlan(g, unitCheck(withSteps), "", unhealthyTarget("m"))
		tp := p.Targets[0]
		g.Expect(tp.create()).NotTo(BeNil())
		g.Expect(p.Steps[tp.create().Step].Template).To(Equal("reboot"))
		g.Expect(tp.MarkedForOwner).To(BeFalse())
		g.Expect(conditionOf(tp.Conditions, clusterv1.MachineOwnerRemediatedCondition)).To(BeNil())
		g.Expect(p.Status.UnhealthyMachines).To(ConsistOf(HaveField("Remediations", BeEmpty())), "recorded once sent (execute)")
		g.Expect(p.NextCheck).To(BeTemporally("==", t0.Add(10*time.Minute)), "the step's timeout is the next check")
	})

	t.Run("a healthy Machine's requests are deleted and it leaves the unhealthy list once they are gone", func(t *testing.T) {
		g := NewWithT(t)
		mhc := unitCheck(withSteps)
		mhc.Status.UnhealthyMachines = []v1alpha1.UnhealthyMachine{{Name: "m", Reason: "UnhealthyNode",
			RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{record(reboot, t0.Add(-time.Minute), nil)}}}}
		o := healthyTarget("m")
		o.Requests = []engine.Request{request(reboot, t0.Add(-time.Minute))}
		p := mustPlan(g, mhc, "", o)
		g.Expect(deletes(p.Targets[0])).To(HaveLen(1))
		g.Expect(p.Status.UnhealthyMachines).To(ConsistOf(HaveField("Name", "m")), "kept while its requests are deleted")

		mhc.Status = p.Status
		p = mustPlan(g, mhc, "", healthyTarget("m"))
		g.Expect(p.Status.UnhealthyMachines).To(BeEmpty())
	})

	t.Run("paused: a Machine healthy again keeps its entry as it was, its requests untouched", func(t *testing.T) {
		g := NewWithT(t)
		mhc := unitCheck(withSteps)
		since := metav1.NewTime(t0.Add(-30 * time.Second))
		mhc.Status.UnhealthyMachines = []v1alpha1.UnhealthyMachine{{Name: "m", Reason: "UnhealthyNode",
			RemediationProgress: v1alpha1.RemediationProgress{ConditionsHealthyTimestamp: &since,
				Remediations: []v1alpha1.RequestRecord{record(reboot, t0.Add(-time.Hour), nil)}}}}
		o := healthyTarget("m")
		o.Requests = []engine.Request{request(reboot, t0.Add(-time.Hour))}
		p := mustPlan(g, mhc, "paused", o)
		g.Expect(deletes(p.Targets[0])).To(BeEmpty())
		g.Expect(p.Status.UnhealthyMachines).To(Equal(mhc.Status.UnhealthyMachines), "the delay and the records are not lost")
	})

	t.Run("short-circuited: nothing new starts, requests stay", func(t *testing.T) {
		g := NewWithT(t)
		mhc := unitCheck(withSteps, func(c *v1alpha1.MachineHealthCheck) { c.Spec.MaxUnhealthy = ptr.To(intstr.FromInt32(0)) })
		o := unhealthyTarget("m")
		o.Requests = []engine.Request{request(reboot, t0.Add(-time.Hour))}
		p := mustPlan(g, mhc, "", o, unhealthyTarget("n"))
		for _, tp := range p.Targets {
			g.Expect(tp.Blocked).To(Equal(blockedShortCircuit))
			g.Expect(tp.create()).To(BeNil())
			g.Expect(timeOuts(tp)).To(BeEmpty())
			g.Expect(deletes(tp)).To(BeEmpty())
		}
	})
}

// rebootPastItsTimeout: reboot (10m) then metal3, reboot started 11 minutes ago.
func rebootPastItsTimeout(c *v1alpha1.MachineHealthCheck) {
	c.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
		{RemediationTemplate: metal3.Ref(), Order: 2, Timeout: metav1.Duration{Duration: 20 * time.Minute}},
		{RemediationTemplate: reboot.Ref(), Order: 1, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
	}
	c.Status.UnhealthyMachines = []v1alpha1.UnhealthyMachine{{Name: "m", Reason: "UnhealthyNode",
		RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{record(reboot, t0.Add(-11*time.Minute), nil)}}}}
}

// During a storm the steps under way still end (as a NodeHealthCheck's do); the next one does not start.
func TestPlanStormEndsStepsStartsNothing(t *testing.T) {
	g := NewWithT(t)
	mhc := unitCheck(rebootPastItsTimeout, func(c *v1alpha1.MachineHealthCheck) { c.Spec.MaxUnhealthy = ptr.To(intstr.FromInt32(0)) })
	o := unhealthyTarget("m")
	o.Requests = []engine.Request{request(reboot, t0.Add(-11*time.Minute))}
	p := mustPlan(g, mhc, "", o)
	tp := p.Targets[0]
	g.Expect(tp.Blocked).To(Equal(blockedShortCircuit))
	g.Expect(timeOuts(tp)).To(HaveLen(1), "the first step's timeout passed: it ends")
	g.Expect(tp.create()).To(BeNil(), "the next step waits for the storm to end")
	g.Expect(p.Status.UnhealthyMachines[0].Remediations).To(HaveLen(1))
	g.Expect(p.Status.UnhealthyMachines[0].Remediations[0].TimedOut).NotTo(BeNil())
}

func TestStepsFor(t *testing.T) {
	g := NewWithT(t)
	mhc := unitCheck(func(c *v1alpha1.MachineHealthCheck) {
		c.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
			{RemediationTemplate: v1alpha1.TemplateReference{APIVersion: "infrastructure.cluster.x-k8s.io/v1beta1", Kind: "Metal3RemediationTemplate", Name: "m3"},
				Order: 5, Timeout: metav1.Duration{Duration: time.Hour}},
			{RemediationTemplate: v1alpha1.TemplateReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediationTemplate", Name: "reboot"},
				Order: 1, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
		}
	})
	steps, err := stepsFor(mhc)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(steps).To(HaveLen(2))
	g.Expect(steps[0].GVK).To(Equal(pcrGVK))
	g.Expect(steps[0].Namespace).To(Equal("ns"))
	g.Expect(steps[1].GVK).To(Equal(m3GVK))

	elsewhere := unitCheck(func(c *v1alpha1.MachineHealthCheck) {
		c.Spec.RemediationTemplate = &v1alpha1.TemplateReference{APIVersion: "remediation.metalheal.io/v1alpha1",
			Kind: "PowerCycleRemediationTemplate", Name: "reboot", Namespace: "other"}
	})
	_, err = stepsFor(elsewhere)
	var inv *InvalidSpecError
	g.Expect(errors.As(err, &inv)).To(BeTrue())
}

func TestSelects(t *testing.T) {
	g := NewWithT(t)
	mhc := unitCheck(func(c *v1alpha1.MachineHealthCheck) { c.Spec.ClusterName = "prod" })
	m := unitMachine("m", func(m *clusterv1.Machine) { m.Labels = map[string]string{"pool": "a"}; m.Spec.ClusterName = "prod" })
	g.Expect(selects(mhc, m.Spec.ClusterName, m.Labels)).To(BeTrue())
	m.Spec.ClusterName = "test"
	g.Expect(selects(mhc, m.Spec.ClusterName, m.Labels)).To(BeFalse(), "another cluster's Machine")
	m.Spec.ClusterName, m.Labels["pool"] = "prod", "b"
	g.Expect(selects(mhc, m.Spec.ClusterName, m.Labels)).To(BeFalse(), "labels do not match")
}

// TestPlanHandOver walks one Machine's escalation through planChecks, status carried from pass to pass:
// after step 1 times out, no second request is asked for while the first reports Processing=True; the
// status and an event (once) say what is waited for, and the check looks again at the bound; the second
// request is asked for as soon as the first reports Processing=False or is gone, or at the bound with a
// warning. Steps of the same kind get distinct names and the first request is never deleted.
func TestPlanHandOver(t *testing.T) {
	pairs := []struct {
		name     string
		second   engine.Step
		wantName string
	}{
		{name: "different kinds", second: metal3, wantName: "m"},
		{name: "same kind", second: fence, wantName: fenceName},
	}
	started := t0.Add(-10 * time.Minute) // step 1 times out at t0
	for _, pair := range pairs {
		withSteps := func(c *v1alpha1.MachineHealthCheck) {
			c.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
				{RemediationTemplate: reboot.Ref(), Order: 1, Timeout: metav1.Duration{Duration: reboot.Timeout}},
				{RemediationTemplate: pair.second.Ref(), Order: 2, Timeout: metav1.Duration{Duration: pair.second.Timeout}},
			}
			c.Status.UnhealthyMachines = []v1alpha1.UnhealthyMachine{{Name: "m", Reason: "UnhealthyNode",
				RemediationProgress: v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{record(reboot, started, nil)}}}}
		}
		planAt := func(g Gomega, mhc *v1alpha1.MachineHealthCheck, now time.Time, requests ...engine.Request) (plan, targetPlan) {
			steps, err := stepsFor(mhc)
			g.Expect(err).NotTo(HaveOccurred())
			o := unhealthyTarget("m")
			o.Requests = requests
			p, err := planChecks(planInput{Check: mhc, Spec: checkSpecFor(mhc), Steps: steps, Machines: []observedTarget{o}, Now: now})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Targets).To(HaveLen(1))
			return p, p.Targets[0]
		}
		// waiting runs the pass in which step 1 times out while its request reports Processing=True and
		// returns the check with the status that pass wrote.
		waiting := func(g Gomega) *v1alpha1.MachineHealthCheck {
			mhc := unitCheck(withSteps)
			p, tp := planAt(g, mhc, t0, request(reboot, started, processing(metav1.ConditionTrue)))
			g.Expect(timeOuts(tp)).To(HaveLen(1))
			g.Expect(tp.create()).To(BeNil(), "no second request while the first still acts on the host")
			g.Expect(deletes(tp)).To(BeEmpty())
			g.Expect(p.Status.UnhealthyMachines[0].WaitingFor).To(Equal("PowerCycleRemediation ns/m"))
			g.Expect(eventReasons(p.Events)).To(Equal([]string{EventWaitingForHandOver}))
			g.Expect(p.Events[0].Note).To(ContainSubstring("PowerCycleRemediation ns/m"))
			g.Expect(p.NextCheck).To(BeTemporally("==", t0.Add(template.HandOverBound)), "look again at the bound")
			mhc.Status = p.Status
			return mhc
		}
		first := func(status metav1.ConditionStatus) engine.Request {
			return request(reboot, started, markedAt(t0), processing(status))
		}
		secondAskedFor := func(g Gomega, p plan, tp targetPlan) {
			g.Expect(tp.create()).NotTo(BeNil())
			g.Expect(p.Steps[tp.create().Step]).To(Equal(pair.second))
			g.Expect(tp.create().Name).To(Equal(pair.wantName))
			g.Expect(deletes(tp)).To(BeEmpty(), "the escalation never deletes the first request")
			g.Expect(p.Status.UnhealthyMachines[0].WaitingFor).To(BeEmpty())
			g.Expect(p.Status.UnhealthyMachines[0].Remediations).To(HaveLen(1), "the second is recorded once sent (execute)")
		}

		t.Run(pair.name+": Processing=True holds the next step, said once", func(t *testing.T) {
			g := NewWithT(t)
			mhc := waiting(g)
			p, tp := planAt(g, mhc, t0.Add(time.Minute), first(metav1.ConditionTrue))
			g.Expect(tp.create()).To(BeNil())
			g.Expect(timeOuts(tp)).To(BeEmpty())
			g.Expect(deletes(tp)).To(BeEmpty())
			g.Expect(p.Events).To(BeEmpty())
			g.Expect(p.Status.UnhealthyMachines[0].WaitingFor).To(Equal("PowerCycleRemediation ns/m"))
			g.Expect(p.NextCheck).To(BeTemporally("==", t0.Add(template.HandOverBound)))
		})
		t.Run(pair.name+": asked for as soon as the first reports Processing=False", func(t *testing.T) {
			g := NewWithT(t)
			mhc := waiting(g)
			p, tp := planAt(g, mhc, t0.Add(time.Minute), first(metav1.ConditionFalse))
			secondAskedFor(g, p, tp)
			g.Expect(p.Events).To(BeEmpty())
		})
		t.Run(pair.name+": asked for as soon as the first is gone", func(t *testing.T) {
			g := NewWithT(t)
			mhc := waiting(g)
			p, tp := planAt(g, mhc, t0.Add(time.Minute))
			secondAskedFor(g, p, tp)
		})
		t.Run(pair.name+": a first request that never hands over holds it exactly until the bound", func(t *testing.T) {
			g := NewWithT(t)
			mhc := waiting(g)
			_, tp := planAt(g, mhc, t0.Add(template.HandOverBound-time.Second), first(metav1.ConditionTrue))
			g.Expect(tp.create()).To(BeNil())
			p, tp := planAt(g, mhc, t0.Add(template.HandOverBound), first(metav1.ConditionTrue))
			secondAskedFor(g, p, tp)
			g.Expect(eventReasons(p.Events)).To(Equal([]string{EventHandOverTimedOut}))
			g.Expect(p.Events[0].Type).To(Equal(corev1.EventTypeWarning))
			g.Expect(p.Events[0].Note).To(ContainSubstring("PowerCycleRemediation ns/m"))
		})
		t.Run(pair.name+": a first request without a Processing condition does not hold it", func(t *testing.T) {
			g := NewWithT(t)
			p, tp := planAt(g, unitCheck(withSteps), t0, request(reboot, started))
			g.Expect(timeOuts(tp)).To(HaveLen(1))
			secondAskedFor(g, p, tp)
			g.Expect(p.Events).To(BeEmpty())
		})
	}
}

// timeOuts and deletes are the requests a Machine's plan marks timed out and deletes.
func timeOuts(tp targetPlan) []engine.Request {
	if tp.Out == nil {
		return nil
	}
	return requests(tp.Out, tp.Out.Walk.TimeOut)
}

func deletes(tp targetPlan) []engine.Request {
	if tp.Out == nil {
		return nil
	}
	return requests(tp.Out, tp.Out.Walk.Delete, tp.Out.Delete)
}

// requests are the requests of o's target that refs name.
func requests(o *engine.Outcome, refs ...[]engine.Ref) []engine.Request {
	all := slices.Concat(refs...)
	return slices.DeleteFunc(slices.Clone(o.Target.Requests), func(q engine.Request) bool { return !slices.Contains(all, q.Ref) })
}

// A check disabled by a template (missing, or unusable) is a NodeHealthCheck's Disabled: its steps under
// way still end, nothing new starts, its Machines are still reported, and the condition says why.
func TestPlanDisabledEndsStepsStartsNothing(t *testing.T) {
	g := NewWithT(t)
	mhc := unitCheck(rebootPastItsTimeout)
	steps, err := stepsFor(mhc)
	g.Expect(err).NotTo(HaveOccurred())
	o := unhealthyTarget("m")
	o.Requests = []engine.Request{request(reboot, t0.Add(-11*time.Minute))}
	cause := &engine.Cause{Reason: v1alpha1.ReasonTemplateNotFound, Message: "Remediation template metal3 not found"}
	p, err := planChecks(planInput{Check: mhc, Spec: checkSpecFor(mhc), Steps: steps, Machines: []observedTarget{o, unhealthyTarget("n")},
		Now: t0, Disabled: cause, DisabledUntil: t0.Add(time.Minute)})
	g.Expect(err).NotTo(HaveOccurred())
	for _, tp := range p.Targets {
		g.Expect(tp.Blocked).To(Equal(blockedDisabled))
		g.Expect(tp.create()).To(BeNil(), "nothing starts")
		g.Expect(conditionOf(tp.Conditions, clusterv1.MachineHealthCheckSucceededCondition)).To(HaveField("Status", metav1.ConditionFalse),
			"still reported")
	}
	g.Expect(timeOuts(p.Targets[0])).To(HaveLen(1), "the first step's timeout passed: it ends")
	g.Expect(conditionOf(p.Status.Conditions, v1alpha1.ConditionDisabled)).To(And(HaveField("Status", metav1.ConditionTrue),
		HaveField("Reason", v1alpha1.ReasonTemplateNotFound), HaveField("Message", cause.Message)))
	g.Expect(p.Events).To(ContainElement(And(HaveField("Reason", EventDisabled), HaveField("Type", corev1.EventTypeWarning))))
	g.Expect(p.NextCheck).To(BeTemporally("<=", t0.Add(time.Minute)), "a kind not installed is looked at again")
}
