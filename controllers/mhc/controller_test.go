package mhc

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/internal/workload"
)

var _ = Describe("Resync", func() {
	It("looks at a quiet check again within the default resync period (60s), as a NodeHealthCheck does", func(ctx SpecContext) {
		w := newWorld(ctx)
		r, err := New(Options{Client: k8s, Reader: k8s, APIReader: k8s, Recorder: w.rec, Clock: w.clock, Discovery: mgmtDiscovery})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { r.remotes.StopAll() })
		w.createCheck(ctx, "workers")
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionTrue, time.Hour)
		w.createMachine(ctx, "m", withNodeRef(node.Name))

		res, err := r.Reconcile(ctx, reconcileRequest(w.ns, "workers"))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(Equal(engine.DefaultResyncPeriod))
	})
})

var _ = Describe("Dry run", func() {
	It("decides everything and starts nothing: no request, no owner mark, no lease; the status, an event and the gauge say what it would do", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "owner", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.DryRun = true
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "o"}
		})
		w.createCheck(ctx, "template", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.DryRun = true
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "t"}
			mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot"))
		})
		for _, name := range []string{"o", "t"} {
			node := w.createNode(ctx, k8s, w.nodeName(name), corev1.ConditionUnknown, 10*time.Minute)
			w.createMachine(ctx, name, withLabels("pool", name), withNodeRef(node.Name))
		}
		w.reconcile(ctx, "owner")
		w.reconcile(ctx, "template")
		w.reconcile(ctx, "owner")
		w.reconcile(ctx, "template")

		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		m := w.machine(ctx, "o")
		Expect(condition(m, clusterv1.MachineOwnerRemediatedCondition)).To(BeNil(), "not handed to its owner")
		Expect(condition(m, clusterv1.MachineHealthCheckSucceededCondition)).To(haveCondition(metav1.ConditionFalse,
			clusterv1.MachineHealthCheckUnhealthyNodeReason), "reported on the Machine, as always")
		Expect(leaseHolder(ctx, w.nodeName("o"))).To(BeEmpty())
		Expect(leaseHolder(ctx, w.nodeName("t"))).To(BeEmpty())
		Expect(entryOf(w.check(ctx, "owner"), "o")).To(And(HaveField("SkipReason", engine.SkipDryRun),
			HaveField("SkipMessage", Equal(engine.WouldHandToOwner))))
		Expect(entryOf(w.check(ctx, "template"), "t")).To(And(HaveField("SkipReason", engine.SkipDryRun),
			HaveField("SkipMessage", ContainSubstring("would create PowerCycleRemediation "+w.ns+"/t from template reboot")),
			HaveField("Remediations", BeEmpty())))
		Expect(countReason(w.rec.all(), engine.EventWouldRemediate)).To(Equal(2), "once per Machine")
		Expect(CheckState(w.check(ctx, "template"), w.clock.Now()).WouldRemediate).To(Equal(1))

		By("acting for real: the Machine gets its request")
		c := w.check(ctx, "template")
		c.Spec.DryRun = false
		Expect(k8s.Update(ctx, c)).To(Succeed())
		w.reconcile(ctx, "template")
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))
	})
})

var _ = Describe("Unhealthy criteria, with condition-based remediation", func() {
	DescribeTable("marks the Machine for its owner: HealthCheckSucceeded=False and OwnerRemediated=False",
		func(ctx SpecContext, setup func(context.Context, *world), wantReason string) {
			w := newWorld(ctx)
			w.createCheck(ctx, "workers")
			setup(ctx, w)

			res := w.reconcile(ctx, "workers")

			m := w.machine(ctx, "m")
			Expect(condition(m, clusterv1.MachineHealthCheckSucceededCondition)).To(haveCondition(metav1.ConditionFalse, wantReason))
			Expect(condition(m, clusterv1.MachineOwnerRemediatedCondition)).To(
				haveCondition(metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
			st := w.check(ctx, "workers").Status
			Expect(st.ExpectedMachines).To(HaveValue(BeEquivalentTo(1)))
			Expect(st.CurrentHealthy).To(HaveValue(BeEquivalentTo(0)))
			Expect(st.Targets).To(Equal([]string{"m"}))
			Expect(st.UnhealthyMachines).To(ConsistOf(And(HaveField("Name", "m"), HaveField("Reason", wantReason))))
			Expect(meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionRemediationAllowed)).To(BeTrue())
			Expect(w.rec.all()).To(ContainElement(And(HaveField("Kind", "Machine"), HaveField("Reason", EventMachineMarkedUnhealthy))))
			Expect(res.RequeueAfter).To(Equal(worldResync), "nothing left to wait for but the resync")
			Expect(testutil.ToFloat64(unhealthyMachines.WithLabelValues(w.ns + "/workers"))).To(BeEquivalentTo(1))

			By("a second reconcile writes nothing new")
			before := w.machine(ctx, "m").ResourceVersion
			w.reconcile(ctx, "workers")
			Expect(w.machine(ctx, "m").ResourceVersion).To(Equal(before))
		},
		Entry("Node Ready=Unknown for longer than its timeout", func(ctx context.Context, w *world) {
			w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 6*time.Minute)
			w.createMachine(ctx, "m", withNodeRef(w.nodeName("n")))
		}, clusterv1.MachineHealthCheckUnhealthyNodeReason),
		Entry("Node Ready=False for longer than its timeout", func(ctx context.Context, w *world) {
			w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionFalse, 5*time.Minute)
			w.createMachine(ctx, "m", withNodeRef(w.nodeName("n")))
		}, clusterv1.MachineHealthCheckUnhealthyNodeReason),
		Entry("no Node joined within nodeStartupTimeout (10m by default)", func(ctx context.Context, w *world) {
			w.createMachine(ctx, "m")
			w.clock.Step(11 * time.Minute)
		}, clusterv1.MachineHealthCheckNodeStartupTimeoutReason),
		Entry("the nodeRef points at a Node that no longer exists", func(ctx context.Context, w *world) {
			w.createMachine(ctx, "m", withNodeRef(w.nodeName("gone")))
		}, clusterv1.MachineHealthCheckNodeDeletedReason),
		Entry("the Machine reports a terminal failure", func(ctx context.Context, w *world) {
			w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionTrue, time.Hour)
			w.createMachine(ctx, "m", withNodeRef(w.nodeName("n")), withTerminalFailure)
		}, clusterv1.MachineHealthCheckUnhealthyMachineReason),
		Entry("the Machine carries the remediate-machine annotation", func(ctx context.Context, w *world) {
			w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionTrue, time.Hour)
			w.createMachine(ctx, "m", withNodeRef(w.nodeName("n")), withAnnotation(clusterv1.RemediateMachineAnnotation))
		}, clusterv1.MachineHealthCheckHasRemediateAnnotationReason),
	)

	It("finds a Machine unhealthy by its own condition (unhealthyMachineConditions) while its Node is Ready", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.UnhealthyMachineConditions = []v1alpha1.MachineUnhealthyCondition{
				{Type: "InfrastructureReady", Status: "False", Timeout: metav1.Duration{Duration: 10 * time.Minute}}}
		})
		w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionTrue, time.Hour)
		infraDown := machineOpt{status: func(m *clusterv1.Machine) {
			m.Status.Conditions = []metav1.Condition{{Type: "InfrastructureReady", Status: metav1.ConditionFalse,
				Reason: "HostPoweredOff", LastTransitionTime: metav1.NewTime(w.clock.Now().Add(-4 * time.Minute))}}
		}}
		w.createMachine(ctx, "m", withNodeRef(w.nodeName("n")), infraDown)

		res := w.reconcile(ctx, "workers")
		Expect(res.RequeueAfter).To(Equal(6*time.Minute), "looks again when the Machine's condition expires")
		Expect(condition(w.machine(ctx, "m"), clusterv1.MachineOwnerRemediatedCondition)).To(BeNil())

		w.clock.Step(6 * time.Minute)
		w.reconcile(ctx, "workers")
		m := w.machine(ctx, "m")
		Expect(condition(m, clusterv1.MachineHealthCheckSucceededCondition)).To(haveCondition(metav1.ConditionFalse,
			clusterv1.MachineHealthCheckUnhealthyMachineReason))
		Expect(condition(m, clusterv1.MachineOwnerRemediatedCondition)).To(
			haveCondition(metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
	})

	It("requeues at the exact expiry and remediates then, not before", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createCheck(ctx, "workers")
		w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 2*time.Minute)
		w.createMachine(ctx, "m", withNodeRef(w.nodeName("n")))

		res := w.reconcile(ctx, "workers")
		Expect(res.RequeueAfter).To(Equal(3 * time.Minute))
		m := w.machine(ctx, "m")
		Expect(condition(m, clusterv1.MachineHealthCheckSucceededCondition)).To(haveCondition(metav1.ConditionTrue, clusterv1.MachineHealthCheckSucceededReason))
		Expect(condition(m, clusterv1.MachineOwnerRemediatedCondition)).To(BeNil())

		w.clock.Step(3*time.Minute - time.Nanosecond)
		Expect(w.reconcile(ctx, "workers").RequeueAfter).To(Equal(time.Nanosecond))
		Expect(condition(w.machine(ctx, "m"), clusterv1.MachineOwnerRemediatedCondition)).To(BeNil())

		w.clock.Step(time.Nanosecond)
		w.reconcile(ctx, "workers")
		Expect(condition(w.machine(ctx, "m"), clusterv1.MachineOwnerRemediatedCondition)).To(
			haveCondition(metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
	})

	It("never lets one Machine's state hold up another's", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createCheck(ctx, "workers")
		// a: already handed to its owner; b: newly unhealthy; c: not controlled (left alone).
		w.createMachine(ctx, "a", withNodeRef(w.nodeName("gone-a")))
		w.reconcile(ctx, "workers")
		w.createMachine(ctx, "b", withNodeRef(w.nodeName("gone-b")))
		w.createMachine(ctx, "c", withNodeRef(w.nodeName("gone-c")), withoutOwner)

		w.reconcile(ctx, "workers")
		Expect(condition(w.machine(ctx, "b"), clusterv1.MachineOwnerRemediatedCondition)).To(
			haveCondition(metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines).To(HaveLen(3))
	})
})

var _ = Describe("Skipping remediation (the user guide's rules)", func() {
	DescribeTable("leaves the unhealthy Machine untouched",
		func(ctx SpecContext, machineOpts []machineOpt, checkOpts func(*v1alpha1.MachineHealthCheck), cluster *clusterv1.Cluster, wantTarget, wantPaused bool) {
			w := newWorld(ctx)
			if cluster != nil {
				cluster.Namespace = w.ns
				Expect(k8s.Create(ctx, cluster)).To(Succeed())
			}
			w.createCheck(ctx, "workers", checkOpts)
			w.createMachine(ctx, "m", append([]machineOpt{withNodeRef(w.nodeName("gone"))}, machineOpts...)...)

			w.reconcile(ctx, "workers")

			m := w.machine(ctx, "m")
			Expect(m.Status.Conditions).To(BeEmpty(), "no condition is written")
			st := w.check(ctx, "workers").Status
			if wantTarget {
				Expect(st.Targets).To(Equal([]string{"m"}))
				Expect(st.UnhealthyMachines).To(ConsistOf(HaveField("Name", "m")), "still reported in the check's status")
			} else {
				Expect(st.Targets).To(BeEmpty())
				Expect(st.ExpectedMachines).To(HaveValue(BeEquivalentTo(0)))
			}
			Expect(meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionPaused)).To(Equal(wantPaused))
		},
		Entry("the Machine has cluster.x-k8s.io/skip-remediation",
			[]machineOpt{withAnnotation(clusterv1.MachineSkipRemediationAnnotation)}, func(*v1alpha1.MachineHealthCheck) {}, nil, false, false),
		Entry("the Machine has cluster.x-k8s.io/paused",
			[]machineOpt{withAnnotation(clusterv1.PausedAnnotation)}, func(*v1alpha1.MachineHealthCheck) {}, nil, false, false),
		Entry("the MachineHealthCheck has cluster.x-k8s.io/paused", nil, func(mhc *v1alpha1.MachineHealthCheck) {
			metav1.SetMetaDataAnnotation(&mhc.ObjectMeta, clusterv1.PausedAnnotation, "")
		}, nil, true, true),
		Entry("the Cluster has spec.paused=true", nil, func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.ClusterName = "c1"
		}, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c1"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}}, true, true),
	)

	It("reports a Machine without a controlling owner and leaves it alone", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createCheck(ctx, "workers")
		w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, time.Hour)
		w.createMachine(ctx, "m", withNodeRef(w.nodeName("n")), withoutOwner)
		before := w.machine(ctx, "m").ResourceVersion

		w.reconcile(ctx, "workers")
		w.reconcile(ctx, "workers")

		m := w.machine(ctx, "m")
		Expect(m.ResourceVersion).To(Equal(before), "the Machine is not written")
		st := w.check(ctx, "workers").Status
		Expect(st.UnhealthyMachines).To(ConsistOf(And(HaveField("Name", "m"), HaveField("Reason", clusterv1.MachineHealthCheckUnhealthyNodeReason))))
		Expect(st.CurrentHealthy).To(HaveValue(BeEquivalentTo(0)))
		Expect(w.rec.all()).To(ConsistOf(And(HaveField("Kind", "Machine"), HaveField("Name", "m"),
			HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", EventMachineNotRemediable))), "one event, on the transition")
	})
})

var _ = Describe("Remediation short-circuiting (the user guide's examples)", func() {
	DescribeTable("remediates only within maxUnhealthy / unhealthyRange, and still reports every unhealthy Machine",
		func(ctx SpecContext, maxUnhealthy *intstr.IntOrString, unhealthyRange string, total, unhealthy int, wantAllowed bool, wantRemaining int) {
			w := newWorld(ctx)
			w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) {
				mhc.Spec.MaxUnhealthy, mhc.Spec.UnhealthyRange = maxUnhealthy, unhealthyRange
			})
			for i, name := range machineNames("m", total) {
				if i < unhealthy {
					w.createMachine(ctx, name, withNodeRef(w.nodeName("gone-"+name)))
					continue
				}
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.nodeName(name)}} // no conditions: healthy
				Expect(k8s.Create(ctx, node)).To(Succeed())
				DeferCleanup(func(ctx context.Context) { Expect(k8s.Delete(ctx, node)).To(Succeed()) })
				w.createMachine(ctx, name, withNodeRef(node.Name))
			}

			w.reconcile(ctx, "workers")

			var reported, marked int
			for _, name := range machineNames("m", total) {
				m := w.machine(ctx, name)
				if c := condition(m, clusterv1.MachineHealthCheckSucceededCondition); c != nil && c.Status == metav1.ConditionFalse {
					reported++
				}
				if c := condition(m, clusterv1.MachineOwnerRemediatedCondition); c != nil && c.Status == metav1.ConditionFalse {
					marked++
				}
			}
			Expect(reported).To(Equal(unhealthy), "unhealthy Machines are reported either way")
			st := w.check(ctx, "workers").Status
			Expect(st.ExpectedMachines).To(HaveValue(BeEquivalentTo(total)))
			Expect(st.CurrentHealthy).To(HaveValue(BeEquivalentTo(total - unhealthy)))
			Expect(st.RemediationsAllowed).To(HaveValue(BeEquivalentTo(wantRemaining)))
			restricted := And(HaveField("Kind", "MachineHealthCheck"), HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", EventRemediationRestricted))
			if wantAllowed {
				Expect(marked).To(Equal(unhealthy))
				Expect(meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRemediationAllowed)).To(
					And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonWithinBudget)))
				Expect(w.rec.all()).NotTo(ContainElement(restricted))
			} else {
				Expect(marked).To(BeZero())
				Expect(meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRemediationAllowed)).To(
					And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonTooManyUnhealthy)))
				// Fewer than unhealthyRange's minimum: nothing is remediated, but it is no storm.
				belowRange := unhealthyRange != "" && unhealthy < 3
				Expect(meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionStormActive)).To(Equal(!belowRange))
				if belowRange {
					Expect(w.rec.all()).NotTo(ContainElement(restricted))
				} else {
					Expect(w.rec.all()).To(ContainElement(restricted))
				}
			}
		},
		Entry("maxUnhealthy 2: 2 of 10 unhealthy are remediated", ptr.To(intstr.FromInt32(2)), "", 10, 2, true, 0),
		Entry("maxUnhealthy 2: 3 of 10 unhealthy are not", ptr.To(intstr.FromInt32(2)), "", 10, 3, false, 0),
		Entry("maxUnhealthy 40% of 25: 10 unhealthy are remediated", ptr.To(intstr.FromString("40%")), "", 25, 10, true, 0),
		Entry("maxUnhealthy 40% of 25: 11 unhealthy are not", ptr.To(intstr.FromString("40%")), "", 25, 11, false, 0),
		Entry("maxUnhealthy 40% of 6 (rounded down to 2): 2 unhealthy are remediated", ptr.To(intstr.FromString("40%")), "", 6, 2, true, 0),
		Entry("maxUnhealthy 40% of 6 (rounded down to 2): 3 unhealthy are not", ptr.To(intstr.FromString("40%")), "", 6, 3, false, 0),
		Entry("unhealthyRange [3-5] of 10: 2 unhealthy are not remediated", nil, "[3-5]", 10, 2, false, 0),
		Entry("unhealthyRange [3-5] of 10: 3 unhealthy are remediated", nil, "[3-5]", 10, 3, true, 2),
		Entry("unhealthyRange [3-5] of 10: 5 unhealthy are remediated", nil, "[3-5]", 10, 5, true, 0),
		Entry("unhealthyRange [3-5] of 10: 6 unhealthy are not remediated", nil, "[3-5]", 10, 6, false, 0),
		Entry("unhealthyRange takes precedence over maxUnhealthy", ptr.To(intstr.FromInt32(1)), "[3-5]", 10, 4, true, 1),
		Entry("the default maxUnhealthy is 100%", nil, "", 3, 3, true, 0),
	)
})

var _ = Describe("Template-based remediation", func() {
	It("creates exactly one request with the contract's shape and deletes it when the Machine is healthy again", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		mhc := w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot")) })
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 10*time.Minute)
		m := w.createMachine(ctx, "m", withNodeRef(node.Name))

		w.reconcile(ctx, "workers")
		w.reconcile(ctx, "workers")

		emrs := w.powerCycleRemediations(ctx)
		Expect(emrs).To(HaveLen(1))
		emr := emrs[0]
		Expect(emr.GetName()).To(Equal("m"))
		Expect(emr.GetNamespace()).To(Equal(w.ns))
		Expect(emr.GetOwnerReferences()).To(ConsistOf(
			metav1.OwnerReference{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "m", UID: m.UID},
			metav1.OwnerReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "MachineHealthCheck", Name: "workers", UID: mhc.UID},
		))
		Expect(emr.GetAnnotations()).To(Equal(map[string]string{
			template.AnnotationNodeName:            node.Name,
			template.AnnotationTemplateName:        "reboot",
			template.AnnotationClonedFromName:      "reboot",
			template.AnnotationClonedFromGroupKind: "PowerCycleRemediationTemplate.remediation.metalheal.io",
		}))
		Expect(emr.GetLabels()).To(HaveKeyWithValue(template.LabelClusterName, m.Spec.ClusterName),
			"the request says which cluster its Node is in, as Cluster API's does")
		Expect(emr.Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("strategy", "reboot")))
		got := w.machine(ctx, "m")
		Expect(condition(got, clusterv1.MachineOwnerRemediatedCondition)).To(BeNil(), "the owner is not asked to replace it")
		Expect(condition(got, clusterv1.MachineHealthCheckSucceededCondition)).To(haveCondition(metav1.ConditionFalse, clusterv1.MachineHealthCheckUnhealthyNodeReason))
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines).To(ConsistOf(HaveField("Remediations", ConsistOf(And(
			HaveField("Kind", "PowerCycleRemediation"), HaveField("TemplateName", "reboot"), HaveField("TimedOut", BeNil()))))))
		Expect(w.rec.all()).To(ContainElement(HaveField("Reason", EventRemediationRequestCreated)))
		Expect(testutil.ToFloat64(remediationsCreated.WithLabelValues("PowerCycleRemediation"))).To(BeNumerically(">=", 1))

		By("the Node becomes Ready: the request is deleted, and the Machine's entry once it is gone")
		w.setReady(ctx, k8s, node, corev1.ConditionTrue, 0)
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		w.reconcile(ctx, "workers") // the deletion brings the check back
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines).To(BeEmpty())
		Expect(testutil.ToFloat64(unhealthyMachines.WithLabelValues(w.ns + "/workers"))).To(BeZero())
		Expect(condition(w.machine(ctx, "m"), clusterv1.MachineHealthCheckSucceededCondition)).To(haveCondition(metav1.ConditionTrue, clusterv1.MachineHealthCheckSucceededReason))
		Expect(w.rec.all()).To(ContainElement(HaveField("Reason", EventRemediationRequestDeleted)))
	})

	It("labels a control-plane Machine's request as medik8s' NodeHealthCheck labels a control-plane node's, and a worker's not", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot")) })
		cpNode := w.createNode(ctx, k8s, w.nodeName("cp"), corev1.ConditionUnknown, 10*time.Minute)
		workerNode := w.createNode(ctx, k8s, w.nodeName("w"), corev1.ConditionUnknown, 10*time.Minute)
		w.createMachine(ctx, "cp", withNodeRef(cpNode.Name), withLabels(clusterv1.MachineControlPlaneLabel, ""))
		w.createMachine(ctx, "w", withNodeRef(workerNode.Name))
		w.reconcile(ctx, "workers")

		labels := map[string]map[string]string{}
		for _, r := range w.powerCycleRemediations(ctx) {
			labels[r.GetName()] = r.GetLabels()
		}
		Expect(labels).To(HaveKeyWithValue("cp", HaveKeyWithValue(template.LabelControlPlane, "")))
		Expect(labels).To(HaveKeyWithValue("w", Not(HaveKey(template.LabelControlPlane))))
	})

	It("deletes the request of a Machine that is gone: its owner reference to the check keeps it from the garbage collector", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "escalate", "escalate")
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.RemediationTemplate = ptr.To(templateRef("escalate")) })
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 10*time.Minute)
		m := w.createMachine(ctx, "m", withNodeRef(node.Name))
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))

		By("the Machine is deleted (by the remediator's escalation, its MachineSet, anyone)")
		Expect(k8s.Delete(ctx, m)).To(Succeed())
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines).To(BeEmpty())
		Expect(w.rec.all()).To(ContainElement(And(HaveField("Reason", EventRemediationRequestDeleted), HaveField("Note", ContainSubstring("its Machine is gone")))))
	})

	It("escalates to the next template when a step times out, across requests of the same kind, once the first hands the host over", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createTemplate(ctx, "fence", "power-off")
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
				{RemediationTemplate: templateRef("fence"), Order: 2, Timeout: metav1.Duration{Duration: 30 * time.Minute}},
				{RemediationTemplate: templateRef("reboot"), Order: 1, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
			}
		})
		w.createMachine(ctx, "m", withNodeRef(w.nodeName("gone")))

		res := w.reconcile(ctx, "workers")
		Expect(res.RequeueAfter).To(Equal(10*time.Minute), "requeued at the step's timeout")
		Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("spec", HaveKeyWithValue("strategy", "reboot")))))

		first := &w.powerCycleRemediations(ctx)[0]
		Expect(first.GetName()).To(Equal("m"), "the first step has the contract name")
		w.setRequestCondition(ctx, first, "Processing", "True", "Test")

		w.clock.Step(10 * time.Minute)
		res = w.reconcile(ctx, "workers")
		emrs := w.powerCycleRemediations(ctx)
		Expect(emrs).To(HaveLen(1), "no second request while the first still acts on the host")
		Expect(emrs[0].GetAnnotations()).To(HaveKey(template.AnnotationTimedOut))
		Expect(emrs[0].GetDeletionTimestamp()).To(BeNil(), "the timed-out request is not deleted")
		entry := w.check(ctx, "workers").Status.UnhealthyMachines[0]
		Expect(entry.Remediations).To(ConsistOf(And(HaveField("TemplateName", "reboot"), HaveField("TimedOut", Not(BeNil())))))
		Expect(entry.WaitingFor).To(Equal("PowerCycleRemediation " + w.ns + "/m"))
		Expect(w.rec.all()).To(ContainElement(HaveField("Reason", EventRemediationRequestTimedOut)))
		Expect(w.rec.all()).To(ContainElement(HaveField("Reason", EventWaitingForHandOver)))
		Expect(res.RequeueAfter).To(Equal(template.HandOverBound), "requeued at the bound of the wait")

		w.setRequestCondition(ctx, first, "Processing", "False", "Test")
		w.reconcile(ctx, "workers") // the request's change brings the check back
		emrs = w.powerCycleRemediations(ctx)
		Expect(emrs).To(HaveLen(2))
		byName := map[string]unstructured.Unstructured{}
		for _, e := range emrs {
			byName[e.GetName()] = e
			Expect(e.GetDeletionTimestamp()).To(BeNil())
		}
		Expect(byName).To(HaveKey("m"))
		second, ok := byName[template.LaterStepName("m", "fence")]
		Expect(ok).To(BeTrue(), "the later step of the same kind has a name of its own")
		Expect(second.GetAnnotations()).To(HaveKeyWithValue(template.AnnotationTemplateName, "fence"))
		Expect(second.Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("strategy", "power-off")))
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines[0].WaitingFor).To(BeEmpty())

		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(2), "both requests stay until the Machine is healthy")
	})

	It("still sees, marks and waits for a running request whose kind the spec no longer names, before the new kind's step starts", func(ctx SpecContext) {
		w := rebootingOne(ctx)
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))
		first := &w.powerCycleRemediations(ctx)[0]
		w.setRequestCondition(ctx, first, "Processing", "True", "Test")

		By("an admin moves the check to another remediator's template kind while the power cycle runs")
		const group = "kindchange.example.com"
		for _, kind := range []string{"FenceRemediationTemplate", "FenceRemediation"} {
			crd, err := testenv.CRD(ctx, k8s, group, kind)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, crd))).To(Succeed()) })
		}
		fence := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1", "kind": "FenceRemediationTemplate",
			"metadata": map[string]any{"name": "fence", "namespace": w.ns}, "spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}}}
		Expect(k8s.Create(ctx, fence)).To(Succeed())
		check := w.check(ctx, "workers")
		check.Spec.RemediationTemplate = &v1alpha1.TemplateReference{APIVersion: group + "/v1", Kind: "FenceRemediationTemplate", Name: "fence"}
		Expect(k8s.Update(ctx, check)).To(Succeed())
		fences := func() []unstructured.Unstructured {
			list := &unstructured.UnstructuredList{}
			list.SetAPIVersion(group + "/v1")
			list.SetKind("FenceRemediationList")
			Expect(k8s.List(ctx, list, client.InNamespace(w.ns))).To(Succeed())
			return list.Items
		}

		w.reconcile(ctx, "workers")
		Expect(fences()).To(BeEmpty(), "no second hand on the host while the power cycle still acts on it")
		emrs := w.powerCycleRemediations(ctx)
		Expect(emrs).To(HaveLen(1))
		Expect(emrs[0].GetAnnotations()).To(HaveKey(template.AnnotationTimedOut), "its step left the spec: marked timed out")
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines[0].WaitingFor).To(Equal("PowerCycleRemediation " + w.ns + "/m"))

		w.setRequestCondition(ctx, first, "Processing", "False", "Test")
		w.reconcile(ctx, "workers")
		Expect(fences()).To(HaveLen(1), "the new kind's step starts once the host is handed over")
	})

	It("leaves the last step's request unmarked when the remediator gives up, and says no step is left", func(ctx SpecContext) {
		w := rebootingOne(ctx)

		w.setRequestCondition(ctx, &w.powerCycleRemediations(ctx)[0], "Succeeded", "False", "RetriesExhausted")

		w.reconcile(ctx, "workers")
		emrs := w.powerCycleRemediations(ctx)
		Expect(emrs).To(HaveLen(1), "kept until the Machine is healthy")
		Expect(emrs[0].GetAnnotations()).NotTo(HaveKey(template.AnnotationTimedOut),
			"nothing takes the host over: the request stays as its remediator left it")
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines).To(ConsistOf(HaveField("Remediations",
			ConsistOf(HaveField("TimedOut", Not(BeNil()))))), "the step has ended in status")
		Expect(w.rec.all()).To(ContainElement(HaveField("Reason", EventRemediationsExhausted)))
	})

	It("is disabled while a template it names is missing, before any Machine fails, still reports its Machines, and works once it is made", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.RemediationTemplate = ptr.To(templateRef("absent")) })
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionTrue, time.Hour)
		w.createMachine(ctx, "m", withNodeRef(node.Name))

		_, err := w.r.Reconcile(ctx, reconcileRequest(w.ns, "workers"))
		Expect(err).NotTo(HaveOccurred(), "a condition and an event, not an error to retry")
		disabled := meta.FindStatusCondition(w.check(ctx, "workers").Status.Conditions, v1alpha1.ConditionDisabled)
		Expect(disabled).NotTo(BeNil())
		Expect(disabled.Status).To(Equal(metav1.ConditionTrue))
		Expect(disabled.Reason).To(Equal(v1alpha1.ReasonTemplateNotFound))
		Expect(disabled.Message).To(Equal("Remediation template PowerCycleRemediationTemplate " + w.ns + "/absent not found"))
		Expect(w.rec.all()).To(ContainElement(And(HaveField("Reason", EventDisabled), HaveField("Type", corev1.EventTypeWarning),
			HaveField("Note", ContainSubstring("absent not found")))))

		By("a Machine failing meanwhile is reported, not remediated")
		w.createMachine(ctx, "sick", withNodeRef(w.nodeName("gone")))
		w.reconcile(ctx, "workers")
		Expect(condition(w.machine(ctx, "sick"), clusterv1.MachineHealthCheckSucceededCondition)).To(
			HaveField("Status", metav1.ConditionFalse))
		Expect(w.check(ctx, "workers").Status.UnhealthyMachines).To(ConsistOf(And(HaveField("Name", "sick"), HaveField("Remediations", BeEmpty()))))
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		Expect(w.rec.With(EventDisabled)).To(HaveLen(1), "once per cause")

		By("the template made: the check works again and remediates it")
		w.createTemplate(ctx, "absent", "reboot")
		w.reconcile(ctx, "workers")
		Expect(meta.IsStatusConditionFalse(w.check(ctx, "workers").Status.Conditions, v1alpha1.ConditionDisabled)).To(BeTrue())
		Expect(w.rec.all()).To(ContainElement(HaveField("Reason", EventEnabled)))
		Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("metadata",
			HaveKeyWithValue("name", "sick")))))
	})
})

// A spec the API server lets through but the check cannot act on is said in the check's status, with the
// NodeHealthCheck's reasons, not only in an event: the check is disabled until the spec changes.
var _ = Describe("A spec the check cannot act on", func() {
	It("disables the check, saying why, until the spec is fixed", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		elsewhere := templateRef("reboot")
		elsewhere.Namespace = "other"
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.RemediationTemplate = &elsewhere })
		w.createMachine(ctx, "sick", withNodeRef(w.nodeName("gone")))

		_, err := w.r.Reconcile(ctx, reconcileRequest(w.ns, "workers"))
		Expect(err).NotTo(HaveOccurred(), "a condition and an event, not a terminal error")
		disabled := meta.FindStatusCondition(w.check(ctx, "workers").Status.Conditions, v1alpha1.ConditionDisabled)
		Expect(disabled).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonTemplateInvalid),
			HaveField("Message", ContainSubstring(`the template must be in the check's namespace`))))
		Expect(w.rec.With(EventDisabled)).To(HaveLen(1))
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())

		By("the spec fixed: enabled, and the Machine is remediated")
		mhc := w.check(ctx, "workers")
		mhc.Spec.RemediationTemplate.Namespace = ""
		Expect(k8s.Update(ctx, mhc)).To(Succeed())
		w.reconcile(ctx, "workers")
		Expect(meta.IsStatusConditionFalse(w.check(ctx, "workers").Status.Conditions, v1alpha1.ConditionDisabled)).To(BeTrue())
		Expect(w.rec.With(EventEnabled)).To(HaveLen(1))
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))
	})
})

var _ = Describe("Workload clusters", func() {
	It("checks a Machine whose Node is in a remote workload cluster (kubeconfig Secret) and one whose Node is local", func(ctx SpecContext) {
		w := newWorld(ctx)
		Expect(k8s.Create(ctx, newCluster(w.ns, "wl"))).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wl-kubeconfig", Namespace: w.ns},
			Data: map[string][]byte{"value": workloadEnv.KubeConfig}})).To(Succeed())

		// The same Node name exists in both clusters: healthy here, unhealthy in the workload cluster.
		shared := w.nodeName("shared")
		w.createNode(ctx, k8s, shared, corev1.ConditionTrue, time.Hour)
		remoteNode := w.createNode(ctx, workloadK8s, shared, corev1.ConditionUnknown, time.Hour)
		w.createCheck(ctx, "remote", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.ClusterName = "wl"
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "r"}
		})
		w.createMachine(ctx, "remote-m", withCluster("wl"), withLabels("pool", "r"), withNodeRef(shared))

		w.createNode(ctx, k8s, w.nodeName("local"), corev1.ConditionFalse, time.Hour)
		w.createCheck(ctx, "local", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "l"} })
		w.createMachine(ctx, "local-m", withLabels("pool", "l"), withNodeRef(w.nodeName("local")))

		w.reconcile(ctx, "remote")
		w.reconcile(ctx, "local")

		for _, name := range []string{"remote-m", "local-m"} {
			Expect(condition(w.machine(ctx, name), clusterv1.MachineOwnerRemediatedCondition)).To(
				haveCondition(metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason), name)
		}
		key := types.NamespacedName{Namespace: w.ns, Name: "wl"}
		Expect(w.r.remotes.Connected(key)).To(BeTrue())

		By("the workload cluster's Node recovers: read through the cache")
		w.setReady(ctx, workloadK8s, remoteNode, corev1.ConditionTrue, 0)
		Eventually(func(g Gomega) {
			w.reconcile(ctx, "remote")
			g.Expect(condition(w.machine(ctx, "remote-m"), clusterv1.MachineHealthCheckSucceededCondition)).To(
				haveCondition(metav1.ConditionTrue, clusterv1.MachineHealthCheckSucceededReason))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())

		By("the Cluster goes away: its cache is dropped")
		Expect(k8s.Delete(ctx, newCluster(w.ns, "wl"))).To(Succeed())
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, key, &clusterv1.Cluster{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
		w.reconcile(ctx, "remote")
		Expect(w.r.remotes.Connected(key)).To(BeFalse())
	})

	It("looks at a workload cluster that does not answer again every few seconds, and says so once per outage", func(ctx SpecContext) {
		w := newWorld(ctx)
		r, err := New(Options{Client: k8s, Reader: k8s, APIReader: k8s, Recorder: w.rec, Clock: w.clock, Discovery: mgmtDiscovery,
			ResyncPeriod: worldResync, WorkloadClusterSyncTimeout: time.Second})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { r.remotes.StopAll() })
		Expect(k8s.Create(ctx, newCluster(w.ns, "down"))).To(Succeed())
		kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: not-a-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "down-kubeconfig", Namespace: w.ns},
			Data: map[string][]byte{"value": []byte(kubeconfig)}})).To(Succeed())
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.ClusterName = "down" })
		w.createMachine(ctx, "m", withCluster("down"), withNodeRef(w.nodeName("n")))

		for range 2 {
			res, err := r.Reconcile(ctx, reconcileRequest(w.ns, "workers"))
			Expect(err).NotTo(HaveOccurred(), "not an error with the controller's growing backoff")
			Expect(res.RequeueAfter).To(Equal(workloadRetry))
		}
		Expect(countReason(w.rec.all(), EventWorkloadClusterUnreachable)).To(Equal(1), "once per outage")
		Expect(w.machine(ctx, "m").Status.Conditions).To(BeEmpty(), "nothing is decided without the workload cluster's Nodes")
	})

	It("refuses a kubeconfig that points at local files or credential plugins", func(ctx SpecContext) {
		w := newWorld(ctx)
		Expect(k8s.Create(ctx, newCluster(w.ns, "evil"))).To(Succeed())
		kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://example.invalid"}}]
users: [{name: u, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "evil-kubeconfig", Namespace: w.ns},
			Data: map[string][]byte{"value": []byte(kubeconfig)}})).To(Succeed())
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.ClusterName = "evil" })
		w.createMachine(ctx, "m", withCluster("evil"), withNodeRef(w.nodeName("n")))

		_, err := w.r.Reconcile(ctx, reconcileRequest(w.ns, "workers"))
		Expect(err).To(MatchError(workload.ErrUnsafeKubeconfig))
		Expect(err.Error()).NotTo(ContainSubstring("serviceaccount"))
		Expect(w.machine(ctx, "m").Status.Conditions).To(BeEmpty(), "nothing is decided without the workload cluster's Nodes")
		Expect(w.rec.all()).To(ContainElement(HaveField("Reason", EventWorkloadClusterUnreachable)))
	})
})

// rebootingOne is a world whose check "workers" (one reboot step) has made its request for Machine m, whose
// Node is gone.
func rebootingOne(ctx context.Context) *world {
	GinkgoHelper()
	w := newWorld(ctx)
	w.createTemplate(ctx, "reboot", "reboot")
	w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot")) })
	w.createMachine(ctx, "m", withNodeRef(w.nodeName("gone")))
	w.reconcile(ctx, "workers")
	return w
}
