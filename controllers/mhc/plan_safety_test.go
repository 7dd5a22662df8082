package mhc

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
)

// TestPlanSafetyGatesOwnerRemediation: the gates shared with the NodeHealthCheck hold back Cluster API's
// owner remediation (no template) too: the owner is asked to replace a Machine only when they allow it.
func TestPlanSafetyGatesOwnerRemediation(t *testing.T) {
	cp := func(m *clusterv1.Machine) {
		m.Labels = map[string]string{clusterv1.MachineControlPlaneLabel: "", "pool": "a"}
		controlledBy("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane")(m)
	}
	inPool := func(m *clusterv1.Machine) { m.Labels = map[string]string{"pool": "a"} }
	handed := func(m *clusterv1.Machine) {
		m.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse}}
	}
	older := unitCheck(func(c *v1alpha1.MachineHealthCheck) {
		c.Name, c.UID, c.CreationTimestamp = "older", "older-uid", metav1.NewTime(t0.Add(-time.Hour))
	})
	sel, _ := metav1.LabelSelectorAsSelector(&older.Spec.Selector)
	tests := []struct {
		name       string
		targets    []observedTarget
		safety     safetyInput
		wantMarked []string
		wantSkip   map[string]blocker
		wantNext   time.Time
	}{
		{
			name:       "no gate: every unhealthy Machine goes to its owner",
			targets:    []observedTarget{unhealthyTarget("a"), unhealthyTarget("b")},
			wantMarked: []string{"a", "b"},
		},
		{
			name:    "a lease held by node-maintenance hands the Node off until it runs out",
			targets: []observedTarget{unhealthyTarget("a")},
			safety: safetyInput{Leases: map[string]gates.Lease{
				"node-a": {Holder: "node-maintenance", Until: t0.Add(3 * time.Minute)}}},
			wantSkip: map[string]blocker{"a": blockedLeaseHeld},
			wantNext: t0.Add(3*time.Minute + time.Second),
		},
		{
			name:       "three control-plane Machines: one at a time",
			targets:    []observedTarget{unhealthyTarget("cp-0", cp), unhealthyTarget("cp-1", cp), unhealthyTarget("cp-2", cp)},
			wantMarked: []string{"cp-0"},
			wantSkip:   map[string]blocker{"cp-1": blockedControlPlaneBusy, "cp-2": blockedControlPlaneBusy},
		},
		{
			name:     "a control-plane Machine already handed to its owner keeps the others waiting",
			targets:  []observedTarget{unhealthyTarget("cp-0", cp, handed), unhealthyTarget("cp-1", cp)},
			wantSkip: map[string]blocker{"cp-1": blockedControlPlaneBusy},
		},
		{
			name:     "a control-plane Node under anyone's remediation elsewhere counts",
			targets:  []observedTarget{unhealthyTarget("cp-1", cp)},
			safety:   safetyInput{BusyControlPlane: []string{"other-cp"}},
			wantSkip: map[string]blocker{"cp-1": blockedControlPlaneBusy},
		},
		{
			name:     "an older check that selects the Machine and finds it unhealthy owns it",
			targets:  []observedTarget{unhealthyTarget("a", inPool)},
			safety:   safetyInput{Peers: []mhcPeer{{Check: older, Spec: checkSpecFor(older), Sel: sel, Remediating: map[string]bool{}}}},
			wantSkip: map[string]blocker{"a": blockedOwnedByOtherCheck},
		},
		{
			name:    "an older check whose selector does not match owns nothing",
			targets: []observedTarget{unhealthyTarget("a", inPool)},
			safety: safetyInput{Peers: []mhcPeer{{Check: older, Spec: checkSpecFor(older), Sel: labels.Nothing(),
				Remediating: map[string]bool{}}}},
			wantMarked: []string{"a"},
		},
		{
			name:     "a NodeHealthCheck remediating the Node keeps it",
			targets:  []observedTarget{unhealthyTarget("a")},
			safety:   safetyInput{Elsewhere: map[string]string{"node-a": "NodeHealthCheck workers"}},
			wantSkip: map[string]blocker{"a": blockedOwnedByOtherCheck},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			mhc := unitCheck(func(c *v1alpha1.MachineHealthCheck) { c.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute)) })
			tt.safety.Holder = "MachineHealthCheck.remediation.metalheal.io-check"
			p, err := planChecks(planInput{Check: mhc, Spec: checkSpecFor(mhc), Machines: tt.targets, Now: t0, Safety: tt.safety})
			g.Expect(err).NotTo(HaveOccurred())
			var marked []string
			skips := map[string]blocker{}
			for _, tp := range p.Targets {
				if tp.MarkedForOwner {
					marked = append(marked, tp.Machine.Name)
				}
				if tp.Blocked != notBlocked {
					skips[tp.Machine.Name] = tp.Blocked
				}
			}
			g.Expect(marked).To(ConsistOf(tt.wantMarked))
			g.Expect(skips).To(Equal(orEmpty(tt.wantSkip)))
			for name, b := range tt.wantSkip {
				e := entryOfStatus(p.Status, name)
				g.Expect(e).NotTo(BeNil())
				g.Expect(e.SkipReason).To(Equal(string(b)))
				g.Expect(eventReasons(p.Events)).To(ContainElement(EventRemediationSkipped))
			}
			if !tt.wantNext.IsZero() {
				g.Expect(p.NextCheck).To(Equal(tt.wantNext))
			}
		})
	}
}

func orEmpty(m map[string]blocker) map[string]blocker {
	if m == nil {
		return map[string]blocker{}
	}
	return m
}

func entryOfStatus(st v1alpha1.MachineHealthCheckStatus, name string) *v1alpha1.UnhealthyMachine {
	for i := range st.UnhealthyMachines {
		if st.UnhealthyMachines[i].Name == name {
			return &st.UnhealthyMachines[i]
		}
	}
	return nil
}

// TestOwnerRemediationHoldsTheNodeLease: a Machine handed to its owner for replacement is a remediation of
// its Node like any other, so the check holds the Node's lease for it: taken before the Machine is
// marked, renewed at half-time while the owner replaces it, released once it is no longer handed over.
// A NodeHealthCheck's control-plane rule (and node maintenance) reads that lease.
func TestOwnerRemediationHoldsTheNodeLease(t *testing.T) {
	const self = "MachineHealthCheck.remediation.metalheal.io-check"
	handed := func(m *clusterv1.Machine) {
		m.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse}}
	}
	tests := []struct {
		name        string
		target      observedTarget
		leases      map[string]gates.Lease
		wantMarked  bool
		wantLease   bool // the plan takes or renews the lease
		wantRelease bool
		wantNext    time.Time
	}{
		{
			name:       "handed to its owner: the lease is taken first",
			target:     unhealthyTarget("a"),
			leases:     map[string]gates.Lease{},
			wantMarked: true, wantLease: true,
		},
		{
			name:   "its owner replaces it: the lease is kept, renewed at half-time",
			target: unhealthyTarget("a", handed),
			leases: map[string]gates.Lease{"node-a": {Holder: self, Until: t0.Add(time.Minute)}},
			// With the default 10m lease, a minute left is past half-time.
			wantLease: true,
		},
		{
			name:     "its owner replaces it, the lease fresh: nothing to write until half-time",
			target:   unhealthyTarget("a", handed),
			leases:   map[string]gates.Lease{"node-a": {Holder: self, Until: t0.Add(9 * time.Minute)}},
			wantNext: t0.Add(4 * time.Minute),
		},
		{
			name:        "healthy and not handed over: the lease is released",
			target:      healthyTarget("a"),
			leases:      map[string]gates.Lease{"node-a": {Holder: self, Until: t0.Add(9 * time.Minute)}},
			wantRelease: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			mhc := unitCheck(func(c *v1alpha1.MachineHealthCheck) { c.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute)) })
			p, err := planChecks(planInput{Check: mhc, Spec: checkSpecFor(mhc), Machines: []observedTarget{tt.target}, Now: t0,
				Safety: safetyInput{Holder: self, Leases: tt.leases, LeaseDuration: 10 * time.Minute}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Targets).To(HaveLen(1))
			tp := p.Targets[0]
			g.Expect(tp.MarkedForOwner).To(Equal(tt.wantMarked))
			if tt.wantLease {
				g.Expect(tp.Lease).NotTo(BeNil())
				g.Expect(tp.Lease.Node.Name).To(Equal("node-a"))
			} else {
				g.Expect(tp.Lease).To(BeNil())
			}
			if tt.wantRelease {
				g.Expect(p.Release).To(ConsistOf("node-a"))
			} else {
				g.Expect(p.Release).To(BeEmpty())
			}
			if !tt.wantNext.IsZero() {
				g.Expect(p.NextCheck).To(Equal(tt.wantNext))
			}
		})
	}
}

// TestPlanTimedOutControlPlaneStepHoldsTheControlPlane: a control-plane Machine whose step timed out is
// still acted on (its request may be handing the host over, the next step is to come), though its lease
// lapsed while the manager was down: no other control-plane Machine starts in the pass that retakes it.
// Before, only a request not yet ended counted, and the new start ran ahead of the retake.
func TestPlanTimedOutControlPlaneStepHoldsTheControlPlane(t *testing.T) {
	g := NewWithT(t)
	const self = "MachineHealthCheck.remediation.metalheal.io-check"
	cp := func(m *clusterv1.Machine) {
		m.Labels = map[string]string{clusterv1.MachineControlPlaneLabel: "", "pool": "a"}
		controlledBy("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane")(m)
	}
	reboot := v1alpha1.TemplateReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediationTemplate", Name: "reboot"}
	fence := v1alpha1.TemplateReference{APIVersion: "fence.example.com/v1", Kind: "FenceRemediationTemplate", Name: "fence"}
	mhc := unitCheck(func(c *v1alpha1.MachineHealthCheck) {
		c.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
		c.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
			{RemediationTemplate: reboot, Order: 0, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
			{RemediationTemplate: fence, Order: 1, Timeout: metav1.Duration{Duration: 10 * time.Minute}}}
		c.Status.UnhealthyMachines = []v1alpha1.UnhealthyMachine{{Name: "cp-1", RemediationProgress: v1alpha1.RemediationProgress{
			Remediations: []v1alpha1.RequestRecord{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediation",
				Namespace: "ns", Name: "cp-1", TemplateName: "reboot", Started: metav1.NewTime(t0.Add(-12 * time.Minute)),
				TimedOut: &metav1.Time{Time: t0.Add(-2 * time.Minute)}}}}}}
	})
	steps, err := stepsFor(mhc)
	g.Expect(err).NotTo(HaveOccurred())
	cp1 := unhealthyTarget("cp-1", cp)
	cp1.Requests = []engine.Request{{Ref: engine.Ref{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediation",
		Namespace: "ns", Name: "cp-1"}, TemplateName: "reboot", Created: t0.Add(-12 * time.Minute), TimedOut: true,
		TimedOutAt: t0.Add(-2 * time.Minute), Processing: metav1.ConditionTrue}}
	p, err := planChecks(planInput{Check: mhc, Spec: checkSpecFor(mhc), Steps: steps, Now: t0,
		Machines: []observedTarget{unhealthyTarget("cp-0", cp), cp1},
		Safety: safetyInput{Holder: self, LeaseDuration: 10 * time.Minute,
			Leases: map[string]gates.Lease{"node-cp-1": {Holder: self, Until: t0.Add(-time.Minute)}}}})
	g.Expect(err).NotTo(HaveOccurred())
	cp0, cp1p := p.Targets[0], p.Targets[1]
	g.Expect(cp0.Machine.Name).To(Equal("cp-0"))
	g.Expect(cp0.create()).To(BeNil(), "no second control-plane start")
	g.Expect(cp0.Blocked).To(Equal(blockedControlPlaneBusy))
	g.Expect(cp1p.Lease).NotTo(BeNil(), "cp-1's lapsed lease is retaken")
}

// TestPlanChangingControlPlaneHoldsTheControlPlane: while a control-plane Machine is being deleted or has
// no Node (a replacement joining, or one whose Node is gone), no other control-plane Machine's remediation
// starts, by either path: the control plane is changing, and a Machine without a Node has no lease to
// record it. The Node-less Machine itself is not held back by itself.
func TestPlanChangingControlPlaneHoldsTheControlPlane(t *testing.T) {
	cp := func(m *clusterv1.Machine) {
		m.Labels = map[string]string{clusterv1.MachineControlPlaneLabel: "", "pool": "a"}
		controlledBy("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane")(m)
	}
	joining := observedTarget{Machine: unitMachine("cp-new", cp, func(m *clusterv1.Machine) {
		m.Status.NodeRef.Name, m.CreationTimestamp = "", metav1.NewTime(t0.Add(-2*time.Minute)) // within nodeStartupTimeout
	})}
	leaving := healthyTarget("cp-old", cp, func(m *clusterv1.Machine) {
		m.DeletionTimestamp, m.Finalizers = &metav1.Time{Time: t0.Add(-time.Minute)}, []string{"machine.cluster.x-k8s.io"}
	})
	nodeGone := observedTarget{Machine: unitMachine("cp-2", cp), NodeMissing: true}
	reboot := &v1alpha1.TemplateReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediationTemplate", Name: "reboot"}
	for name, tc := range map[string]struct {
		template *v1alpha1.TemplateReference
		machines []observedTarget
		want     map[string]blocker // the unhealthy Machines' blockers
	}{
		"a replacement joining, owner remediation":    {machines: []observedTarget{joining, unhealthyTarget("cp-1", cp)}, want: map[string]blocker{"cp-1": blockedControlPlaneBusy}},
		"a replacement joining, a template":           {template: reboot, machines: []observedTarget{joining, unhealthyTarget("cp-1", cp)}, want: map[string]blocker{"cp-1": blockedControlPlaneBusy}},
		"a Machine being deleted, owner remediation":  {machines: []observedTarget{leaving, unhealthyTarget("cp-1", cp)}, want: map[string]blocker{"cp-1": blockedControlPlaneBusy}},
		"a Machine whose Node is gone is remediated":  {machines: []observedTarget{nodeGone, healthyTarget("cp-1", cp)}, want: map[string]blocker{"cp-2": notBlocked}},
		"a Machine whose Node is gone holds the rest": {machines: []observedTarget{nodeGone, unhealthyTarget("cp-1", cp)}, want: map[string]blocker{"cp-1": blockedControlPlaneBusy, "cp-2": notBlocked}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			mhc := unitCheck(func(c *v1alpha1.MachineHealthCheck) { c.Spec.RemediationTemplate = tc.template })
			steps, err := stepsFor(mhc)
			g.Expect(err).NotTo(HaveOccurred())
			p, err := planChecks(planInput{Check: mhc, Spec: checkSpecFor(mhc), Steps: steps, Now: t0, Machines: tc.machines,
				Safety: safetyInput{Holder: "MachineHealthCheck.remediation.metalheal.io-check", LeaseDuration: 10 * time.Minute,
					Leases: map[string]gates.Lease{}}})
			g.Expect(err).NotTo(HaveOccurred())
			got := map[string]blocker{}
			for _, tp := range p.Targets {
				if tp.Verdict.State == stateUnhealthy {
					got[tp.Machine.Name] = tp.Blocked
					started := tp.MarkedForOwner || tp.create() != nil
					g.Expect(started).To(Equal(tp.Blocked == notBlocked), "machine %s", tp.Machine.Name)
				}
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
