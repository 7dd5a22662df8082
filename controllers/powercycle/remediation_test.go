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
	"testing"
	"time"

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

// TestRemediation runs the remediator's scenarios (issue 6, "What it must show") against one real API
// server, each in its own namespace with its own nodes and fake clock, calling Reconcile directly.
func TestRemediation(t *testing.T) {
	api := sharedAPIServer(t)
	for name, scenario := range map[string]func(*testing.T, *apiServer){
		"TransientFailureRecovers":          testTransientFailure,
		"EscalateDeletesOwningMachine":      testEscalateMachine,
		"EscalateLeavesBareNodeFenced":      testEscalateNodeOnly,
		"RebootRetriesWithGrowingBackoff":   testRebootBackoff,
		"CancelledMidFlow":                  testCancelledMidFlow,
		"CancelledWhilePowerOffIsQueued":    testCancelledWhilePowerOffQueued,
		"PowerOffNeverConfirmed":            testPowerOffNeverConfirmed,
		"BMCUnreachable":                    testBMCUnreachable,
		"NoPowerRequestTooLateToWaitFor":    testNoPowerRequestTooLate,
		"BMCWrongCredentials":               testBMCWrongCredentials,
		"BMCSecretMissing":                  testBMCSecretMissing,
		"BMCCABundleMissing":                testBMCCABundleMissing,
		"LeaseHeldByNodeMaintenance":        testLeaseHeldByNodeMaintenance,
		"LeaseHeldByOwningHealthCheck":      testLeaseHeldByOwner,
		"LeaseHeldByOwnerNotYetCached":      testLeaseHeldByOwnerNotYetCached,
		"WaitsForItsHealthChecksLease":      testWaitsForOwnersLease,
		"OwnersLeaseThatNeverComes":         testOwnersLeaseNeverComes,
		"RestartAtEveryPhase":               testRestartAtEveryPhase,
		"PowerOffIsRecordedBeforeItIsSent":  testPowerOffRecordedFirst,
		"TaintRefusedHoldsThePowerOff":      testTaintRefusedHoldsThePowerOff,
		"HostAlreadyOffIsFencedAtOnce":      testHostAlreadyOff,
		"EscalationTaintsBeforePowerOff":    testEscalationTaintsBeforePowerOff,
		"ExcludedNodeIsNeverTouched":        testExcludedNode,
		"IPMIDriverAgainstIPMISim":          testIPMI,
		"StaleCacheGoesOnFromOurLastWrite":  testStaleCacheGoesOnFromOurLastWrite,
		"GoneUnderItsWriteAnnouncesNothing": testGoneUnderItsWrite,
		"NoPollBeforeTheInterval":           testNoPollBeforeTheInterval,
		"WritesOfOneRemediation":            testWritesOfOneRemediation,
		"RemediatingNodes":                  testRemediatingNodes,
		"NodeOfAnotherClusterIsRefused":     testNodeOfAnotherCluster,
		"NodeInAWorkloadCluster":            testNodeInAWorkloadCluster,
	} {
		t.Run(name, func(t *testing.T) { scenario(t, api) })
	}
}

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
func fakeHosts(t *testing.T, api *apiServer) (*world, *fake.Factory) {
	hosts := fake.NewFactory(bmc.PowerStateOn)
	registry := bmc.NewRegistry()
	if err := registry.Register(bmc.DriverRedfish, hosts.New); err != nil {
		t.Fatal(err)
	}
	return newWorld(t, api, registry), hosts
}

// fakeAddress is the BMC address of a node whose host is a fake driver.
func fakeAddress(node string) string { return "redfish://" + node + ".bmc.test/redfish/v1/Systems/1" }

// mockHosts is a world whose Redfish BMCs are served by a mock on the world's fake clock.
func mockHosts(t *testing.T, api *apiServer, build func(*redfishmock.Mock) *redfishmock.Mock) (*world, *redfishmock.Mock) {
	registry := bmc.NewRegistry()
	if err := registry.Register(bmc.DriverRedfish, redfishFactory); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, api, registry)
	m, err := build(redfishmock.New().WithClock(w.clock)).Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
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

// Transient failure (medik8s NodeHealthCheck style request, Redfish mock with 8s power transitions): the
// host is power-cycled, the node is Ready again, Succeeded=True; the checker deletes the request and the
// finalizer leaves no taint and no lease behind.
func testTransientFailure(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, m := mockHosts(t, api, func(m *redfishmock.Mock) *redfishmock.Mock {
		return m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey]).WithPowerDelay(8 * time.Second)
	})
	node := w.node("worker-1", nil)
	w.bmc(node, mockAddress(m, "1"), credentials)
	key := w.nhcRemediation(node, spec(reboot, 3))
	fencedFrom := testutil.ToFloat64(PhaseTransitions.WithLabelValues("PoweredOff", "PoweringOn"))
	durations := histogramCount(RemediationDuration, "reboot", "NodeReady")

	var firstOutOfServiceWith redfishmock.PowerState // the host's state when the out-of-service taint appeared
	var atPowerOn []string                           // the host's state and the node's taints at each power-on
	w.registry = checkingPowerOn(t, bmc.DriverRedfish, redfishFactory, func() {
		state, err := m.PowerState("1")
		g.Expect(err).NotTo(HaveOccurred())
		atPowerOn = append(append(atPowerOn, string(state)), w.taintKeys(node)...)
	})
	var leaseHolders []string
	react := func(p *v1alpha1.PowerCycleRemediation) {
		state, err := m.PowerState("1")
		g.Expect(err).NotTo(HaveOccurred())
		if firstOutOfServiceWith == "" && slices.Contains(w.taintKeys(node), v1alpha1.TaintOutOfService) {
			firstOutOfServiceWith = state
		}
		if l := w.lease(node); l != nil && l.Spec.HolderIdentity != nil {
			leaseHolders = append(leaseHolders, *l.Spec.HolderIdentity)
		}
		switch p.Status.Phase {
		case v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweredOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode:
			g.Expect(w.taintKeys(node)).To(ContainElement(v1alpha1.TaintRemediation), "marked for the whole flow (%s)", p.Status.Phase)
		}
		if state == redfishmock.PowerOn && p.Status.Phase == v1alpha1.PhaseWaitingForNode {
			w.kubeletOnPowerOn(node, always)(p)
		}
	}
	steps := w.drive(key, same(w.reconciler()), react, untilSettled)

	g.Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePoweringOff,
		v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseSucceeded}),
		"a request that is ready to go is accepted and powered off in one reconcile")
	g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}), "one power-off, one power-on")
	g.Expect(firstOutOfServiceWith).To(BeElementOf(redfishmock.PowerOff, redfishmock.PoweringOn),
		"fenced only once the BMC confirmed the host off (and powered back on in the same step)")
	g.Expect(atPowerOn).To(Equal([]string{string(redfishmock.PowerOff), v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService}),
		"one power-on, sent to a host that is off and fenced")
	g.Expect(leaseHolders).NotTo(BeEmpty())
	g.Expect(slices.Compact(leaseHolders)).To(Equal([]string{"PowerCycleRemediation-" + node}))

	p := w.get(key)
	g.Expect(p.Finalizers).To(ContainElement(v1alpha1.FinalizerPowerCycle))
	g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonNodeReady, metav1.ConditionTrue))
	g.Expect(conditionOf(p, v1alpha1.ConditionProcessing).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(conditionOf(p, v1alpha1.ConditionPermanentNodeDeletionExpected).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(p.Status.NodeName).To(Equal(node))
	g.Expect(p.Status.BMCName).To(Equal(node + "-bmc"))
	g.Expect(p.Status.PowerState).To(Equal(v1alpha1.PowerOn))
	g.Expect(p.Status.Attempts).To(HaveLen(1))
	a := p.Status.Attempts[0]
	g.Expect(a.Result).To(Equal("Succeeded"))
	g.Expect([]*metav1.Time{a.PoweredOff, a.PowerOnRequested, a.PoweredOn, a.Finished}).NotTo(ContainElement(BeNil()))
	g.Expect(a.PoweredOff.Sub(a.Started.Time)).To(BeNumerically(">=", 8*time.Second), "the mock takes 8s to power off")
	g.Expect(w.taintKeys(node)).To(BeEmpty(), "taints are removed once the node is Ready")
	g.Expect(w.lease(node)).To(BeNil(), "the lease is released once the node is Ready")
	g.Expect(w.drainEvents()).To(ContainElements(
		HavePrefix("Normal RemediationStarted"), HavePrefix("Normal PoweringOff"), HavePrefix("Normal PoweredOff"),
		HavePrefix("Normal PoweringOn"), HavePrefix("Normal PoweredOn"), HavePrefix("Normal Remediated")))
	g.Expect(testutil.ToFloat64(PhaseTransitions.WithLabelValues("PoweredOff", "PoweringOn")) - fencedFrom).To(Equal(1.0))
	g.Expect(histogramCount(RemediationDuration, "reboot", "NodeReady") - durations).To(Equal(uint64(1)))

	// The node is healthy: the checker deletes its request.
	w.must(w.c.Delete(w.ctx, p))
	steps = w.drive(key, same(w.reconciler()), nil, untilSettled)
	g.Expect(steps[len(steps)-1].gone).To(BeTrue(), "the finalizer let the request go")
	g.Expect(w.taintKeys(node)).To(BeEmpty())
	g.Expect(w.lease(node)).To(BeNil())
	g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}), "a healthy node is not touched again")
}

// MatchFields matches a condition's reason and status.
func MatchFields(reason string, status metav1.ConditionStatus) OmegaMatcher {
	return And(
		WithTransform(func(c metav1.Condition) string { return c.Reason }, Equal(reason)),
		WithTransform(func(c metav1.Condition) metav1.ConditionStatus { return c.Status }, Equal(status)))
}

// Persistent failure, escalate, Cluster API style (request named after the Machine, owned by it, no
// medik8s annotations): deleteAfterRetries power cycles, then the Machine is deleted.
func testEscalateMachine(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-2", nil)
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "md-0-abcde", Namespace: w.ns},
		Spec: clusterv1.MachineSpec{
			ClusterName:       "cluster",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: new("bootstrap-data")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "Metal3Machine", Name: "md-0-abcde"},
		},
	}
	w.must(w.c.Create(w.ctx, machine))
	machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
	w.must(w.c.Status().Update(w.ctx, machine))
	key := w.remediation(machine.Name, spec(escalate, 2), nil, metav1.OwnerReference{
		APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID})

	steps := w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, never), untilSettled)

	g.Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{
		v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseRetrying,
		v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode,
		v1alpha1.PhaseEscalating, v1alpha1.PhaseSucceeded}))
	p := w.get(key)
	g.Expect(p.Status.NodeName).To(Equal(node), "found through the Machine's nodeRef")
	g.Expect(p.Status.RetryCount).To(Equal(int32(2)))
	g.Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On", "Off", "On"}))
	err := w.c.Get(w.ctx, client.ObjectKeyFromObject(machine), &clusterv1.Machine{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Machine was deleted: %v", err)
	g.Expect(conditionOf(p, v1alpha1.ConditionPermanentNodeDeletionExpected)).To(MatchFields(v1alpha1.ReasonMachineDeleted, metav1.ConditionTrue))
	g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonMachineDeleted, metav1.ConditionTrue))
	g.Expect(w.taintKeys(node)).To(BeEmpty())
	g.Expect(w.lease(node)).To(BeNil())
	g.Expect(w.drainEvents()).To(ContainElements(HavePrefix("Warning Escalating"), HavePrefix("Warning MachineDeleted")))

	// The Machine's deletion takes the request with it (garbage collection): nothing is powered on.
	w.must(w.c.Delete(w.ctx, p))
	steps = w.drive(key, same(w.reconciler()), nil, untilSettled)
	g.Expect(steps[len(steps)-1].gone).To(BeTrue())
	g.Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On", "Off", "On"}))
}

// Persistent failure, escalate, bare node (NodeHealthCheck): deleteAfterRetries power cycles, then the
// host is left powered off and fenced with Succeeded=False; when the health check times the request out
// (escalating to its next remediation), the host is powered back on and the node cleaned up.
func testEscalateNodeOnly(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-3", nil)
	key := w.nhcRemediation(node, spec(escalate, 2))
	host := hosts.Driver(fakeAddress(node))

	steps := w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, never), untilTerminal)

	g.Expect(phases(steps)).To(HaveExactElements(
		v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseRetrying,
		v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode,
		v1alpha1.PhaseEscalating, v1alpha1.PhaseFailed))
	g.Expect(powerOps(host)).To(Equal([]string{"Off", "On", "Off", "On", "Off"}), "two cycles, then left off")
	g.Expect(host.PowerState(w.ctx)).To(Equal(bmc.PowerStateOff))
	p := w.get(key)
	g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonRetriesExhausted, metav1.ConditionFalse))
	g.Expect(conditionOf(p, v1alpha1.ConditionProcessing).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(conditionOf(p, v1alpha1.ConditionPermanentNodeDeletionExpected).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(w.taintKeys(node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService), "fenced")
	g.Expect(*w.lease(node).Spec.HolderIdentity).To(Equal("PowerCycleRemediation-" + node))
	steps = w.drive(key, same(w.reconciler()), nil, func([]step) bool { return true })
	last := steps[0]
	g.Expect(last.result.RequeueAfter).To(BeNumerically(">", 0), "a fenced node's lease is kept alive")

	// Time passes: the lease is renewed, never lost.
	steps = w.drive(key, same(w.reconciler()), nil, func(s []step) bool { return s[len(s)-1].at.Sub(last.at) > 30*time.Minute })
	until, valid := leases.ValidUntil(w.lease(node), w.clock.Now())
	g.Expect(valid).To(BeTrue())
	g.Expect(until).To(BeTemporally(">", w.clock.Now()))
	g.Expect(powerOps(host)).To(HaveLen(5), "nothing more is done to the host")

	// NodeHealthCheck escalates: it marks the request timed out. The request hands the host over as it is,
	// off and fenced, for the check's next remediation: nothing is powered on, no taint removed, and the
	// lease is kept (renewed) for the next request to take over.
	p = w.get(key)
	p.Annotations[v1alpha1.AnnotationTimedOut] = w.clock.Now().Format(time.RFC3339)
	w.must(w.c.Update(w.ctx, p))
	w.drive(key, same(w.reconciler()), nil, func(s []step) bool { return handedOver(w.get(key)) })
	g.Expect(powerOps(host)).To(Equal([]string{"Off", "On", "Off", "On", "Off"}), "left off")
	g.Expect(host.PowerState(w.ctx)).To(Equal(bmc.PowerStateOff))
	g.Expect(w.taintKeys(node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService), "still fenced")
	g.Expect(*w.lease(node).Spec.HolderIdentity).To(Equal("PowerCycleRemediation-" + node))
	p = w.get(key)
	g.Expect(p.Finalizers).To(ContainElement(v1alpha1.FinalizerPowerCycle))
	g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonRetriesExhausted, metav1.ConditionFalse))
	g.Expect(conditionOf(p, v1alpha1.ConditionProcessing)).To(MatchFields(v1alpha1.ReasonHandedOver, metav1.ConditionFalse))
	g.Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal HandedOver")))
	steps = w.drive(key, same(w.reconciler()), nil, func([]step) bool { return true })
	g.Expect(steps[0].result.RequeueAfter).To(BeNumerically(">", 0), "the lease of the handed-over host is kept alive")
	g.Expect(powerOps(host)).To(HaveLen(5), "nothing more is done to the host")

	// The check deletes the request (the node was repaired, or given up on): the last remediation of the
	// node restores it: powered back on, untainted, its lease released.
	w.must(w.c.Delete(w.ctx, w.get(key)))
	steps = w.drive(key, same(w.reconciler()), nil, untilSettled)
	g.Expect(steps[len(steps)-1].gone).To(BeTrue())
	g.Expect(powerOps(host)).To(Equal([]string{"Off", "On", "Off", "On", "Off", "On"}), "powered back on")
	g.Expect(host.PowerState(w.ctx)).To(Equal(bmc.PowerStateOn))
	g.Expect(w.taintKeys(node)).To(BeEmpty())
	g.Expect(w.getNode(node).Annotations).NotTo(HaveKey(v1alpha1.AnnotationAppliedTaints))
	g.Expect(w.lease(node)).To(BeNil())
	g.Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal CleanedUp")))
}

// Reboot strategy: a host that keeps failing is power-cycled again and again, the waits between attempts
// doubling up to the max, until the fault is fixed and the node comes back (seed story 5).
func testRebootBackoff(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-4", nil)
	key := w.nhcRemediation(node, spec(reboot, 3))
	fixedAt := int32(12) // the admin fixes the fault before the 12th attempt

	var backoffs []time.Duration
	react := func(p *v1alpha1.PowerCycleRemediation) {
		if p.Status.Phase == v1alpha1.PhaseRetrying && len(backoffs) < int(p.Status.RetryCount) {
			backoffs = append(backoffs, p.Status.NextRetryTime.Sub(p.Status.LastTransitionTime.Time))
		}
		w.kubeletOnPowerOn(node, func(n int32) bool { return n >= fixedAt })(p)
	}
	w.drive(key, same(w.reconciler()), react, untilSettled)

	g.Expect(backoffs).To(Equal(append([]time.Duration{30 * time.Second, time.Minute}, slices.Repeat([]time.Duration{2 * time.Minute}, 9)...)))
	p := w.get(key)
	g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(p.Status.RetryCount).To(Equal(int32(11)))
	var numbers []int32
	var results []string
	for _, a := range p.Status.Attempts {
		numbers, results = append(numbers, a.Number), append(results, a.Result)
	}
	g.Expect(numbers).To(Equal([]int32{3, 4, 5, 6, 7, 8, 9, 10, 11, 12}), "the last 10 attempts are kept")
	g.Expect(results).To(Equal(append(slices.Repeat([]string{"Failed"}, 9), "Succeeded")))
	g.Expect(p.Status.Attempts[0].Message).To(ContainSubstring("node not Ready within 5m0s of power-on"))
	g.Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal(slices.Repeat([]string{"Off", "On"}, 12)))
	g.Expect(w.taintKeys(node)).To(BeEmpty())
	g.Expect(w.lease(node)).To(BeNil())
}

// A request deleted mid-flow, the only one of its node: the host is powered back on (unless the strategy
// is power-off), our taints and our lease go, then the finalizer. A request timed out mid-flow instead
// lands the power request in flight and hands the host over as it is (taints and lease kept), and is
// restored so only once deleted.
func testCancelledMidFlow(t *testing.T, api *apiServer) {
	for _, tc := range []struct {
		name     string
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
	}{
		{name: "deleted while off and fenced", strategy: reboot, at: v1alpha1.PhasePoweringOn, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn},
		{name: "deleted just after power-off was confirmed", strategy: reboot, at: v1alpha1.PhasePoweredOff, pause: v1alpha1.PhasePoweringOn, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn},
		{name: "deleted while the power-off is on its way", strategy: reboot, at: v1alpha1.PhasePoweringOff, sent: true, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn},
		{name: "deleted before the power-off was sent", strategy: reboot, at: v1alpha1.PhasePoweringOff, unreadable: true, wantOps: nil, wantState: bmc.PowerStateOn},
		{name: "timed out while powering on, then deleted", strategy: reboot, at: v1alpha1.PhasePoweringOn, timedOut: true, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn},
		{name: "deleted while waiting for the node", strategy: reboot, at: v1alpha1.PhaseWaitingForNode, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn},
		{name: "deleted while waiting between attempts", strategy: reboot, at: v1alpha1.PhaseRetrying, wantOps: []string{"Off", "On"}, wantState: bmc.PowerStateOn},
		{name: "power-off strategy: deleted once fenced, left off", strategy: powerOff, at: v1alpha1.PhaseSucceeded, wantOps: []string{"Off"}, wantState: bmc.PowerStateOff},
		{name: "deleted before anything was done", strategy: reboot, at: v1alpha1.PhasePending, noSecret: true, wantOps: nil, wantState: bmc.PowerStateOn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			w, hosts := fakeHosts(t, api)
			node := w.node("worker", nil)
			if tc.noSecret {
				w.bmc(node, fakeAddress(node), nil)
			} else {
				w.bmc(node, fakeAddress(node), credentials)
			}
			key := w.nhcRemediation(node, spec(tc.strategy, 3))
			host := hosts.Driver(fakeAddress(node))
			host.SetTransitionDelay(1)
			if tc.pause != "" {
				w.pauseBefore(tc.pause)
			}
			if tc.unreadable {
				host.FailNext(bmc.OperationPowerState, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable, Err: errors.New("no answer")})
			}

			w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, never), func(s []step) bool {
				return s[len(s)-1].phase == tc.at && (!tc.sent || w.get(key).Status.PowerRequest != nil)
			})
			if tc.sent {
				g.Expect(host.PowerState(w.ctx)).To(Equal(bmc.PowerStateOn), "the BMC does not show the power-off yet")
			}
			if tc.at == v1alpha1.PhasePoweringOn {
				g.Expect(host.PowerState(w.ctx)).To(Equal(bmc.PowerStateOff))
				g.Expect(w.taintKeys(node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))
			}
			if tc.at != v1alpha1.PhasePending {
				g.Expect(w.lease(node)).NotTo(BeNil())
			}

			p := w.get(key)
			if tc.timedOut {
				p.Annotations[v1alpha1.AnnotationTimedOut] = w.clock.Now().Format(time.RFC3339)
				w.must(w.c.Update(w.ctx, p))
				w.drive(key, same(w.reconciler()), nil, func(s []step) bool { return handedOver(w.get(key)) })
				g.Expect(powerOps(host)).To(Equal(tc.wantOps), "the power-on in flight landed, nothing more")
				g.Expect(host.PowerState(w.ctx)).To(Equal(tc.wantState))
				g.Expect(w.taintKeys(node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService), "handed over as it is")
				g.Expect(w.lease(node)).NotTo(BeNil())
				p := w.get(key)
				g.Expect(p.Finalizers).To(ContainElement(v1alpha1.FinalizerPowerCycle))
				g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
				g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonTimedOut, metav1.ConditionFalse))
				g.Expect(conditionOf(p, v1alpha1.ConditionProcessing)).To(MatchFields(v1alpha1.ReasonHandedOver, metav1.ConditionFalse))
				g.Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal HandedOver")))
			}
			w.must(w.c.Delete(w.ctx, w.get(key)))
			w.drive(key, same(w.reconciler()), nil, func(s []step) bool { return s[len(s)-1].gone })

			if len(tc.wantOps) == 0 {
				g.Expect(powerOps(host)).To(BeEmpty())
			} else {
				g.Expect(powerOps(host)).To(Equal(tc.wantOps))
			}
			g.Expect(host.PowerState(w.ctx)).To(Equal(tc.wantState))
			g.Expect(host.PowerState(w.ctx)).To(Equal(tc.wantState), "and stays so")
			g.Expect(w.taintKeys(node)).To(BeEmpty())
			g.Expect(w.lease(node)).To(BeNil())
			err := w.c.Get(w.ctx, key, &v1alpha1.PowerCycleRemediation{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
			g.Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal CleanedUp")))
		})
	}
}

// A request deleted while its power-off is accepted by the BMC but not carried out yet (Redfish mock with
// StuckPower: the ForceOff is queued, the host still reads On, and the Redfish driver sends no power-on
// to a host that reads On). Clean-up must not take that On for the end of the story: it waits until the
// BMC reads Off, powers the host on, and lets the request go only once the BMC reads On again. A
// power-off that is never carried out ends the wait powerOffTimeoutSeconds after it was requested, the
// host on and no power-on asked for.
func testCancelledWhilePowerOffQueued(t *testing.T, api *apiServer) {
	for _, tc := range []struct {
		name       string
		actsAfter  time.Duration // when the BMC carries out the queued power-off, after it accepted it; 0: never
		restart    bool          // a fresh reconciler (a restarted manager) for every reconcile
		wantResets []string
		wantPower  []string // the host's power changes, "from>to"
	}{
		{name: "carried out two polls later", actsAfter: 12 * time.Second,
			wantResets: []string{"ForceOff", "On"}, wantPower: []string{"On>Off", "Off>PoweringOn", "PoweringOn>On"}},
		{name: "carried out two polls later, restarted before every reconcile", actsAfter: 12 * time.Second, restart: true,
			wantResets: []string{"ForceOff", "On"}, wantPower: []string{"On>Off", "Off>PoweringOn", "PoweringOn>On"}},
		{name: "never carried out", wantResets: []string{"ForceOff"}, wantPower: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			w, m := mockHosts(t, api, func(m *redfishmock.Mock) *redfishmock.Mock {
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
			g.Expect(m.SetFaults("1", redfishmock.Faults{StuckPower: true})).To(Succeed())
			node := w.node("worker", nil)
			w.bmc(node, mockAddress(m, "1"), credentials)
			key := w.nhcRemediation(node, spec(reboot, 3))

			w.drive(key, same(w.reconciler()), nil, func(s []step) bool {
				return s[len(s)-1].phase == v1alpha1.PhasePoweringOff && w.get(key).Status.PowerRequest != nil
			})
			g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}), "the BMC accepted the power-off")
			g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn), "and has not carried it out yet")
			p := w.get(key)
			requested := p.Status.PowerRequest.Time.Time

			// The BMC carries the queued power-off out actsAfter it accepted it, whatever it was asked since.
			acted := false
			bmcActs := func() {
				if tc.actsAfter == 0 || acted || w.clock.Now().Before(requested.Add(tc.actsAfter)) {
					return
				}
				acted = true
				m.ClearFaults()
				g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
			}
			next := same(w.reconciler())
			if tc.restart {
				next = w.reconciler
			}
			w.must(w.c.Delete(w.ctx, p))
			steps := w.drive(key, next, func(*v1alpha1.PowerCycleRemediation) { bmcActs() }, untilSettled)

			last := steps[len(steps)-1]
			g.Expect(last.gone).To(BeTrue(), "the finalizer let the request go")
			g.Expect(power()).To(Equal(tc.wantPower), "the power history when the request went away")
			g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn))
			if tc.actsAfter == 0 {
				g.Expect(last.at.Sub(requested)).To(Equal(time.Minute), "clean-up waited powerOffTimeoutSeconds for the power-off")
			}

			// Later on, whatever the BMC still had queued is done: the host stays on.
			w.clock.Step(2 * time.Minute)
			bmcActs()
			g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn), "and stays on")
			g.Expect(power()).To(Equal(tc.wantPower))
			g.Expect(m.Resets("1")).To(Equal(tc.wantResets))
			g.Expect(w.taintKeys(node)).To(BeEmpty())
			g.Expect(w.lease(node)).To(BeNil())
			events := w.drainEvents()
			g.Expect(events).NotTo(ContainElement(HavePrefix("Warning PowerOnAbandoned")))
			cleanedUp := And(HavePrefix("Normal CleanedUp"), ContainSubstring("was not carried out within 1m0s; the host stayed on"))
			if tc.actsAfter == 0 {
				g.Expect(events).To(ContainElement(cleanedUp))
			} else {
				g.Expect(events).To(ContainElement(HavePrefix("Normal CleanedUp")))
				g.Expect(events).NotTo(ContainElement(cleanedUp))
			}
		})
	}
}

// A BMC that accepts the power-off but never turns the host off (Redfish mock, StuckPower): the attempt
// fails powerOffTimeoutSeconds later, and the out-of-service taint is never applied to that host.
func testPowerOffNeverConfirmed(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, m := mockHosts(t, api, func(m *redfishmock.Mock) *redfishmock.Mock {
		return m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey])
	})
	g.Expect(m.SetFaults("1", redfishmock.Faults{StuckPower: true})).To(Succeed())
	node := w.node("worker-5", nil)
	w.bmc(node, mockAddress(m, "1"), credentials)
	key := w.nhcRemediation(node, spec(reboot, 3))

	neverOutOfService := func(*v1alpha1.PowerCycleRemediation) {
		g.Expect(w.taintKeys(node)).NotTo(ContainElement(v1alpha1.TaintOutOfService), "no host that is on is fenced")
	}
	steps := w.drive(key, same(w.reconciler()), neverOutOfService, untilPhase(v1alpha1.PhaseRetrying))

	p := w.get(key)
	g.Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePoweringOff, v1alpha1.PhaseRetrying}))
	g.Expect(p.Status.Attempts).To(HaveLen(1))
	a := p.Status.Attempts[0]
	g.Expect(a.Result).To(Equal("Failed"))
	g.Expect(a.Message).To(ContainSubstring("power-off not confirmed within 1m0s"))
	g.Expect(a.PoweredOff).To(BeNil())
	g.Expect(a.Finished.Sub(a.Started.Time)).To(Equal(time.Minute))
	g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}), "the power-off was asked once, and polled")
	g.Expect(w.taintKeys(node)).To(Equal([]string{v1alpha1.TaintRemediation}), "only the NoSchedule marker")
	g.Expect(w.drainEvents()).To(ContainElement(HavePrefix("Warning AttemptFailed")))

	// The BMC is repaired: the next attempt fences and recovers the node.
	m.ClearFaults()
	w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilSettled)
	g.Expect(w.get(key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "ForceOff", "On"}))
}

// An unreachable BMC: BMCReady=False and a warning, retries whose waits grow (no hot loop), attempts
// that fail at their deadline and are retried with backoff; once the BMC answers, the node recovers.
func testBMCUnreachable(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-6", nil)
	host := hosts.Driver(fakeAddress(node))
	host.FailAlways(bmc.OperationPowerState, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable,
		Err: fmt.Errorf("dial tcp 10.0.0.6:443: connect: no route to host")})
	key := w.nhcRemediation(node, spec(reboot, 3))

	start := w.clock.Now()
	steps := w.drive(key, same(w.reconciler()), nil, func(s []step) bool { return s[len(s)-1].at.Sub(start) >= 30*time.Minute })

	for i, s := range steps {
		if i == 0 || s.phase != steps[i-1].phase {
			continue // a transition: its own status update brings the next reconcile
		}
		g.Expect(s.result.RequeueAfter).To(BeNumerically(">=", 5*time.Second), "reconcile %d (%s) requeued too soon", i, s.phase)
	}
	reads := host.CallCount(bmc.OperationPowerState)
	g.Expect(reads).To(BeNumerically("<=", 60), "30 minutes of an unreachable BMC cost %d reads", reads)
	g.Expect(host.CallCount(bmc.OperationPowerOff)).To(BeZero(), "nothing is asked of a BMC that cannot be read")
	p := w.get(key)
	g.Expect(conditionOf(p, v1alpha1.ConditionBMCReady)).To(MatchFields(v1alpha1.ReasonBMCUnreachable, metav1.ConditionFalse))
	g.Expect(conditionOf(p, v1alpha1.ConditionBMCReady).Message).To(ContainSubstring("no route to host"))
	g.Expect(p.Status.RetryCount).To(BeNumerically(">=", 5), "each attempt gives up at its deadline")
	g.Expect(p.Status.Attempts[0].Message).To(ContainSubstring("Unreachable"))
	g.Expect(w.taintKeys(node)).NotTo(ContainElement(v1alpha1.TaintOutOfService))
	warnings := 0
	for _, e := range w.drainEvents() {
		if strings.HasPrefix(e, "Warning BMCNotReady") {
			warnings++
		}
	}
	g.Expect(warnings).To(Equal(1), "one warning for the outage, not one per retry")

	// The network is fixed.
	host.FailAlways(bmc.OperationPowerState, nil)
	w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilSettled)
	p = w.get(key)
	g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(conditionOf(p, v1alpha1.ConditionBMCReady).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(powerOps(host)).To(Equal([]string{"Off", "On"}))
}

// A BMC that comes back with less than a poll interval left before the attempt's deadline: the power-off
// is not sent then, since the attempt could not wait to see it done and the next attempt would send it
// again to a host already going down. The attempt fails at its deadline; the next one asks once.
func testNoPowerRequestTooLate(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-late", nil)
	host := hosts.Driver(fakeAddress(node))
	host.SetTransitionDelay(3) // a host that takes a few reads to go off, as a real one takes seconds
	host.FailAlways(bmc.OperationPowerState, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable,
		Err: fmt.Errorf("dial tcp 10.0.0.9:443: connect: no route to host")})
	key := w.nhcRemediation(node, spec(reboot, 3))
	w.drive(key, same(w.reconciler()), nil, untilPhase(v1alpha1.PhasePoweringOff))

	// The BMC answers again two seconds before the attempt's power-off deadline (the poll interval is 5s).
	deadline := w.get(key).Status.LastTransitionTime.Add(time.Minute)
	w.clock.SetTime(deadline.Add(-2 * time.Second))
	host.FailAlways(bmc.OperationPowerState, nil)
	res, err := w.reconciler().Reconcile(w.ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(host.CallCount(bmc.OperationPowerOff)).To(BeZero(), "no power-off the attempt cannot wait for")
	g.Expect(res.RequeueAfter).To(Equal(2*time.Second), "looks again at the deadline")

	w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilSettled)
	p := w.get(key)
	g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(p.Status.Attempts).To(HaveLen(2))
	g.Expect(p.Status.Attempts[0].Message).To(ContainSubstring("power-off not confirmed within 1m0s"))
	g.Expect(powerOps(host)).To(Equal([]string{"Off", "On"}), "one power-off, sent by the attempt that waited for it")
}

// Wrong credentials (Redfish mock): BMCReady=False AuthenticationFailed, bounded retries, and the
// password never shows; once the Secret is fixed the remediation proceeds.
func testBMCWrongCredentials(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, m := mockHosts(t, api, func(m *redfishmock.Mock) *redfishmock.Mock {
		return m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey])
	})
	node := w.node("worker-7", nil)
	wrong := map[string]string{bmc.UsernameKey: "admin", bmc.PasswordKey: "An-Old-Pa55word"}
	b := w.bmc(node, mockAddress(m, "1"), wrong)
	key := w.nhcRemediation(node, spec(reboot, 3))

	start := w.clock.Now()
	w.drive(key, same(w.reconciler()), nil, func(s []step) bool { return s[len(s)-1].at.Sub(start) >= 20*time.Minute })

	p := w.get(key)
	g.Expect(conditionOf(p, v1alpha1.ConditionBMCReady)).To(MatchFields(v1alpha1.ReasonAuthenticationFailed, metav1.ConditionFalse))
	g.Expect(m.Resets("1")).To(BeEmpty())
	g.Expect(len(m.Requests())).To(BeNumerically("<=", 120), "20 minutes of refused credentials cost %d requests", len(m.Requests()))
	events := w.drainEvents()
	g.Expect(events).To(ContainElement(HavePrefix("Warning BMCNotReady")))
	for _, text := range append(events, fmt.Sprint(p.Status)) {
		g.Expect(text).NotTo(ContainSubstring(wrong[bmc.PasswordKey]), "no password in events or status")
	}

	w.secret(b.Spec.CredentialsSecretRef.Name, credentials)
	w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilSettled)
	g.Expect(w.get(key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}))
}

// A BMC whose Secret is missing: the remediation waits in Pending (BMCReady=False SecretNotFound) without
// taking the lease or tainting the node, and proceeds once the Secret exists.
func testBMCSecretMissing(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.node("worker-8", nil)
	b := w.bmc(node, fakeAddress(node), nil)
	key := w.nhcRemediation(node, spec(reboot, 3))

	steps := w.drive(key, same(w.reconciler()), nil, func(s []step) bool { return len(s) == 7 })

	g.Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePending}))
	var waits []time.Duration
	for _, s := range steps {
		waits = append(waits, s.result.RequeueAfter)
	}
	g.Expect(waits).To(Equal([]time.Duration{5 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second,
		40 * time.Second, 80 * time.Second, 2 * time.Minute}), "waits double up to the backoff max")
	p := w.get(key)
	g.Expect(conditionOf(p, v1alpha1.ConditionBMCReady)).To(MatchFields(v1alpha1.ReasonSecretNotFound, metav1.ConditionFalse))
	g.Expect(w.lease(node)).To(BeNil(), "no lease while the BMC cannot be used")
	g.Expect(w.taintKeys(node)).To(BeEmpty())
	g.Expect(hosts.Driver(fakeAddress(node)).Calls()).To(BeEmpty())

	w.secret(b.Spec.CredentialsSecretRef.Name, credentials)
	w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilSettled)
	g.Expect(w.get(key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
}

// A node held by node-maintenance: the remediation waits, says who holds it, touches nothing; once the
// lease is released it proceeds.
func testLeaseHeldByNodeMaintenance(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-9", nil)
	held := takeLease(w, node, "node-maintenance", time.Hour)
	key := w.nhcRemediation(node, spec(reboot, 3))

	steps := w.drive(key, same(w.reconciler()), nil, func(s []step) bool { return len(s) == 4 })

	g.Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePending}))
	g.Expect(steps[len(steps)-1].result.RequeueAfter).To(Equal(2*time.Minute), "looks again at the backoff max, the lease being longer")
	p := w.get(key)
	c := conditionOf(p, v1alpha1.ConditionLeaseAcquired)
	g.Expect(c).To(MatchFields(v1alpha1.ReasonLeaseHeldByOther, metav1.ConditionFalse))
	g.Expect(c.Message).To(ContainSubstring("node-maintenance"))
	g.Expect(w.drainEvents()).To(ContainElement(And(HavePrefix("Warning NodeLeaseHeld"), ContainSubstring("node-maintenance"))))
	g.Expect(*w.lease(node).Spec.HolderIdentity).To(Equal("node-maintenance"))
	g.Expect(hosts.Driver(fakeAddress(node)).Calls()).To(BeEmpty())
	g.Expect(w.taintKeys(node)).To(BeEmpty())

	// Maintenance is over: node-maintenance releases its lease.
	w.must(w.c.Delete(w.ctx, held))
	w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilSettled)
	p = w.get(key)
	g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
	g.Expect(w.lease(node)).To(BeNil())
}

// owningCheckHolder is the lease holder identity of the NodeHealthCheck that owns nhcRemediation's requests.
const owningCheckHolder = "NodeHealthCheck.remediation.metalheal.io-workers"

// A node lease held by the health check that created the request (a NodeHealthCheck holds it for its
// remediators): the remediation proceeds and leaves that lease alone.
func testLeaseHeldByOwner(t *testing.T, api *apiServer) {
	leaseHeldByOwner(t, api, "worker-10", false)
}

// The owner's lease is not in the remediator's cache yet (a health check that creates the request first
// takes the lease a moment later): the lease request that follows finds it held by the owner, which is
// as good as seeing it.
func testLeaseHeldByOwnerNotYetCached(t *testing.T, api *apiServer) {
	leaseHeldByOwner(t, api, "worker-16", true)
}

// leaseHeldByOwner runs a reboot of a node whose lease its owning health check holds; notYetCached
// makes the remediator's first read of the lease miss it, as a lagging cache would.
func leaseHeldByOwner(t *testing.T, api *apiServer, nodeName string, notYetCached bool) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost(nodeName, nil)
	takeLease(w, node, owningCheckHolder, time.Hour)
	key := w.nhcRemediation(node, spec(reboot, 3))
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
		w.kubeletOnPowerOn(node, always)(p)
	}
	w.drive(key, same(w.reconciler()), react, untilSettled)

	g.Expect(w.get(key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(reasons).To(ContainElement(reasonLeaseHeldByOwner))
	g.Expect(reasons).NotTo(ContainElement(v1alpha1.ReasonLeaseHeldByOther))
	g.Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
	g.Expect(*w.lease(node).Spec.HolderIdentity).To(Equal(owningCheckHolder), "the owner's lease is not ours to release")
	var taken, released []string
	for _, e := range w.drainEvents() {
		switch strings.Fields(e)[1] {
		case EventNodeLeaseTaken:
			taken = append(taken, e)
		case EventNodeLeaseReleased:
			released = append(released, e)
		}
	}
	g.Expect(taken).To(HaveExactElements(ContainSubstring(" held by "+owningCheckHolder+": ")), "told once, for the timeline")
	g.Expect(released).To(BeEmpty(), "the owner's lease is the owner's to tell of")
	if notYetCached {
		g.Expect(missed.Load()).To(BeTrue())
		g.Expect(reasons[0]).To(Equal(reasonLeaseHeldByOwner))
		g.Expect(w.drainEvents()).NotTo(ContainElement(ContainSubstring(EventNodeLeaseHeld)))
	}
}

// A request from a NodeHealthCheck whose lease the check has not taken yet (it creates the request
// first, then takes the lease) waits for the lease without a write, a lease request or a BMC call; once
// the check holds the lease, its watch event brings the reconcile that goes on, under the check's lease.
func testWaitsForOwnersLease(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-17", nil)
	key := w.nhcRemediation(node, spec(reboot, 3))
	created := w.get(key).CreationTimestamp.Time
	w.clock.SetTime(created.Add(300 * time.Millisecond)) // just after the check's create

	c, writes := w.interceptedClient(interceptor.Funcs{})
	w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client, o.LeaseClient = c, c }
	r := w.reconciler()
	res, err := r.Reconcile(w.ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(Equal(ownerLeaseGrace-300*time.Millisecond), "a backstop: the lease's watch event comes first")
	g.Expect(writes.all()).To(BeEmpty())
	p := w.get(key)
	g.Expect(p.Finalizers).To(BeEmpty())
	g.Expect(p.Status.Phase).To(BeEmpty())
	g.Expect(w.lease(node)).To(BeNil())
	g.Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(BeEmpty())

	// The lease's watch event maps to the waiting request, and to nothing once it has started.
	lease := takeLease(w, node, owningCheckHolder, time.Hour)
	awaiting := awaitingLease(t, w)
	mapped := func() []reconcile.Request { return awaiting(lease) }
	g.Eventually(mapped).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(ConsistOf(reconcile.Request{NamespacedName: key}))

	w.clock.Step(50 * time.Millisecond)
	var reasons []string
	react := func(p *v1alpha1.PowerCycleRemediation) {
		reasons = append(reasons, conditionOf(p, v1alpha1.ConditionLeaseAcquired).Reason)
		w.kubeletOnPowerOn(node, always)(p)
	}
	w.drive(key, same(r), react, untilSettled)
	g.Expect(w.get(key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(reasons[0]).To(Equal(reasonLeaseHeldByOwner))
	g.Expect(reasons).NotTo(ContainElement(v1alpha1.ReasonLeaseAcquired))
	g.Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
	g.Expect(writes.of("Lease")).To(BeZero(), "the check's lease is enough")
	g.Expect(*w.lease(node).Spec.HolderIdentity).To(Equal(owningCheckHolder))
	g.Eventually(mapped).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(BeEmpty())

	// With another request waiting, its node's lease maps to it, and the same lease elsewhere, or a lease
	// named otherwise, to nothing.
	waiting := w.nhcRemediation(w.fakeHost("worker-19", nil), spec(reboot, 3))
	ours := lease.DeepCopy()
	ours.Name = leases.LeaseName(waiting.Name)
	g.Eventually(func() []reconcile.Request { return awaiting(ours) }).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).
		Should(ConsistOf(reconcile.Request{NamespacedName: waiting}))
	elsewhere := ours.DeepCopy()
	elsewhere.Namespace = w.ns
	g.Expect(awaiting(elsewhere)).To(BeEmpty())
	unprefixed := ours.DeepCopy()
	unprefixed.Name = waiting.Name
	g.Expect(awaiting(unprefixed)).To(BeEmpty())
}

// The check never takes the lease (it failed to, or is not one that does): the request waits no longer
// than ownerLeaseGrace after its creation, then takes the lease itself and goes on.
func testOwnersLeaseNeverComes(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-18", nil)
	key := w.nhcRemediation(node, spec(reboot, 3))
	w.clock.SetTime(w.get(key).CreationTimestamp.Time)

	var reasons []string
	react := func(p *v1alpha1.PowerCycleRemediation) {
		reasons = append(reasons, conditionOf(p, v1alpha1.ConditionLeaseAcquired).Reason)
		w.kubeletOnPowerOn(node, always)(p)
	}
	steps := w.drive(key, same(w.reconciler()), react, untilSettled)
	g.Expect(steps[0].phase).To(BeEmpty())
	g.Expect(steps[0].result.RequeueAfter).To(Equal(ownerLeaseGrace))
	g.Expect(steps[1].at.Sub(steps[0].at)).To(Equal(ownerLeaseGrace))
	g.Expect(steps[1].phase).NotTo(BeEmpty(), "the grace is over: it goes on")
	p := w.get(key)
	g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(reasons).To(ContainElement(v1alpha1.ReasonLeaseAcquired))
	g.Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
	g.Expect(w.lease(node)).To(Or(BeNil(), WithTransform(func(l *coordinationv1.Lease) string { return ptr.Deref(l.Spec.HolderIdentity, "") }, BeEmpty())),
		"its own lease is given back")
}

// awaitingLease returns what the remediator's lease watch maps a lease to, the requests read as the
// manager reads them (indexedClient).
func awaitingLease(t *testing.T, w *world) func(*coordinationv1.Lease) []reconcile.Request {
	t.Helper()
	r, err := NewRemediationReconciler(RemediationReconcilerOptions{Client: w.indexedClient(), Clock: w.clock, Recorder: w.recorder,
		Drivers: bmcaccess.New(w.api.cache, w.ns, w.registry, bmcaccess.Options{}), ManagerNamespace: w.ns})
	w.must(err)
	return func(l *coordinationv1.Lease) []reconcile.Request { return r.claim.remediationsAwaitingLease(w.ctx, l) }
}

// takeLease creates node's lease for holder, valid for d from the world's time.
func takeLease(w *world, node, holder string, d time.Duration) *coordinationv1.Lease {
	w.t.Helper()
	now := metav1.NewMicroTime(w.clock.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leases.LeaseName(node), Namespace: leases.DefaultNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: new(int32(d.Seconds())),
			AcquireTime: &now, RenewTime: &now},
	}
	w.must(w.c.Create(w.ctx, l))
	return l
}

// A restarted controller (a fresh reconciler, a fresh access layer, nothing but the objects) resumes
// from any phase and completes, and a host is asked to power off exactly once per attempt: never again
// once it has been cycled. The hosts take two status reads to change power, so the power phases span
// several reconciles.
func testRestartAtEveryPhase(t *testing.T, api *apiServer) {
	for _, tc := range []struct {
		name        string
		restartAt   v1alpha1.PowerCyclePhase // restart once, after this phase is entered
		leaseHeld   time.Duration            // node-maintenance holds the node this long: the request waits in Pending
		pause       v1alpha1.PowerCyclePhase // the first write entering it conflicts (pauseBefore): restartAt is seen
		everyStep   bool                     // restart before every reconcile instead
		strategy    v1alpha1.Strategy
		retries     int32
		healthyFrom int32 // the attempt from which the node comes back; 0: never
		wantPhase   v1alpha1.PowerCyclePhase
		wantOps     []string
	}{
		{name: "Pending", restartAt: v1alpha1.PhasePending, leaseHeld: time.Minute, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}},
		{name: "PoweringOff", restartAt: v1alpha1.PhasePoweringOff, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}},
		{name: "PoweredOff", restartAt: v1alpha1.PhasePoweredOff, pause: v1alpha1.PhasePoweringOn, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}},
		{name: "PoweringOn", restartAt: v1alpha1.PhasePoweringOn, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}},
		{name: "WaitingForNode", restartAt: v1alpha1.PhaseWaitingForNode, strategy: reboot, healthyFrom: 1, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On"}},
		{name: "Retrying", restartAt: v1alpha1.PhaseRetrying, strategy: reboot, healthyFrom: 2, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On", "Off", "On"}},
		{name: "Escalating", restartAt: v1alpha1.PhaseEscalating, strategy: escalate, retries: 1, wantPhase: v1alpha1.PhaseFailed, wantOps: []string{"Off", "On", "Off"}},
		{name: "PoweredOff (power-off strategy)", restartAt: v1alpha1.PhasePoweredOff, pause: v1alpha1.PhaseSucceeded, strategy: powerOff, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off"}},
		{name: "before every reconcile", everyStep: true, strategy: reboot, healthyFrom: 2, wantPhase: v1alpha1.PhaseSucceeded, wantOps: []string{"Off", "On", "Off", "On"}},
		{name: "before every reconcile, escalate", everyStep: true, strategy: escalate, retries: 2, wantPhase: v1alpha1.PhaseFailed, wantOps: []string{"Off", "On", "Off", "On", "Off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			w, hosts := fakeHosts(t, api)
			node := w.fakeHost("worker", nil)
			host := hosts.Driver(fakeAddress(node))
			host.SetTransitionDelay(2)
			if tc.leaseHeld > 0 {
				takeLease(w, node, "node-maintenance", tc.leaseHeld)
			}
			if tc.pause != "" {
				w.pauseBefore(tc.pause)
			}
			key := w.nhcRemediation(node, spec(tc.strategy, max(tc.retries, 1)))

			current, restarts := w.reconciler(), 0
			next := func() *RemediationReconciler {
				if tc.everyStep {
					restarts++
					return w.reconciler()
				}
				return current
			}
			kubelet := w.kubeletOnPowerOn(node, func(n int32) bool { return tc.healthyFrom > 0 && n >= tc.healthyFrom })
			react := func(p *v1alpha1.PowerCycleRemediation) {
				if !tc.everyStep && restarts == 0 && p.Status.Phase == tc.restartAt {
					current, restarts = w.reconciler(), 1
				}
				kubelet(p)
			}
			w.drive(key, next, react, untilTerminal)

			g.Expect(restarts).To(BeNumerically(">=", 1))
			p := w.get(key)
			g.Expect(p.Status.Phase).To(Equal(tc.wantPhase))
			g.Expect(powerOps(host)).To(Equal(tc.wantOps), "one power-off per attempt (and one to stay off), never a second")
			for _, c := range host.Calls() {
				if c.Operation == bmc.OperationPowerOff {
					g.Expect(c.Force).To(BeTrue())
				}
			}
		})
	}
}

// A power-off is recorded in the request's status before it is sent: were the manager on the node it
// powers off, its successor would find the record. By then the node carries the remediation taint, which
// the same write claimed (the acceptance, the taint and the request take one write). The BMC checks it
// all at the moment it is asked.
func testPowerOffRecordedFirst(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-11", nil)
	key := w.nhcRemediation(node, spec(reboot, 3))
	type seen struct{ recorded, claimed, tainted bool }
	var atPowerOff []seen
	w.registry = checkingPowerOff(t, bmc.DriverRedfish, hosts.New, func() {
		p := &v1alpha1.PowerCycleRemediation{}
		w.must(w.c.Get(context.Background(), key, p)) // straight from the API server
		atPowerOff = append(atPowerOff, seen{
			recorded: p.Status.PowerRequest != nil && p.Status.PowerRequest.Target == v1alpha1.PowerOff,
			claimed:  slices.Contains(p.Status.AppliedTaints, v1alpha1.TaintRemediation),
			tainted:  slices.Contains(w.taintKeys(node), v1alpha1.TaintRemediation),
		})
	})
	w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.ManagerNodeName = node }

	w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilSettled)

	g.Expect(atPowerOff).To(Equal([]seen{{recorded: true, claimed: true, tainted: true}}))
	g.Expect(w.get(key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(w.drainEvents()).To(ContainElement(HavePrefix("Warning PoweringOffManagerNode")))
}

// The node refuses the remediation taint (it changed meanwhile): the power-off request recorded with the
// taint's claim is not sent, and the record is dropped again, so that a later reconcile taints the node
// and sends it, once.
func testTaintRefusedHoldsThePowerOff(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-16", nil)
	key := w.nhcRemediation(node, spec(reboot, 3))
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
	_, err := w.reconciler().Reconcile(w.ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).To(MatchError(ContainSubstring("tainting node " + node)))
	p := w.get(key)
	g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhasePoweringOff))
	g.Expect(p.Status.PowerRequest).To(BeNil(), "a request that was not sent is not on record")
	g.Expect(p.Status.AppliedTaints).To(ConsistOf(v1alpha1.TaintRemediation))
	g.Expect(powerOps(host)).To(BeEmpty())

	w.reconcilerOptions = nil
	w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilSettled)
	g.Expect(w.get(key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(powerOps(host)).To(Equal([]string{"Off", "On"}))
}

// A host that already reads Off is sent no power-off: the write entering PoweredOff claims both the
// remediation taint and the out-of-service taint, and the node gets both at once, before the power-on.
func testHostAlreadyOff(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-17", nil)
	host := hosts.Driver(fakeAddress(node))
	host.SetPowerState(bmc.PowerStateOff)
	key := w.nhcRemediation(node, spec(reboot, 3))
	var atPowerOn [][]string
	w.registry = checkingPowerOn(t, bmc.DriverRedfish, hosts.New, func() { atPowerOn = append(atPowerOn, w.taintKeys(node)) })

	w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilSettled)

	g.Expect(w.get(key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(powerOps(host)).To(Equal([]string{"On"}))
	g.Expect(atPowerOn).To(Equal([][]string{{v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService}}))
	g.Expect(w.taintKeys(node)).To(BeEmpty())
}

// Every attempt failed before a power-off could be sent (the BMC could not be read), so the node never
// got the remediation taint; when the BMC answers again in Escalating, the power-off that escalation
// sends is the first the host gets, and the node carries the taint by then.
func testEscalationTaintsBeforePowerOff(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-18", nil)
	host := hosts.Driver(fakeAddress(node))
	host.FailAlways(bmc.OperationPowerState, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable,
		Err: fmt.Errorf("dial tcp 10.0.0.18:443: connect: no route to host")})
	var taintedAtPowerOff []bool
	w.registry = checkingPowerOff(t, bmc.DriverRedfish, hosts.New, func() {
		taintedAtPowerOff = append(taintedAtPowerOff, slices.Contains(w.taintKeys(node), v1alpha1.TaintRemediation))
	})
	key := w.nhcRemediation(node, spec(escalate, 1))
	r := w.reconciler()
	w.drive(key, same(r), nil, untilPhase(v1alpha1.PhaseEscalating))
	g.Expect(w.taintKeys(node)).To(BeEmpty())

	host.FailAlways(bmc.OperationPowerState, nil) // the BMC answers again
	w.drive(key, same(r), nil, untilSettled)

	g.Expect(w.get(key).Status.Phase).To(Equal(v1alpha1.PhaseFailed))
	g.Expect(powerOps(host)).To(Equal([]string{"Off"}))
	g.Expect(taintedAtPowerOff).To(Equal([]bool{true}))
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
func checkingPowerOn(t *testing.T, kind string, factory bmc.Factory, check func()) *bmc.Registry {
	return checkingRegistry(t, kind, factory, checkingDriver{beforePowerOn: check})
}

// checkingPowerOff is checkingPowerOn for power-offs.
func checkingPowerOff(t *testing.T, kind string, factory bmc.Factory, check func()) *bmc.Registry {
	return checkingRegistry(t, kind, factory, checkingDriver{beforePowerOff: check})
}

// checkingRegistry is a registry whose driver of kind (built by factory) runs checks' checks.
func checkingRegistry(t *testing.T, kind string, factory bmc.Factory, checks checkingDriver) *bmc.Registry {
	t.Helper()
	registry := bmc.NewRegistry()
	if err := registry.Register(kind, func(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
		d, err := factory(addr, creds, opts)
		c := checks
		c.Driver = d
		return &c, err
	}); err != nil {
		t.Fatal(err)
	}
	return registry
}

// A node labelled exclude-from-remediation is never touched: the request fails at once.
func testExcludedNode(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	w, hosts := fakeHosts(t, api)
	node := w.fakeHost("worker-12", map[string]string{v1alpha1.LabelExcludeFromRemediation: "true"})
	key := w.nhcRemediation(node, spec(reboot, 3))

	w.drive(key, same(w.reconciler()), nil, untilSettled)

	p := w.get(key)
	g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
	g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(reasonNodeExcluded, metav1.ConditionFalse))
	g.Expect(hosts.Driver(fakeAddress(node)).Calls()).To(BeEmpty())
	g.Expect(w.lease(node)).To(BeNil())
	g.Expect(w.taintKeys(node)).To(BeEmpty())
}

// One remediation through the IPMI driver against OpenIPMI's ipmi_sim: the simulated host (a process)
// really stops and starts again.
func testIPMI(t *testing.T, api *apiServer) {
	g := NewWithT(t)
	sim := ipmisim.Start(t)
	hostWasOffWhenFenced := false
	var node string
	w := newWorld(t, api, nil)
	w.registry = checkingPowerOn(t, bmc.DriverIPMI, ipmi.New, func() {
		hostWasOffWhenFenced = slices.Contains(w.taintKeys(node), v1alpha1.TaintOutOfService) && !sim.HostPoweredOn()
	})
	w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.BMCCallTimeout = 20 * time.Second }
	node = w.node("worker-ipmi", nil)
	w.bmc(node, sim.Address, map[string]string{bmc.UsernameKey: sim.Credentials.Username, bmc.PasswordKey: sim.Credentials.Password})
	key := w.nhcRemediation(node, spec(reboot, 3))

	// A second client to the simulator, to wait (in real time: ipmi_sim takes its time) for a power
	// change the remediator asked for to show before the next reconcile reads it.
	addr, err := bmc.ParseAddress(sim.Address)
	g.Expect(err).NotTo(HaveOccurred())
	observer, err := ipmi.New(addr, sim.Credentials, bmc.Options{RequestTimeout: 20 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	react := func(p *v1alpha1.PowerCycleRemediation) {
		if r := p.Status.PowerRequest; r != nil {
			want := bmc.PowerState(r.Target)
			g.Eventually(sim.HostPoweredOn).WithTimeout(20 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(want == bmc.PowerStateOn))
			g.Eventually(func() (bmc.PowerState, error) { return observer.PowerState(w.ctx) }).
				WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(want))
		}
		if p.Status.Phase == v1alpha1.PhaseWaitingForNode && sim.HostPoweredOn() {
			w.kubeletOnPowerOn(node, always)(p)
		}
	}
	steps := w.drive(key, same(w.reconciler()), react, untilSettled)

	g.Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePoweringOff,
		v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseSucceeded}))
	g.Expect(hostWasOffWhenFenced).To(BeTrue(), "the node was fenced, and the simulated host really off, when the power-on was sent")
	g.Expect(sim.HostPoweredOn()).To(BeTrue())
	p := w.get(key)
	g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(w.taintKeys(node)).To(BeEmpty())
	g.Expect(w.lease(node)).To(BeNil())
}
