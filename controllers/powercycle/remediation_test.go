package powercycle

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/fake"
	"github.com/metalheal/metalheal/pkg/bmc/ipmi"
	"github.com/metalheal/metalheal/pkg/leases"
	"github.com/metalheal/metalheal/test/ipmisim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The remediator's scenarios (issue 6, "What it must show") against the suite's API server, each in its
// own namespace with its own nodes and fake clock, calling Reconcile directly. remediation_cabundle_test.go,
// remediation_cluster_test.go and remediation_quiet_test.go add to this Describe.
var _ = Describe("Remediation", func() {
	// Transient failure (medik8s NodeHealthCheck style request, Redfish mock with 8s power transitions): the
	// host is power-cycled, the node is Ready again, Succeeded=True; the checker deletes the request and the
	// finalizer leaves no taint and no lease behind.
	It("transient failure recovers", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey]).WithPowerDelay(8 * time.Second)
		})
		node := w.node(ctx, "worker-1", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), credentials)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		fencedFrom := testutil.ToFloat64(PhaseTransitions.WithLabelValues("PoweredOff", "PoweringOn"))
		durations := histogramCount(RemediationDuration, "reboot", "NodeReady")

		var firstOutOfServiceWith redfishmock.PowerState // the host's state when the out-of-service taint appeared
		var atPowerOn []string                           // the host's state and the node's taints at each power-on
		w.registry = checkingPowerOn(bmc.DriverRedfish, redfishFactory, func() {
			state, err := m.PowerState("1")
			Expect(err).NotTo(HaveOccurred())
			atPowerOn = append(append(atPowerOn, string(state)), w.taintKeys(ctx, node)...)
		})
		var leaseHolders []string
		react := func(p *v1alpha1.PowerCycleRemediation) {
			state, err := m.PowerState("1")
			Expect(err).NotTo(HaveOccurred())
			if firstOutOfServiceWith == "" && slices.Contains(w.taintKeys(ctx, node), v1alpha1.TaintOutOfService) {
				firstOutOfServiceWith = state
			}
			if l := w.lease(ctx, node); l != nil && l.Spec.HolderIdentity != nil {
				leaseHolders = append(leaseHolders, *l.Spec.HolderIdentity)
			}
			switch p.Status.Phase {
			case v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweredOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode:
				Expect(w.taintKeys(ctx, node)).To(ContainElement(v1alpha1.TaintRemediation), "marked for the whole flow (%s)", p.Status.Phase)
			}
			if state == redfishmock.PowerOn && p.Status.Phase == v1alpha1.PhaseWaitingForNode {
				w.kubeletOnPowerOn(ctx, node, always)(p)
			}
		}
		steps := w.drive(ctx, key, same(w.reconciler()), react, untilSettled)

		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePoweringOff,
			v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseSucceeded}),
			"a request that is ready to go is accepted and powered off in one reconcile")
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}), "one power-off, one power-on")
		Expect(firstOutOfServiceWith).To(BeElementOf(redfishmock.PowerOff, redfishmock.PoweringOn),
			"fenced only once the BMC confirmed the host off (and powered back on in the same step)")
		Expect(atPowerOn).To(Equal([]string{string(redfishmock.PowerOff), v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService}),
			"one power-on, sent to a host that is off and fenced")
		Expect(leaseHolders).NotTo(BeEmpty())
		Expect(slices.Compact(leaseHolders)).To(Equal([]string{"PowerCycleRemediation-" + node}))

		p := w.get(ctx, key)
		Expect(p.Finalizers).To(ContainElement(v1alpha1.FinalizerPowerCycle))
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonNodeReady, metav1.ConditionTrue))
		Expect(conditionOf(p, v1alpha1.ConditionProcessing).Status).To(Equal(metav1.ConditionFalse))
		Expect(conditionOf(p, v1alpha1.ConditionPermanentNodeDeletionExpected).Status).To(Equal(metav1.ConditionFalse))
		Expect(p.Status.NodeName).To(Equal(node))
		Expect(p.Status.BMCName).To(Equal(node + "-bmc"))
		Expect(p.Status.PowerState).To(Equal(v1alpha1.PowerOn))
		Expect(p.Status.Attempts).To(HaveLen(1))
		a := p.Status.Attempts[0]
		Expect(a.Result).To(Equal("Succeeded"))
		Expect([]*metav1.Time{a.PoweredOff, a.PowerOnRequested, a.PoweredOn, a.Finished}).NotTo(ContainElement(BeNil()))
		Expect(a.PoweredOff.Sub(a.Started.Time)).To(BeNumerically(">=", 8*time.Second), "the mock takes 8s to power off")
		Expect(w.taintKeys(ctx, node)).To(BeEmpty(), "taints are removed once the node is Ready")
		Expect(w.lease(ctx, node)).To(BeNil(), "the lease is released once the node is Ready")
		Expect(w.drainEvents()).To(ContainElements(
			HavePrefix("Normal RemediationStarted"), HavePrefix("Normal PoweringOff"), HavePrefix("Normal PoweredOff"),
			HavePrefix("Normal PoweringOn"), HavePrefix("Normal PoweredOn"), HavePrefix("Normal Remediated")))
		Expect(testutil.ToFloat64(PhaseTransitions.WithLabelValues("PoweredOff", "PoweringOn")) - fencedFrom).To(Equal(1.0))
		Expect(histogramCount(RemediationDuration, "reboot", "NodeReady") - durations).To(Equal(uint64(1)))

		// The node is healthy: the checker deletes its request.
		w.must(w.c.Delete(ctx, p))
		steps = w.drive(ctx, key, same(w.reconciler()), nil, untilSettled)
		Expect(steps[len(steps)-1].gone).To(BeTrue(), "the finalizer let the request go")
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}), "a healthy node is not touched again")
	})

	// Persistent failure, escalate, Cluster API style (request named after the Machine, owned by it, no
	// medik8s annotations): deleteAfterRetries power cycles, then the Machine is deleted.
	It("escalate deletes owning machine", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-2", nil)
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: "md-0-abcde", Namespace: w.ns},
			Spec: clusterv1.MachineSpec{
				ClusterName:       "cluster",
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: new("bootstrap-data")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "Metal3Machine", Name: "md-0-abcde"},
			},
		}
		w.must(w.c.Create(ctx, machine))
		machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
		w.must(w.c.Status().Update(ctx, machine))
		key := w.remediation(ctx, machine.Name, spec(escalate, 2), nil, metav1.OwnerReference{
			APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID})

		steps := w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, never), untilSettled)

		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{
			v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseRetrying,
			v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode,
			v1alpha1.PhaseEscalating, v1alpha1.PhaseSucceeded}))
		p := w.get(ctx, key)
		Expect(p.Status.NodeName).To(Equal(node), "found through the Machine's nodeRef")
		Expect(p.Status.RetryCount).To(Equal(int32(2)))
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On", "Off", "On"}))
		err := w.c.Get(ctx, client.ObjectKeyFromObject(machine), &clusterv1.Machine{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Machine was deleted: %v", err)
		Expect(conditionOf(p, v1alpha1.ConditionPermanentNodeDeletionExpected)).To(MatchFields(v1alpha1.ReasonMachineDeleted, metav1.ConditionTrue))
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonMachineDeleted, metav1.ConditionTrue))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
		Expect(w.drainEvents()).To(ContainElements(HavePrefix("Warning Escalating"), HavePrefix("Warning MachineDeleted")))

		// The Machine's deletion takes the request with it (garbage collection): nothing is powered on.
		w.must(w.c.Delete(ctx, p))
		steps = w.drive(ctx, key, same(w.reconciler()), nil, untilSettled)
		Expect(steps[len(steps)-1].gone).To(BeTrue())
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On", "Off", "On"}))
	})

	// Persistent failure, escalate, bare node (NodeHealthCheck): deleteAfterRetries power cycles, then the
	// host is left powered off and fenced with Succeeded=False; when the health check times the request out
	// (escalating to its next remediation), the host is powered back on and the node cleaned up.
	It("escalate leaves bare node fenced", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-3", nil)
		key := w.nhcRemediation(ctx, node, spec(escalate, 2))
		host := hosts.Driver(fakeAddress(node))

		steps := w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, never), untilTerminal)

		Expect(phases(steps)).To(HaveExactElements(
			v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseRetrying,
			v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode,
			v1alpha1.PhaseEscalating, v1alpha1.PhaseFailed))
		Expect(powerOps(host)).To(Equal([]string{"Off", "On", "Off", "On", "Off"}), "two cycles, then left off")
		Expect(host.PowerState(ctx)).To(Equal(bmc.PowerStateOff))
		p := w.get(ctx, key)
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonRetriesExhausted, metav1.ConditionFalse))
		Expect(conditionOf(p, v1alpha1.ConditionProcessing).Status).To(Equal(metav1.ConditionFalse))
		Expect(conditionOf(p, v1alpha1.ConditionPermanentNodeDeletionExpected).Status).To(Equal(metav1.ConditionFalse))
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService), "fenced")
		Expect(*w.lease(ctx, node).Spec.HolderIdentity).To(Equal("PowerCycleRemediation-" + node))
		steps = w.drive(ctx, key, same(w.reconciler()), nil, func([]step) bool { return true })
		last := steps[0]
		Expect(last.result.RequeueAfter).To(BeNumerically(">", 0), "a fenced node's lease is kept alive")

		// Time passes: the lease is renewed, never lost.
		steps = w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return s[len(s)-1].at.Sub(last.at) > 30*time.Minute })
		until, valid := leases.ValidUntil(w.lease(ctx, node), w.clock.Now())
		Expect(valid).To(BeTrue())
		Expect(until).To(BeTemporally(">", w.clock.Now()))
		Expect(powerOps(host)).To(HaveLen(5), "nothing more is done to the host")

		// NodeHealthCheck escalates: it marks the request timed out. The request hands the host over as it is,
		// off and fenced, for the check's next remediation: nothing is powered on, no taint removed, and the
		// lease is kept (renewed) for the next request to take over.
		p = w.get(ctx, key)
		p.Annotations[v1alpha1.AnnotationTimedOut] = w.clock.Now().Format(time.RFC3339)
		w.must(w.c.Update(ctx, p))
		w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return handedOver(w.get(ctx, key)) })
		Expect(powerOps(host)).To(Equal([]string{"Off", "On", "Off", "On", "Off"}), "left off")
		Expect(host.PowerState(ctx)).To(Equal(bmc.PowerStateOff))
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService), "still fenced")
		Expect(*w.lease(ctx, node).Spec.HolderIdentity).To(Equal("PowerCycleRemediation-" + node))
		p = w.get(ctx, key)
		Expect(p.Finalizers).To(ContainElement(v1alpha1.FinalizerPowerCycle))
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonRetriesExhausted, metav1.ConditionFalse))
		Expect(conditionOf(p, v1alpha1.ConditionProcessing)).To(MatchFields(v1alpha1.ReasonHandedOver, metav1.ConditionFalse))
		Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal HandedOver")))
		steps = w.drive(ctx, key, same(w.reconciler()), nil, func([]step) bool { return true })
		Expect(steps[0].result.RequeueAfter).To(BeNumerically(">", 0), "the lease of the handed-over host is kept alive")
		Expect(powerOps(host)).To(HaveLen(5), "nothing more is done to the host")

		// The check deletes the request (the node was repaired, or given up on): the last remediation of the
		// node restores it: powered back on, untainted, its lease released.
		w.must(w.c.Delete(ctx, w.get(ctx, key)))
		steps = w.drive(ctx, key, same(w.reconciler()), nil, untilSettled)
		Expect(steps[len(steps)-1].gone).To(BeTrue())
		Expect(powerOps(host)).To(Equal([]string{"Off", "On", "Off", "On", "Off", "On"}), "powered back on")
		Expect(host.PowerState(ctx)).To(Equal(bmc.PowerStateOn))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.getNode(ctx, node).Annotations).NotTo(HaveKey(v1alpha1.AnnotationAppliedTaints))
		Expect(w.lease(ctx, node)).To(BeNil())
		Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal CleanedUp")))
	})

	// Reboot strategy: a host that keeps failing is power-cycled again and again, the waits between attempts
	// doubling up to the max, until the fault is fixed and the node comes back (seed story 5).
	It("reboot retries with growing backoff", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-4", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		fixedAt := int32(12) // the admin fixes the fault before the 12th attempt

		var backoffs []time.Duration
		react := func(p *v1alpha1.PowerCycleRemediation) {
			if p.Status.Phase == v1alpha1.PhaseRetrying && len(backoffs) < int(p.Status.RetryCount) {
				backoffs = append(backoffs, p.Status.NextRetryTime.Sub(p.Status.LastTransitionTime.Time))
			}
			w.kubeletOnPowerOn(ctx, node, func(n int32) bool { return n >= fixedAt })(p)
		}
		w.drive(ctx, key, same(w.reconciler()), react, untilSettled)

		Expect(backoffs).To(Equal(append([]time.Duration{30 * time.Second, time.Minute}, slices.Repeat([]time.Duration{2 * time.Minute}, 9)...)))
		p := w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(p.Status.RetryCount).To(Equal(int32(11)))
		var numbers []int32
		var results []string
		for _, a := range p.Status.Attempts {
			numbers, results = append(numbers, a.Number), append(results, a.Result)
		}
		Expect(numbers).To(Equal([]int32{3, 4, 5, 6, 7, 8, 9, 10, 11, 12}), "the last 10 attempts are kept")
		Expect(results).To(Equal(append(slices.Repeat([]string{"Failed"}, 9), "Succeeded")))
		Expect(p.Status.Attempts[0].Message).To(ContainSubstring("node not Ready within 5m0s of power-on"))
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal(slices.Repeat([]string{"Off", "On"}, 12)))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
	})

	// A request deleted mid-flow, the only one of its node: the host is powered back on (unless the strategy
	// is power-off), our taints and our lease go, then the finalizer. A request timed out mid-flow instead
	// lands the power request in flight and hands the host over as it is (taints and lease kept), and is
	// restored so only once deleted.
	type cancelledMidFlowCase struct {
		strategy v1alpha1.Strategy
		at       v1alpha1.PowerCyclePhase
		sent     bool // and the phase's power request was sent
		timedOut bool // the health check marks it timed out first, then deletes it
		// unreadable: the BMC does not answer the first power reading, so PoweringOff is entered and
		// nothing is sent (otherwise the power-off goes out in the step that enters PoweringOff).
		unreadable bool
		// noSecret: the BMC's Secret is missing, so the request waits in Pending, where nothing is done
		// (otherwise a request that is ready goes from acceptance to the power-off in one step).
		noSecret bool
		// pause: the first write entering this phase conflicts (pauseBefore), so that the request is
		// seen in the phase before it, which the reconcile would otherwise leave at once.
		pause     v1alpha1.PowerCyclePhase
		wantOps   []string
		wantState bmc.PowerState
	}
	DescribeTable("cancelled mid-flow", func(ctx SpecContext, tc cancelledMidFlowCase) {
		w, hosts := fakeHosts(ctx)
		node := w.node(ctx, "worker", nil)
		if tc.noSecret {
			w.bmc(ctx, node, fakeAddress(node), nil)
		} else {
			w.bmc(ctx, node, fakeAddress(node), credentials)
		}
		key := w.nhcRemediation(ctx, node, spec(tc.strategy, 3))
		host := hosts.Driver(fakeAddress(node))
		host.SetTransitionDelay(1)
		if tc.pause != "" {
			w.pauseBefore(tc.pause)
		}
		if tc.unreadable {
			host.FailNext(bmc.OperationPowerState, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable, Err: errors.New("no answer")})
		}

		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, never), func(s []step) bool {
			return s[len(s)-1].phase == tc.at && (!tc.sent || w.get(ctx, key).Status.PowerRequest != nil)
		})
		if tc.sent {
			Expect(host.PowerState(ctx)).To(Equal(bmc.PowerStateOn), "the BMC does not show the power-off yet")
		}
		if tc.at == v1alpha1.PhasePoweringOn {
			Expect(host.PowerState(ctx)).To(Equal(bmc.PowerStateOff))
			Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))
		}
		if tc.at != v1alpha1.PhasePending {
			Expect(w.lease(ctx, node)).NotTo(BeNil())
		}

		p := w.get(ctx, key)
		if tc.timedOut {
			p.Annotations[v1alpha1.AnnotationTimedOut] = w.clock.Now().Format(time.RFC3339)
			w.must(w.c.Update(ctx, p))
			w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return handedOver(w.get(ctx, key)) })
			Expect(powerOps(host)).To(Equal(tc.wantOps), "the power-on in flight landed, nothing more")
			Expect(host.PowerState(ctx)).To(Equal(tc.wantState))
			Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService), "handed over as it is")
			Expect(w.lease(ctx, node)).NotTo(BeNil())
			p := w.get(ctx, key)
			Expect(p.Finalizers).To(ContainElement(v1alpha1.FinalizerPowerCycle))
			Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
			Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonTimedOut, metav1.ConditionFalse))
			Expect(conditionOf(p, v1alpha1.ConditionProcessing)).To(MatchFields(v1alpha1.ReasonHandedOver, metav1.ConditionFalse))
			Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal HandedOver")))
		}
		w.must(w.c.Delete(ctx, w.get(ctx, key)))
		w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return s[len(s)-1].gone })

		if len(tc.wantOps) == 0 {
			Expect(powerOps(host)).To(BeEmpty())
		} else {
			Expect(powerOps(host)).To(Equal(tc.wantOps))
		}
		Expect(host.PowerState(ctx)).To(Equal(tc.wantState))
		Expect(host.PowerState(ctx)).To(Equal(tc.wantState), "and stays so")
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
		err := w.c.Get(ctx, key, &v1alpha1.PowerCycleRemediation{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue())
		Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal CleanedUp")))
	},
		Entry("deleted while off and fenced", cancelledMidFlowCase{strategy: reboot, at: v1alpha1.PhasePoweringOn, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn}),
		Entry("deleted just after power-off was confirmed", cancelledMidFlowCase{strategy: reboot, at: v1alpha1.PhasePoweredOff, pause: v1alpha1.PhasePoweringOn, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn}),
		Entry("deleted while the power-off is on its way", cancelledMidFlowCase{strategy: reboot, at: v1alpha1.PhasePoweringOff, sent: true, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn}),
		Entry("deleted before the power-off was sent", cancelledMidFlowCase{strategy: reboot, at: v1alpha1.PhasePoweringOff, unreadable: true, wantOps: nil, wantState: bmc.PowerStateOn}),
		Entry("timed out while powering on, then deleted", cancelledMidFlowCase{strategy: reboot, at: v1alpha1.PhasePoweringOn, timedOut: true, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn}),
		Entry("deleted while waiting for the node", cancelledMidFlowCase{strategy: reboot, at: v1alpha1.PhaseWaitingForNode, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn}),
		Entry("deleted while waiting between attempts", cancelledMidFlowCase{strategy: reboot, at: v1alpha1.PhaseRetrying, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn}),
		Entry("power-off strategy: deleted once fenced, left off", cancelledMidFlowCase{strategy: powerOff, at: v1alpha1.PhaseSucceeded, wantOps: []string{"Off"}, wantState: bmc.PowerStateOff}),
		Entry("deleted before anything was done", cancelledMidFlowCase{strategy: reboot, at: v1alpha1.PhasePending, noSecret: true, wantOps: nil, wantState: bmc.PowerStateOn}),
	)

	// A request deleted while its power-off is accepted by the BMC but not carried out yet (Redfish mock with
	// StuckPower: the ForceOff is queued, the host still reads On, and the Redfish driver sends no power-on
	// to a host that reads On). Clean-up must not take that On for the end of the story: it waits until the
	// BMC reads Off, powers the host on, and lets the request go only once the BMC reads On again. A
	// power-off that is never carried out ends the wait powerOffTimeoutSeconds after it was requested, the
	// host on and no power-on asked for.
	type cancelledWhilePowerOffQueuedCase struct {
		actsAfter  time.Duration // when the BMC carries out the queued power-off, after it accepted it; 0: never
		restart    bool          // a fresh reconciler (a restarted manager) for every reconcile
		wantResets []string
		wantPower  []string // the host's power changes, "from>to"

	}
	DescribeTable("cancelled while the power-off is queued", func(ctx SpecContext, tc cancelledWhilePowerOffQueuedCase) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey]).WithPowerDelay(8 * time.Second)
		})
		var mu sync.Mutex // hooks run on the mock's handlers and on the clock's timers
		var changes []string
		m.OnPowerChange(func(_ string, from, to redfishmock.PowerState) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, string(from)+">"+string(to))
		})
		power := func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(changes)
		}
		Expect(m.SetFaults("1", redfishmock.Faults{StuckPower: true})).To(Succeed())
		node := w.node(ctx, "worker", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), credentials)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool {
			return s[len(s)-1].phase == v1alpha1.PhasePoweringOff && w.get(ctx, key).Status.PowerRequest != nil
		})
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}), "the BMC accepted the power-off")
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn), "and has not carried it out yet")
		p := w.get(ctx, key)
		requested := p.Status.PowerRequest.Time.Time

		// The BMC carries the queued power-off out actsAfter it accepted it, whatever it was asked since.
		acted := false
		bmcActs := func() {
			if tc.actsAfter == 0 || acted || w.clock.Now().Before(requested.Add(tc.actsAfter)) {
				return
			}
			acted = true
			m.ClearFaults()
			Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
		}
		next := same(w.reconciler())
		if tc.restart {
			next = w.reconciler
		}
		w.must(w.c.Delete(ctx, p))
		steps := w.drive(ctx, key, next, func(*v1alpha1.PowerCycleRemediation) { bmcActs() }, untilSettled)

		last := steps[len(steps)-1]
		Expect(last.gone).To(BeTrue(), "the finalizer let the request go")
		Expect(power()).To(Equal(tc.wantPower), "the power history when the request went away")
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn))
		if tc.actsAfter == 0 {
			Expect(last.at.Sub(requested)).To(Equal(time.Minute), "clean-up waited powerOffTimeoutSeconds for the power-off")
		}

		// Later on, whatever the BMC still had queued is done: the host stays on.
		w.clock.Step(2 * time.Minute)
		bmcActs()
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn), "and stays on")
		Expect(power()).To(Equal(tc.wantPower))
		Expect(m.Resets("1")).To(Equal(tc.wantResets))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
		events := w.drainEvents()
		Expect(events).NotTo(ContainElement(HavePrefix("Warning PowerOnAbandoned")))
		cleanedUp := And(HavePrefix("Normal CleanedUp"), ContainSubstring("was not carried out within 1m0s; the host stayed on"))
		if tc.actsAfter == 0 {
			Expect(events).To(ContainElement(cleanedUp))
		} else {
			Expect(events).To(ContainElement(HavePrefix("Normal CleanedUp")))
			Expect(events).NotTo(ContainElement(cleanedUp))
		}
	},
		Entry("carried out two polls later", cancelledWhilePowerOffQueuedCase{actsAfter: 12 * time.Second,
			wantResets: []string{"ForceOff", "On"}, wantPower: []string{"On>Off", "Off>PoweringOn", "PoweringOn>On"},
		}),
		Entry("carried out two polls later, restarted before every reconcile", cancelledWhilePowerOffQueuedCase{actsAfter: 12 * time.Second, restart: true,
			wantResets: []string{"ForceOff", "On"}, wantPower: []string{"On>Off", "Off>PoweringOn", "PoweringOn>On"},
		}),
		Entry("never carried out", cancelledWhilePowerOffQueuedCase{wantResets: []string{"ForceOff"}, wantPower: nil}),
	)

	// A BMC that accepts the power-off but never turns the host off (Redfish mock, StuckPower): the attempt
	// fails powerOffTimeoutSeconds later, and the out-of-service taint is never applied to that host.
	It("power-off never confirmed", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey])
		})
		Expect(m.SetFaults("1", redfishmock.Faults{StuckPower: true})).To(Succeed())
		node := w.node(ctx, "worker-5", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), credentials)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		neverOutOfService := func(*v1alpha1.PowerCycleRemediation) {
			Expect(w.taintKeys(ctx, node)).NotTo(ContainElement(v1alpha1.TaintOutOfService), "no host that is on is fenced")
		}
		steps := w.drive(ctx, key, same(w.reconciler()), neverOutOfService, untilPhase(v1alpha1.PhaseRetrying))

		p := w.get(ctx, key)
		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePoweringOff, v1alpha1.PhaseRetrying}))
		Expect(p.Status.Attempts).To(HaveLen(1))
		a := p.Status.Attempts[0]
		Expect(a.Result).To(Equal("Failed"))
		Expect(a.Message).To(ContainSubstring("power-off not confirmed within 1m0s"))
		Expect(a.PoweredOff).To(BeNil())
		Expect(a.Finished.Sub(a.Started.Time)).To(Equal(time.Minute))
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}), "the power-off was asked once, and polled")
		Expect(w.taintKeys(ctx, node)).To(Equal([]string{v1alpha1.TaintRemediation}), "only the NoSchedule marker")
		Expect(w.drainEvents()).To(ContainElement(HavePrefix("Warning AttemptFailed")))

		// The BMC is repaired: the next attempt fences and recovers the node.
		m.ClearFaults()
		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "ForceOff", "On"}))
	})

	// An unreachable BMC: BMCReady=False and a warning, retries whose waits grow (no hot loop), attempts
	// that fail at their deadline and are retried with backoff; once the BMC answers, the node recovers.
	It("BMC unreachable", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-6", nil)
		host := hosts.Driver(fakeAddress(node))
		host.FailAlways(bmc.OperationPowerState, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable,
			Err: fmt.Errorf("dial tcp 10.0.0.6:443: connect: no route to host")})
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		start := w.clock.Now()
		steps := w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return s[len(s)-1].at.Sub(start) >= 30*time.Minute })

		for i, s := range steps {
			if i == 0 || s.phase != steps[i-1].phase {
				continue // a transition: its own status update brings the next reconcile
			}
			Expect(s.result.RequeueAfter).To(BeNumerically(">=", 5*time.Second), "reconcile %d (%s) requeued too soon", i, s.phase)
		}
		reads := host.CallCount(bmc.OperationPowerState)
		Expect(reads).To(BeNumerically("<=", 60), "30 minutes of an unreachable BMC cost %d reads", reads)
		Expect(host.CallCount(bmc.OperationPowerOff)).To(BeZero(), "nothing is asked of a BMC that cannot be read")
		p := w.get(ctx, key)
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady)).To(MatchFields(v1alpha1.ReasonBMCUnreachable, metav1.ConditionFalse))
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady).Message).To(ContainSubstring("no route to host"))
		Expect(p.Status.RetryCount).To(BeNumerically(">=", 5), "each attempt gives up at its deadline")
		Expect(p.Status.Attempts[0].Message).To(ContainSubstring("Unreachable"))
		Expect(w.taintKeys(ctx, node)).NotTo(ContainElement(v1alpha1.TaintOutOfService))
		warnings := 0
		for _, e := range w.drainEvents() {
			if strings.HasPrefix(e, "Warning BMCNotReady") {
				warnings++
			}
		}
		Expect(warnings).To(Equal(1), "one warning for the outage, not one per retry")

		// The network is fixed.
		host.FailAlways(bmc.OperationPowerState, nil)
		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		p = w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady).Status).To(Equal(metav1.ConditionTrue))
		Expect(powerOps(host)).To(Equal([]string{"Off", "On"}))
	})

	// A BMC that comes back with less than a poll interval left before the attempt's deadline: the power-off
	// is not sent then, since the attempt could not wait to see it done and the next attempt would send it
	// again to a host already going down. The attempt fails at its deadline; the next one asks once.
	It("no power request too late to wait for", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-late", nil)
		host := hosts.Driver(fakeAddress(node))
		host.SetTransitionDelay(3) // a host that takes a few reads to go off, as a real one takes seconds
		host.FailAlways(bmc.OperationPowerState, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable,
			Err: fmt.Errorf("dial tcp 10.0.0.9:443: connect: no route to host")})
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		w.drive(ctx, key, same(w.reconciler()), nil, untilPhase(v1alpha1.PhasePoweringOff))

		// The BMC answers again two seconds before the attempt's power-off deadline (the poll interval is 5s).
		deadline := w.get(ctx, key).Status.LastTransitionTime.Add(time.Minute)
		w.clock.SetTime(deadline.Add(-2 * time.Second))
		host.FailAlways(bmc.OperationPowerState, nil)
		res, err := w.reconciler().Reconcile(ctx, ctrl.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(host.CallCount(bmc.OperationPowerOff)).To(BeZero(), "no power-off the attempt cannot wait for")
		Expect(res.RequeueAfter).To(Equal(2*time.Second), "looks again at the deadline")

		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		p := w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(p.Status.Attempts).To(HaveLen(2))
		Expect(p.Status.Attempts[0].Message).To(ContainSubstring("power-off not confirmed within 1m0s"))
		Expect(powerOps(host)).To(Equal([]string{"Off", "On"}), "one power-off, sent by the attempt that waited for it")
	})

	// Wrong credentials (Redfish mock): BMCReady=False AuthenticationFailed, bounded retries, and the
	// password never shows; once the Secret is fixed the remediation proceeds.
	It("BMC wrong credentials", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey])
		})
		node := w.node(ctx, "worker-7", nil)
		wrong := map[string]string{bmc.UsernameKey: "admin", bmc.PasswordKey: "An-Old-Pa55word"}
		b := w.bmc(ctx, node, mockAddress(m, "1"), wrong)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		start := w.clock.Now()
		w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return s[len(s)-1].at.Sub(start) >= 20*time.Minute })

		p := w.get(ctx, key)
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady)).To(MatchFields(v1alpha1.ReasonAuthenticationFailed, metav1.ConditionFalse))
		Expect(m.Resets("1")).To(BeEmpty())
		Expect(len(m.Requests())).To(BeNumerically("<=", 120), "20 minutes of refused credentials cost %d requests", len(m.Requests()))
		events := w.drainEvents()
		Expect(events).To(ContainElement(HavePrefix("Warning BMCNotReady")))
		for _, text := range append(events, fmt.Sprint(p.Status)) {
			Expect(text).NotTo(ContainSubstring(wrong[bmc.PasswordKey]), "no password in events or status")
		}

		w.secret(ctx, b.Spec.CredentialsSecretRef.Name, credentials)
		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}))
	})

	// A BMC whose Secret is missing: the remediation waits in Pending (BMCReady=False SecretNotFound) without
	// taking the lease or tainting the node, and proceeds once the Secret exists.
	It("BMC secret missing", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.node(ctx, "worker-8", nil)
		b := w.bmc(ctx, node, fakeAddress(node), nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		steps := w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return len(s) == 7 })

		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePending}))
		var waits []time.Duration
		for _, s := range steps {
			waits = append(waits, s.result.RequeueAfter)
		}
		Expect(waits).To(Equal([]time.Duration{5 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second,
			40 * time.Second, 80 * time.Second, 2 * time.Minute}), "waits double up to the backoff max")
		p := w.get(ctx, key)
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady)).To(MatchFields(v1alpha1.ReasonSecretNotFound, metav1.ConditionFalse))
		Expect(w.lease(ctx, node)).To(BeNil(), "no lease while the BMC cannot be used")
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(hosts.Driver(fakeAddress(node)).Calls()).To(BeEmpty())

		w.secret(ctx, b.Spec.CredentialsSecretRef.Name, credentials)
		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	})

	// A node held by node-maintenance: the remediation waits, says who holds it, touches nothing; once the
	// lease is released it proceeds.
	It("lease held by node maintenance", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-9", nil)
		held := takeLease(ctx, w, node, "node-maintenance", time.Hour)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		steps := w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return len(s) == 4 })

		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePending}))
		Expect(steps[len(steps)-1].result.RequeueAfter).To(Equal(2*time.Minute), "looks again at the backoff max, the lease being longer")
		p := w.get(ctx, key)
		c := conditionOf(p, v1alpha1.ConditionLeaseAcquired)
		Expect(c).To(MatchFields(v1alpha1.ReasonLeaseHeldByOther, metav1.ConditionFalse))
		Expect(c.Message).To(ContainSubstring("node-maintenance"))
		Expect(w.drainEvents()).To(ContainElement(And(HavePrefix("Warning NodeLeaseHeld"), ContainSubstring("node-maintenance"))))
		Expect(*w.lease(ctx, node).Spec.HolderIdentity).To(Equal("node-maintenance"))
		Expect(hosts.Driver(fakeAddress(node)).Calls()).To(BeEmpty())
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())

		// Maintenance is over: node-maintenance releases its lease.
		w.must(w.c.Delete(ctx, held))
		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		p = w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
		Expect(w.lease(ctx, node)).To(BeNil())
	})

	// A node lease held by the health check that created the request (a NodeHealthCheck holds it for its
	// remediators): the remediation proceeds and leaves that lease alone.
	It("lease held by owning health check", func(ctx SpecContext) {
		leaseHeldByOwner(ctx, "worker-10", false)
	})

	// The owner's lease is not in the remediator's cache yet (a health check that creates the request first
	// takes the lease a moment later): the lease request that follows finds it held by the owner, which is
	// as good as seeing it.
	It("lease held by owner not yet cached", func(ctx SpecContext) {
		leaseHeldByOwner(ctx, "worker-16", true)
	})

	// A request from a NodeHealthCheck whose lease the check has not taken yet (it creates the request
	// first, then takes the lease) waits for the lease without a write, a lease request or a BMC call; once
	// the check holds the lease, its watch event brings the reconcile that goes on, under the check's lease.
	It("waits for its health check's lease", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-17", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		created := w.get(ctx, key).CreationTimestamp.Time
		w.clock.SetTime(created.Add(300 * time.Millisecond)) // just after the check's create

		c, writes := w.interceptedClient(interceptor.Funcs{})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client, o.LeaseClient = c, c }
		r := w.reconciler()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(Equal(ownerLeaseGrace-300*time.Millisecond), "a backstop: the lease's watch event comes first")
		Expect(writes.all()).To(BeEmpty())
		p := w.get(ctx, key)
		Expect(p.Finalizers).To(BeEmpty())
		Expect(p.Status.Phase).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(BeEmpty())

		// The lease's watch event maps to the waiting request, and to nothing once it has started.
		lease := takeLease(ctx, w, node, owningCheckHolder, time.Hour)
		awaiting := awaitingLease(ctx, w)
		mapped := func() []reconcile.Request { return awaiting(lease) }
		Eventually(mapped).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(ConsistOf(reconcile.Request{NamespacedName: key}))

		w.clock.Step(50 * time.Millisecond)
		var reasons []string
		react := func(p *v1alpha1.PowerCycleRemediation) {
			reasons = append(reasons, conditionOf(p, v1alpha1.ConditionLeaseAcquired).Reason)
			w.kubeletOnPowerOn(ctx, node, always)(p)
		}
		w.drive(ctx, key, same(r), react, untilSettled)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(reasons[0]).To(Equal(reasonLeaseHeldByOwner))
		Expect(reasons).NotTo(ContainElement(v1alpha1.ReasonLeaseAcquired))
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
		Expect(writes.of("Lease")).To(BeZero(), "the check's lease is enough")
		Expect(*w.lease(ctx, node).Spec.HolderIdentity).To(Equal(owningCheckHolder))
		Eventually(mapped).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(BeEmpty())

		// With another request waiting, its node's lease maps to it, and the same lease elsewhere, or a lease
		// named otherwise, to nothing.
		waiting := w.nhcRemediation(ctx, w.fakeHost(ctx, "worker-19", nil), spec(reboot, 3))
		ours := lease.DeepCopy()
		ours.Name = leases.LeaseName(waiting.Name)
		Eventually(func() []reconcile.Request { return awaiting(ours) }).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).
			Should(ConsistOf(reconcile.Request{NamespacedName: waiting}))
		elsewhere := ours.DeepCopy()
		elsewhere.Namespace = w.ns
		Expect(awaiting(elsewhere)).To(BeEmpty())
		unprefixed := ours.DeepCopy()
		unprefixed.Name = waiting.Name
		Expect(awaiting(unprefixed)).To(BeEmpty())
	})

	// The check never takes the lease (it failed to, or is not one that does): the request waits no longer
	// than ownerLeaseGrace after its creation, then takes the lease itself and goes on.
	It("owner's lease that never comes", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-18", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		w.clock.SetTime(w.get(ctx, key).CreationTimestamp.Time)

		var reasons []string
		react := func(p *v1alpha1.PowerCycleRemediation) {
			reasons = append(reasons, conditionOf(p, v1alpha1.ConditionLeaseAcquired).Reason)
			w.kubeletOnPowerOn(ctx, node, always)(p)
		}
		steps := w.drive(ctx, key, same(w.reconciler()), react, untilSettled)
		Expect(steps[0].phase).To(BeEmpty())
		Expect(steps[0].result.RequeueAfter).To(Equal(ownerLeaseGrace))
		Expect(steps[1].at.Sub(steps[0].at)).To(Equal(ownerLeaseGrace))
		Expect(steps[1].phase).NotTo(BeEmpty(), "the grace is over: it goes on")
		p := w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(reasons).To(ContainElement(v1alpha1.ReasonLeaseAcquired))
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
		Expect(w.lease(ctx, node)).To(Or(BeNil(), WithTransform(func(l *coordinationv1.Lease) string { return ptr.Deref(l.Spec.HolderIdentity, "") }, BeEmpty())),
			"its own lease is given back")
	})

	// A restarted controller (a fresh reconciler, a fresh access layer, nothing but the objects) resumes
	// from any phase and completes, and a host is asked to power off exactly once per attempt: never again
	// once it has been cycled. The hosts take two status reads to change power, so the power phases span
	// several reconciles.
	type restartAtEveryPhaseCase struct {
		restartAt   v1alpha1.PowerCyclePhase // restart once, after this phase is entered
		leaseHeld   time.Duration            // node-maintenance holds the node this long: the request waits in Pending
		pause       v1alpha1.PowerCyclePhase // the first write entering it conflicts (pauseBefore): restartAt is seen
		everyStep   bool                     // restart before every reconcile instead
		strategy    v1alpha1.Strategy
		retries     int32
		healthyFrom int32 // the attempt from which the node comes back; 0: never
		wantPhase   v1alpha1.PowerCyclePhase
		wantOps     []string
	}
	DescribeTable("restart at every phase", func(ctx SpecContext, tc restartAtEveryPhaseCase) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker", nil)
		host := hosts.Driver(fakeAddress(node))
		host.SetTransitionDelay(2)
		if tc.leaseHeld > 0 {
			takeLease(ctx, w, node, "node-maintenance", tc.leaseHeld)
		}
		if tc.pause != "" {
			w.pauseBefore(tc.pause)
		}
		key := w.nhcRemediation(ctx, node, spec(tc.strategy, max(tc.retries, 1)))

		current, restarts := w.reconciler(), 0
		next := func() *RemediationReconciler {
			if tc.everyStep {
				restarts++
				return w.reconciler()
			}
			return current
		}
		kubelet := w.kubeletOnPowerOn(ctx, node, func(n int32) bool { return tc.healthyFrom > 0 && n >= tc.healthyFrom })
		react := func(p *v1alpha1.PowerCycleRemediation) {
			if !tc.everyStep && restarts == 0 && p.Status.Phase == tc.restartAt {
				current, restarts = w.reconciler(), 1
			}
			kubelet(p)
		}
		w.drive(ctx, key, next, react, untilTerminal)

		Expect(restarts).To(BeNumerically(">=", 1))
		p := w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(tc.wantPhase))
		Expect(powerOps(host)).To(Equal(tc.wantOps), "one power-off per attempt (and one to stay off), never a second")
		for _, c := range host.Calls() {
			if c.Operation == bmc.OperationPowerOff {
				Expect(c.Force).To(BeTrue())
			}
		}
	},
		Entry("Pending", restartAtEveryPhaseCase{restartAt: v1alpha1.PhasePending, leaseHeld: time.Minute, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}}),
		Entry("PoweringOff", restartAtEveryPhaseCase{restartAt: v1alpha1.PhasePoweringOff, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}}),
		Entry("PoweredOff", restartAtEveryPhaseCase{restartAt: v1alpha1.PhasePoweredOff, pause: v1alpha1.PhasePoweringOn, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}}),
		Entry("PoweringOn", restartAtEveryPhaseCase{restartAt: v1alpha1.PhasePoweringOn, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}}),
		Entry("WaitingForNode", restartAtEveryPhaseCase{restartAt: v1alpha1.PhaseWaitingForNode, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}}),
		Entry("Retrying", restartAtEveryPhaseCase{restartAt: v1alpha1.PhaseRetrying, strategy: reboot, healthyFrom: 2, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On", "Off", "On"}}),
		Entry("Escalating", restartAtEveryPhaseCase{restartAt: v1alpha1.PhaseEscalating, strategy: escalate, retries: 1, wantPhase: v1alpha1.PhaseFailed, wantOps: []string{"Off", "On", "Off"}}),
		Entry("PoweredOff (power-off strategy)", restartAtEveryPhaseCase{restartAt: v1alpha1.PhasePoweredOff, pause: v1alpha1.PhaseSucceeded, strategy: powerOff, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off"}}),
		Entry("before every reconcile", restartAtEveryPhaseCase{everyStep: true, strategy: reboot, healthyFrom: 2, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On", "Off", "On"}}),
		Entry("before every reconcile, escalate", restartAtEveryPhaseCase{everyStep: true, strategy: escalate, retries: 2, wantPhase: v1alpha1.PhaseFailed, wantOps: []string{"Off", "On", "Off", "On", "Off"}}),
	)

	// A power-off is recorded in the request's status before it is sent: were the manager on the node it
	// powers off, its successor would find the record. By then the node carries the remediation taint, which
	// the same write claimed (the acceptance, the taint and the request take one write). The BMC checks it
	// all at the moment it is asked.
	It("power-off is recorded before it is sent", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-11", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		type seen struct{ recorded, claimed, tainted bool }
		var atPowerOff []seen
		w.registry = checkingPowerOff(bmc.DriverRedfish, hosts.New, func() {
			p := &v1alpha1.PowerCycleRemediation{}
			w.must(w.c.Get(ctx, key, p)) // straight from the API server
			atPowerOff = append(atPowerOff, seen{
				recorded: p.Status.PowerRequest != nil && p.Status.PowerRequest.Target == v1alpha1.PowerOff,
				claimed:  slices.Contains(p.Status.AppliedTaints, v1alpha1.TaintRemediation),
				tainted:  slices.Contains(w.taintKeys(ctx, node), v1alpha1.TaintRemediation),
			})
		})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.ManagerNodeName = node }

		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(atPowerOff).To(Equal([]seen{{recorded: true, claimed: true, tainted: true}}))
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(w.drainEvents()).To(ContainElement(HavePrefix("Warning PoweringOffManagerNode")))
	})

	// The node refuses the remediation taint (it changed meanwhile): the power-off request recorded with the
	// taint's claim is not sent, and the record is dropped again, so that a later reconcile taints the node
	// and sends it, once.
	It("taint refused holds the power-off", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-16", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		host := hosts.Driver(fakeAddress(node))
		refusing, _ := w.interceptedClient(interceptor.Funcs{
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if _, ok := obj.(*corev1.Node); ok {
					return apierrors.NewConflict(corev1.Resource("nodes"), obj.GetName(), errors.New("the node changed"))
				}
				return c.Update(ctx, obj, opts...)
			},
		})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client = refusing }
		_, err := w.reconciler().Reconcile(ctx, ctrl.Request{NamespacedName: key})
		Expect(err).To(MatchError(ContainSubstring("tainting node " + node)))
		p := w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhasePoweringOff))
		Expect(p.Status.PowerRequest).To(BeNil(), "a request that was not sent is not on record")
		Expect(p.Status.AppliedTaints).To(ConsistOf(v1alpha1.TaintRemediation))
		Expect(powerOps(host)).To(BeEmpty())

		w.reconcilerOptions = nil
		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(powerOps(host)).To(Equal([]string{"Off", "On"}))
	})

	// A host that already reads Off is sent no power-off: the write entering PoweredOff claims both the
	// remediation taint and the out-of-service taint, and the node gets both at once, before the power-on.
	It("host already off is fenced at once", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-17", nil)
		host := hosts.Driver(fakeAddress(node))
		host.SetPowerState(bmc.PowerStateOff)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		var atPowerOn [][]string
		w.registry = checkingPowerOn(bmc.DriverRedfish, hosts.New, func() { atPowerOn = append(atPowerOn, w.taintKeys(ctx, node)) })

		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(powerOps(host)).To(Equal([]string{"On"}))
		Expect(atPowerOn).To(Equal([][]string{{v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService}}))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
	})

	// Every attempt failed before a power-off could be sent (the BMC could not be read), so the node never
	// got the remediation taint; when the BMC answers again in Escalating, the power-off that escalation
	// sends is the first the host gets, and the node carries the taint by then.
	It("escalation taints before the power-off", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-18", nil)
		host := hosts.Driver(fakeAddress(node))
		host.FailAlways(bmc.OperationPowerState, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable,
			Err: fmt.Errorf("dial tcp 10.0.0.18:443: connect: no route to host")})
		var taintedAtPowerOff []bool
		w.registry = checkingPowerOff(bmc.DriverRedfish, hosts.New, func() {
			taintedAtPowerOff = append(taintedAtPowerOff, slices.Contains(w.taintKeys(ctx, node), v1alpha1.TaintRemediation))
		})
		key := w.nhcRemediation(ctx, node, spec(escalate, 1))
		r := w.reconciler()
		w.drive(ctx, key, same(r), nil, untilPhase(v1alpha1.PhaseEscalating))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())

		host.FailAlways(bmc.OperationPowerState, nil) // the BMC answers again
		w.drive(ctx, key, same(r), nil, untilSettled)

		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(powerOps(host)).To(Equal([]string{"Off"}))
		Expect(taintedAtPowerOff).To(Equal([]bool{true}))
	})

	// A node labelled exclude-from-remediation is never touched: the request fails at once.
	It("excluded node is never touched", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-12", map[string]string{v1alpha1.LabelExcludeFromRemediation: "true"})
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		w.drive(ctx, key, same(w.reconciler()), nil, untilSettled)

		p := w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(reasonNodeExcluded, metav1.ConditionFalse))
		Expect(hosts.Driver(fakeAddress(node)).Calls()).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
	})

	// One remediation through the IPMI driver against OpenIPMI's ipmi_sim: the simulated host (a process)
	// really stops and starts again.
	It("IPMI driver against ipmi_sim", func(ctx SpecContext) {
		sim := ipmisim.Start(GinkgoTB())
		hostWasOffWhenFenced := false
		var node string
		w := newWorld(ctx, nil)
		w.registry = checkingPowerOn(bmc.DriverIPMI, ipmi.New, func() {
			hostWasOffWhenFenced = slices.Contains(w.taintKeys(ctx, node), v1alpha1.TaintOutOfService) && !sim.HostPoweredOn()
		})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.BMCCallTimeout = 20 * time.Second }
		node = w.node(ctx, "worker-ipmi", nil)
		w.bmc(ctx, node, sim.Address, map[string]string{bmc.UsernameKey: sim.Credentials.Username, bmc.PasswordKey: sim.Credentials.Password})
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		// A second client to the simulator, to wait (in real time: ipmi_sim takes its time) for a power
		// change the remediator asked for to show before the next reconcile reads it.
		addr, err := bmc.ParseAddress(sim.Address)
		Expect(err).NotTo(HaveOccurred())
		observer, err := ipmi.New(addr, sim.Credentials, bmc.Options{RequestTimeout: 20 * time.Second})
		Expect(err).NotTo(HaveOccurred())
		react := func(p *v1alpha1.PowerCycleRemediation) {
			if r := p.Status.PowerRequest; r != nil {
				want := bmc.PowerState(r.Target)
				Eventually(sim.HostPoweredOn).WithTimeout(20 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(want == bmc.PowerStateOn))
				Eventually(func() (bmc.PowerState, error) { return observer.PowerState(ctx) }).
					WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(want))
			}
			if p.Status.Phase == v1alpha1.PhaseWaitingForNode && sim.HostPoweredOn() {
				w.kubeletOnPowerOn(ctx, node, always)(p)
			}
		}
		steps := w.drive(ctx, key, same(w.reconciler()), react, untilSettled)

		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePoweringOff,
			v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseSucceeded}))
		Expect(hostWasOffWhenFenced).To(BeTrue(), "the node was fenced, and the simulated host really off, when the power-on was sent")
		Expect(sim.HostPoweredOn()).To(BeTrue())
		p := w.get(ctx, key)
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded).Status).To(Equal(metav1.ConditionTrue))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
	})
})

// Test fixtures.
var (
	credentials = map[string]string{bmc.UsernameKey: "admin", bmc.PasswordKey: "Pa55-w0rd-kept-secret"}
	reboot      = v1alpha1.StrategyReboot
	escalate    = v1alpha1.StrategyEscalate
	powerOff    = v1alpha1.StrategyPowerOff
)

// spec is a remediation spec with short, round timeouts: power-off 60s, power-on 300s, backoff 30s..2m.
func spec(strategy v1alpha1.Strategy, retries int32) v1alpha1.PowerCycleRemediationSpec {
	return v1alpha1.PowerCycleRemediationSpec{
		Strategy:               strategy,
		DeleteAfterRetries:     new(retries),
		PowerOffTimeoutSeconds: 60,
		PowerOnTimeoutSeconds:  300,
		RetryBackoff:           &v1alpha1.RetryBackoff{Initial: metav1.Duration{Duration: 30 * time.Second}, Max: metav1.Duration{Duration: 2 * time.Minute}},
		OutOfServiceTaint:      new(true),
	}
}

// fakeHosts is a world whose Redfish BMCs are fake drivers.
func fakeHosts(ctx context.Context) (*world, *fake.Factory) {
	hosts := fake.NewFactory(bmc.PowerStateOn)
	registry := bmc.NewRegistry()
	Expect(registry.Register(bmc.DriverRedfish, hosts.New)).To(Succeed())
	return newWorld(ctx, registry), hosts
}

// fakeAddress is the BMC address of a node whose host is a fake driver.
func fakeAddress(node string) string { return "redfish://" + node + ".bmc.test/redfish/v1/Systems/1" }

// mockHosts is a world whose Redfish BMCs are served by a mock on the world's fake clock.
func mockHosts(ctx context.Context, build func(*redfishmock.Mock) *redfishmock.Mock) (*world, *redfishmock.Mock) {
	registry := bmc.NewRegistry()
	Expect(registry.Register(bmc.DriverRedfish, redfishFactory)).To(Succeed())
	w := newWorld(ctx, registry)
	m, err := build(redfishmock.New().WithClock(w.clock)).Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(m.Close)
	return w, m
}

// mockAddress is the BMC address of system id of mock m.
func mockAddress(m *redfishmock.Mock, id string) string {
	u, _ := url.Parse(m.URL())
	return "redfish+http://" + u.Host + m.SystemPath(id)
}

// powerOps lists the power requests a fake host received, "Off" or "On", in order.
func powerOps(d *fake.Driver) []string {
	var ops []string
	for _, c := range d.Calls() {
		switch c.Operation {
		case bmc.OperationPowerOff:
			ops = append(ops, "Off")
		case bmc.OperationPowerOn:
			ops = append(ops, "On")
		}
	}
	return ops
}

func histogramCount(h *prometheus.HistogramVec, labels ...string) uint64 {
	m := &dto.Metric{}
	if err := h.WithLabelValues(labels...).(prometheus.Metric).Write(m); err != nil {
		panic(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// MatchFields matches a condition's reason and status.
func MatchFields(reason string, status metav1.ConditionStatus) OmegaMatcher {
	return And(
		WithTransform(func(c metav1.Condition) string { return c.Reason }, Equal(reason)),
		WithTransform(func(c metav1.Condition) metav1.ConditionStatus { return c.Status }, Equal(status)))
}

// owningCheckHolder is the lease holder identity of the NodeHealthCheck that owns nhcRemediation's requests.
const owningCheckHolder = "NodeHealthCheck.remediation.metalheal.io-workers"

// leaseHeldByOwner runs a reboot of a node whose lease its owning health check holds; notYetCached
// makes the remediator's first read of the lease miss it, as a lagging cache would.
func leaseHeldByOwner(ctx context.Context, nodeName string, notYetCached bool) {
	w, hosts := fakeHosts(ctx)
	node := w.fakeHost(ctx, nodeName, nil)
	takeLease(ctx, w, node, owningCheckHolder, time.Hour)
	key := w.nhcRemediation(ctx, node, spec(reboot, 3))
	var missed atomic.Bool
	if notYetCached {
		c, _ := w.interceptedClient(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*coordinationv1.Lease); ok && missed.CompareAndSwap(false, true) {
					return apierrors.NewNotFound(coordinationv1.Resource("leases"), k.Name)
				}
				return c.Get(ctx, k, obj, opts...)
			},
		})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.LeaseClient = c }
	}

	var reasons []string
	react := func(p *v1alpha1.PowerCycleRemediation) {
		reasons = append(reasons, conditionOf(p, v1alpha1.ConditionLeaseAcquired).Reason)
		w.kubeletOnPowerOn(ctx, node, always)(p)
	}
	w.drive(ctx, key, same(w.reconciler()), react, untilSettled)

	Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	Expect(reasons).To(ContainElement(reasonLeaseHeldByOwner))
	Expect(reasons).NotTo(ContainElement(v1alpha1.ReasonLeaseHeldByOther))
	Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
	Expect(*w.lease(ctx, node).Spec.HolderIdentity).To(Equal(owningCheckHolder), "the owner's lease is not ours to release")
	var taken, released []string
	for _, e := range w.drainEvents() {
		switch strings.Fields(e)[1] {
		case EventNodeLeaseTaken:
			taken = append(taken, e)
		case EventNodeLeaseReleased:
			released = append(released, e)
		}
	}
	Expect(taken).To(HaveExactElements(ContainSubstring(" held by "+owningCheckHolder+": ")), "told once, for the timeline")
	Expect(released).To(BeEmpty(), "the owner's lease is the owner's to tell of")
	if notYetCached {
		Expect(missed.Load()).To(BeTrue())
		Expect(reasons[0]).To(Equal(reasonLeaseHeldByOwner))
		Expect(w.drainEvents()).NotTo(ContainElement(ContainSubstring(EventNodeLeaseHeld)))
	}
}

// awaitingLease returns what the remediator's lease watch maps a lease to, the requests read as the
// manager reads them (indexedClient).
func awaitingLease(ctx context.Context, w *world) func(*coordinationv1.Lease) []reconcile.Request {
	GinkgoHelper()
	r, err := NewRemediationReconciler(RemediationReconcilerOptions{Client: w.indexedClient(ctx), Clock: w.clock, Recorder: w.recorder,
		Drivers: bmcaccess.New(w.api.cache, w.ns, w.registry, bmcaccess.Options{}), ManagerNamespace: w.ns})
	w.must(err)
	return func(l *coordinationv1.Lease) []reconcile.Request { return r.claim.remediationsAwaitingLease(ctx, l) }
}

// takeLease creates node's lease for holder, valid for d from the world's time.
func takeLease(ctx context.Context, w *world, node, holder string, d time.Duration) *coordinationv1.Lease {
	GinkgoHelper()
	now := metav1.NewMicroTime(w.clock.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leases.LeaseName(node), Namespace: leases.DefaultNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: new(int32(d.Seconds())),
			AcquireTime: &now, RenewTime: &now},
	}
	w.must(w.c.Create(ctx, l))
	return l
}

// checkingDriver runs a check just before passing a power change on (either check may be nil).
type checkingDriver struct {
	bmc.Driver
	beforePowerOff func()
	beforePowerOn  func()
}

func (d *checkingDriver) PowerOff(ctx context.Context, force bool) error {
	if d.beforePowerOff != nil {
		d.beforePowerOff()
	}
	return d.Driver.PowerOff(ctx, force)
}

func (d *checkingDriver) PowerOn(ctx context.Context) error {
	if d.beforePowerOn != nil {
		d.beforePowerOn()
	}
	return d.Driver.PowerOn(ctx)
}

// checkingPowerOn is a registry whose driver of kind (built by factory) runs check just before every
// power-on.
func checkingPowerOn(kind string, factory bmc.Factory, check func()) *bmc.Registry {
	return checkingRegistry(kind, factory, checkingDriver{beforePowerOn: check})
}

// checkingPowerOff is checkingPowerOn for power-offs.
func checkingPowerOff(kind string, factory bmc.Factory, check func()) *bmc.Registry {
	return checkingRegistry(kind, factory, checkingDriver{beforePowerOff: check})
}

// checkingRegistry is a registry whose driver of kind (built by factory) runs checks' checks.
func checkingRegistry(kind string, factory bmc.Factory, checks checkingDriver) *bmc.Registry {
	GinkgoHelper()
	registry := bmc.NewRegistry()
	Expect(registry.Register(kind, func(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
		d, err := factory(addr, creds, opts)
		c := checks
		c.Driver = d
		return &c, err
	})).To(Succeed())
	return registry
}
