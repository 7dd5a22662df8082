package mhc

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/controllers/nhc"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/pkg/leases"
)

// staleCache reads the node leases and the checks of both kinds as they were when it was made, and
// everything else live: the cache of a checker that has not yet seen what another checker of the manager
// wrote since, until catchUp.
type staleCache struct {
	client.Client
	caughtUp atomic.Bool
	leases   coordinationv1.LeaseList
	nhcs     v1alpha1.NodeHealthCheckList
	mhcs     v1alpha1.MachineHealthCheckList
}

func snapshotCache(ctx context.Context) *staleCache {
	s := &staleCache{Client: k8s}
	Expect(k8s.List(ctx, &s.leases, client.InNamespace(leases.DefaultNamespace))).To(Succeed())
	Expect(k8s.List(ctx, &s.nhcs)).To(Succeed())
	Expect(k8s.List(ctx, &s.mhcs)).To(Succeed())
	return s
}

// catchUp makes the cache show what the API server has.
func (s *staleCache) catchUp() { s.caughtUp.Store(true) }

func (s *staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if s.caughtUp.Load() {
		return s.Client.Get(ctx, key, obj, opts...)
	}
	match := func(o client.Object) bool { return o.GetNamespace() == key.Namespace && o.GetName() == key.Name }
	switch o := obj.(type) {
	case *coordinationv1.Lease:
		for i := range s.leases.Items {
			if match(&s.leases.Items[i]) {
				s.leases.Items[i].DeepCopyInto(o)
				return nil
			}
		}
		return apierrors.NewNotFound(coordinationv1.Resource("leases"), key.Name)
	case *v1alpha1.NodeHealthCheck:
		for i := range s.nhcs.Items {
			if match(&s.nhcs.Items[i]) {
				s.nhcs.Items[i].DeepCopyInto(o)
				return nil
			}
		}
		return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("nodehealthchecks").GroupResource(), key.Name)
	case *v1alpha1.MachineHealthCheck:
		for i := range s.mhcs.Items {
			if match(&s.mhcs.Items[i]) {
				s.mhcs.Items[i].DeepCopyInto(o)
				return nil
			}
		}
		return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("machinehealthchecks").GroupResource(), key.Name)
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

func (s *staleCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if s.caughtUp.Load() {
		return s.Client.List(ctx, list, opts...)
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	in := func(o client.Object) bool { return lo.Namespace == "" || o.GetNamespace() == lo.Namespace }
	switch l := list.(type) {
	case *coordinationv1.LeaseList:
		s.leases.DeepCopyInto(l)
		l.Items = nil
		for i := range s.leases.Items {
			if in(&s.leases.Items[i]) {
				l.Items = append(l.Items, *s.leases.Items[i].DeepCopy())
			}
		}
		return nil
	case *v1alpha1.NodeHealthCheckList:
		s.nhcs.DeepCopyInto(l)
		return nil
	case *v1alpha1.MachineHealthCheckList:
		s.mhcs.DeepCopyInto(l)
		l.Items = nil
		for i := range s.mhcs.Items {
			if in(&s.mhcs.Items[i]) {
				l.Items = append(l.Items, *s.mhcs.Items[i].DeepCopy())
			}
		}
		return nil
	}
	return s.Client.List(ctx, list, opts...)
}

var _ = Describe("One control-plane Node at a time across the checks of one manager", func() {
	// Three control-plane Nodes, two failing at once: cp-0 reports NotReady (a NodeHealthCheck on Ready=False
	// finds it), cp-1 is unreachable (a MachineHealthCheck on Ready=Unknown, owner remediation, finds it).
	// Both checks decide from the cache as it was before either wrote, so each admits its own Node; leases
	// exclude per Node only, and without the manager's control-plane claim both would be taken down.
	DescribeTable("two checks of both kinds deciding from the same cache take one control-plane lease",
		func(ctx SpecContext, nhcFirst bool) {
			w := newWorld(ctx)
			nodes, check := w.controlPlaneOfBothKinds(ctx, corev1.ConditionFalse)
			cp0, cp1 := nodes[0], nodes[1]

			By("both checks, sharing the manager's claim, decide from a cache that shows neither's writes")
			claim := &gates.ControlPlaneClaim{}
			stale := snapshotCache(ctx)
			nhcR, err := nhc.New(nhc.Options{Client: stale, Cache: k8s, APIReader: k8s, Clock: w.clock, Recorder: w.rec,
				ResyncPeriod: 24 * time.Hour, ControlPlaneClaim: claim})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func(ctx context.Context) {
				// Deleted, the check is forgotten, its metrics too: this suite asserts on them.
				Expect(k8s.Delete(ctx, check)).To(Succeed())
				stale.catchUp()
				_, err := nhcR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(check)})
				Expect(err).NotTo(HaveOccurred())
			})
			mhcR, err := New(Options{Client: k8s, Reader: stale, APIReader: k8s, Recorder: w.rec, Clock: w.clock,
				Discovery: mgmtDiscovery, ControlPlaneClaim: claim})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func() { mhcR.remotes.StopAll() })
			reconcileNHC := func() ctrl.Result {
				res, err := nhcR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(check)})
				Expect(err).NotTo(HaveOccurred())
				return res
			}
			reconcileMHC := func() ctrl.Result {
				res, err := mhcR.Reconcile(ctx, reconcileRequest(w.ns, "cp"))
				Expect(err).NotTo(HaveOccurred())
				return res
			}
			var second func() ctrl.Result
			if nhcFirst {
				reconcileNHC()
				second = reconcileMHC
			} else {
				reconcileMHC()
				second = reconcileNHC
			}
			res := second()

			By("one control-plane lease is taken; the other check reports ControlPlaneBusy and looks again soon")
			expectOneAtATime := func() {
				GinkgoHelper()
				if nhcFirst {
					Expect(cpLeaseHolders(ctx, nodes)).To(Equal(map[string]string{cp0.Name: "NodeHealthCheck.remediation.metalheal.io-" + check.Name}))
					Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("name", cp0.Name)))))
					Expect(condition(w.machine(ctx, "cp-1"), clusterv1.MachineOwnerRemediatedCondition)).To(BeNil(), "not handed to its owner")
					e := entryOf(w.check(ctx, "cp"), "cp-1")
					Expect(e).To(And(Not(BeNil()), HaveField("SkipReason", string(blockedControlPlaneBusy)), HaveField("SkipMessage", ContainSubstring(cp0.Name))))
					return
				}
				Expect(cpLeaseHolders(ctx, nodes)).To(Equal(map[string]string{cp1.Name: "MachineHealthCheck.remediation.metalheal.io-cp"}))
				Expect(condition(w.machine(ctx, "cp-1"), clusterv1.MachineOwnerRemediatedCondition)).To(HaveField("Status", metav1.ConditionFalse))
				Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(check), check)).To(Succeed())
				Expect(check.Status.InFlightRemediations).To(BeEmpty())
				Expect(check.Status.UnhealthyNodes).To(ConsistOf(And(HaveField("Name", cp0.Name), HaveField("Remediations", BeEmpty()),
					HaveField("SkipReason", nhc.SkipControlPlaneBusy), HaveField("SkipMessage", ContainSubstring(cp1.Name)))))
			}
			expectOneAtATime()
			Expect(res.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", gates.ControlPlaneRecheck)))

			By("the cache catches up: the second check's own rule keeps it waiting")
			stale.catchUp()
			second()
			expectOneAtATime()

			By("the first Node is done with and its lease released: the second starts")
			if nhcFirst {
				w.setReady(ctx, k8s, cp0, corev1.ConditionTrue, 0)
				reconcileNHC() // the request goes
				reconcileNHC() // then the lease
				reconcileMHC()
				Expect(cpLeaseHolders(ctx, nodes)).To(Equal(map[string]string{cp1.Name: "MachineHealthCheck.remediation.metalheal.io-cp"}))
				Expect(condition(w.machine(ctx, "cp-1"), clusterv1.MachineOwnerRemediatedCondition)).To(HaveField("Status", metav1.ConditionFalse))
				return
			}
			// Its owner replaces cp-1's Machine; the new one joins as the same Node, healthy.
			Expect(k8s.Delete(ctx, w.machine(ctx, "cp-1"))).To(Succeed())
			w.createMachine(ctx, "cp-1-replacement", withNodeRef(cp1.Name), asControlPlane)
			w.setReady(ctx, k8s, cp1, corev1.ConditionTrue, 0)
			reconcileMHC() // the lease goes
			reconcileNHC()
			Expect(cpLeaseHolders(ctx, nodes)).To(Equal(map[string]string{cp0.Name: "NodeHealthCheck.remediation.metalheal.io-" + check.Name}))
			Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("name", cp0.Name)))))
		},
		Entry("the NodeHealthCheck writes first", true),
		Entry("the MachineHealthCheck writes first", false),
	)
})

// controlPlaneOfBothKinds makes three control-plane Nodes and their Machines, cp-0 (whose Ready condition
// has been cp0 for ten minutes), cp-1 (unreachable) and cp-2 (healthy), and two checks over them: a
// NodeHealthCheck on Ready=False (cp-0's, when it fails), returned, and the MachineHealthCheck "cp" on
// Ready=Unknown (cp-1's), by owner remediation; neither limited by its budget.
func (w *world) controlPlaneOfBothKinds(ctx context.Context, cp0 corev1.ConditionStatus) ([]*corev1.Node, *v1alpha1.NodeHealthCheck) {
	GinkgoHelper()
	w.createTemplate(ctx, "reboot", "reboot")
	var nodes []*corev1.Node
	for _, cp := range []struct {
		name  string
		ready corev1.ConditionStatus
	}{{"cp-0", cp0}, {"cp-1", corev1.ConditionUnknown}, {"cp-2", corev1.ConditionTrue}} {
		n := w.createNode(ctx, k8s, w.nodeName(cp.name), cp.ready, 10*time.Minute)
		n.Labels = map[string]string{gates.LabelControlPlane: "", "cp-pool": w.ns}
		Expect(k8s.Update(ctx, n)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leases.DefaultNamespace, Name: leases.LeaseName(n.Name)}}
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, lease))).To(Succeed())
		})
		nodes = append(nodes, n)
		w.createMachine(ctx, cp.name, withNodeRef(n.Name), asControlPlane)
	}
	check := &v1alpha1.NodeHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: w.ns + "-cp"},
		Spec: v1alpha1.NodeHealthCheckSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"cp-pool": w.ns}},
			UnhealthyConditions: []v1alpha1.NodeUnhealthyCondition{
				{Type: "Ready", Status: "False", Duration: metav1.Duration{Duration: 5 * time.Minute}}},
			MaxUnhealthy:        ptr.To(intstr.FromString("100%")),
			RemediationTemplate: &v1alpha1.TemplateReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediationTemplate", Name: "reboot", Namespace: w.ns},
		},
	}
	Expect(k8s.Create(ctx, check)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		// Deleted, the check is forgotten, its metrics too: this suite asserts on them.
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, check))).To(Succeed())
		nhcR, err := nhc.New(nhc.Options{Client: k8s, Clock: w.clock, Recorder: w.rec})
		Expect(err).NotTo(HaveOccurred())
		_, err = nhcR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(check)})
		Expect(err).NotTo(HaveOccurred())
	})
	w.createCheck(ctx, "cp", func(mhc *v1alpha1.MachineHealthCheck) {
		mhc.Spec.UnhealthyConditions = []v1alpha1.MachineUnhealthyCondition{
			{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: 5 * time.Minute}}}
		mhc.Spec.MaxUnhealthy = ptr.To(intstr.FromString("100%"))
	})
	return nodes, check
}

// checkersOnOneClaim are a manager's two checkers sharing claim, reading everything live: how to reconcile
// the NodeHealthCheck check and the MachineHealthCheck "cp" of controlPlaneOfBothKinds once.
func (w *world) checkersOnOneClaim(ctx context.Context, claim *gates.ControlPlaneClaim, check *v1alpha1.NodeHealthCheck) (reconcileNHC, reconcileMHC func()) {
	GinkgoHelper()
	nhcR, err := nhc.New(nhc.Options{Client: k8s, Cache: k8s, APIReader: k8s, Clock: w.clock, Recorder: w.rec,
		ResyncPeriod: 24 * time.Hour, ControlPlaneClaim: claim})
	Expect(err).NotTo(HaveOccurred())
	mhcR, err := New(Options{Client: k8s, Reader: k8s, APIReader: k8s, Recorder: w.rec, Clock: w.clock,
		Discovery: mgmtDiscovery, ControlPlaneClaim: claim})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { mhcR.remotes.StopAll() })
	return func() {
			GinkgoHelper()
			_, err := nhcR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(check)})
			Expect(err).NotTo(HaveOccurred())
		}, func() {
			GinkgoHelper()
			_, err := mhcR.Reconcile(ctx, reconcileRequest(w.ns, "cp"))
			Expect(err).NotTo(HaveOccurred())
		}
}

// cpLeaseHolders maps each of nodes whose lease someone holds to its holder.
func cpLeaseHolders(ctx context.Context, nodes []*corev1.Node) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		if h := leaseHolder(ctx, n.Name); h != "" {
			out[n.Name] = h
		}
	}
	return out
}

var _ = Describe("After a restart", func() {
	// The record of who acts on a node is its lease, and a lease runs out while its holder is down: a
	// MachineHealthCheck handed control-plane Machine cp-1 to its owner, the manager was down longer than
	// the lease, and Cluster API went on replacing the Machine meanwhile. A NodeHealthCheck that finds cp-0
	// failing in the restarted manager must not power-cycle it before the MachineHealthCheck has looked
	// once and taken cp-1's lease again: etcd would lose two members at once.
	It("no control-plane remediation starts before every check has looked once and taken its leases again", func(ctx SpecContext) {
		w := newWorld(ctx)
		nodes, check := w.controlPlaneOfBothKinds(ctx, corev1.ConditionTrue)
		cp0, cp1 := nodes[0], nodes[1]
		// A manager's two checkers sharing its claim. Expected: what SetupWithManager registers, this
		// test's checks only (the suite's API server holds other tests' checks).
		checkers := func(expect bool) (reconcileNHC, reconcileMHC func()) {
			claim := &gates.ControlPlaneClaim{}
			if expect {
				for _, list := range []func(context.Context) ([]string, error){
					engine.ClaimChecks(k8s, "NodeHealthCheck", func() client.ObjectList { return &v1alpha1.NodeHealthCheckList{} }),
					engine.ClaimChecks(k8s, "MachineHealthCheck", func() client.ObjectList { return &v1alpha1.MachineHealthCheckList{} }),
				} {
					claim.Expect(func(ctx context.Context) ([]string, error) {
						keys, err := list(ctx)
						return slices.DeleteFunc(keys, func(k string) bool { return !strings.Contains(k, w.ns) }), err
					})
				}
			}
			return w.checkersOnOneClaim(ctx, claim, check)
		}
		validHolder := func(node *corev1.Node) string {
			GinkgoHelper()
			held, err := gates.ListLeases(ctx, k8s, leases.DefaultNamespace)
			Expect(err).NotTo(HaveOccurred())
			if l := held[node.Name]; l.ValidAt(w.clock.Now()) {
				return l.Holder
			}
			return ""
		}

		By("before the outage, once both checks have looked: the MachineHealthCheck hands cp-1 to its owner, holding its lease")
		reconcileNHC, reconcileMHC := checkers(true)
		reconcileNHC()
		reconcileMHC()
		Expect(condition(w.machine(ctx, "cp-1"), clusterv1.MachineOwnerRemediatedCondition)).To(HaveField("Status", metav1.ConditionFalse))
		Expect(validHolder(cp1)).To(Equal("MachineHealthCheck.remediation.metalheal.io-cp"))

		By("the manager is down longer than the lease; meanwhile cp-0 fails too")
		w.clock.Step(defaultLeaseDuration + 5*time.Minute)
		w.setReady(ctx, k8s, cp0, corev1.ConditionFalse, 6*time.Minute)
		Expect(validHolder(cp1)).To(BeEmpty(), "cp-1's lease ran out, though its Machine is still being replaced")

		By("restarted, the NodeHealthCheck looks first: cp-0 waits for the MachineHealthCheck's first look")
		reconcileNHC, reconcileMHC = checkers(true)
		reconcileNHC()
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		Expect(validHolder(cp0)).To(BeEmpty())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(check), check)).To(Succeed())
		Expect(check.Status.UnhealthyNodes).To(ConsistOf(And(HaveField("Name", cp0.Name), HaveField("SkipReason", nhc.SkipControlPlaneBusy),
			HaveField("SkipMessage", ContainSubstring("waiting for MachineHealthCheck "+w.ns+"/cp")))))

		By("the MachineHealthCheck looks and takes cp-1's lease again; the NodeHealthCheck's cp-0 waits for it")
		reconcileMHC()
		Expect(validHolder(cp1)).To(Equal("MachineHealthCheck.remediation.metalheal.io-cp"))
		reconcileNHC()
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		Expect(validHolder(cp0)).To(BeEmpty())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(check), check)).To(Succeed())
		Expect(check.Status.UnhealthyNodes).To(ConsistOf(And(HaveField("Name", cp0.Name), HaveField("SkipReason", nhc.SkipControlPlaneBusy),
			HaveField("SkipMessage", ContainSubstring(cp1.Name)))))
	})
})

var _ = Describe("A control-plane Machine its owner is replacing", func() {
	// Cluster API replaces control-plane Machine cp-1, which a MachineHealthCheck handed over: the old
	// Machine and its Node go, and with the Node its lease; the replacement has no Node until it joins. No
	// lease records the change, and a NodeHealthCheck reads no Machines: one that finds cp-0 failing
	// meanwhile must not power-cycle it (one etcd member joining, another rebooting).
	It("holds a NodeHealthCheck's control-plane starts back until the replacement has joined", func(ctx SpecContext) {
		w := newWorld(ctx)
		nodes, check := w.controlPlaneOfBothKinds(ctx, corev1.ConditionTrue)
		cp0, cp1 := nodes[0], nodes[1]
		reconcileNHC, reconcileMHC := w.checkersOnOneClaim(ctx, &gates.ControlPlaneClaim{}, check)

		By("the MachineHealthCheck hands cp-1 to its owner")
		reconcileMHC()
		Expect(condition(w.machine(ctx, "cp-1"), clusterv1.MachineOwnerRemediatedCondition)).To(HaveField("Status", metav1.ConditionFalse))

		By("its owner deletes cp-1's Machine and Node, the Node's lease with it, and makes a replacement that has not joined yet")
		Expect(k8s.Delete(ctx, w.machine(ctx, "cp-1"))).To(Succeed())
		Expect(k8s.Delete(ctx, cp1)).To(Succeed())
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leases.DefaultNamespace, Name: leases.LeaseName(cp1.Name)}}
		Expect(k8s.Delete(ctx, lease)).To(Succeed()) // the garbage collector's part: the lease is the Node's
		w.createMachine(ctx, "cp-1-new", asControlPlane)
		reconcileMHC()

		By("cp-0 fails: the NodeHealthCheck does not power-cycle it while the replacement has no Node")
		w.setReady(ctx, k8s, cp0, corev1.ConditionFalse, 6*time.Minute)
		reconcileNHC()
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		Expect(cpLeaseHolders(ctx, nodes)).To(BeEmpty())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(check), check)).To(Succeed())
		Expect(check.Status.UnhealthyNodes).To(ConsistOf(And(HaveField("Name", cp0.Name), HaveField("SkipReason", nhc.SkipControlPlaneBusy),
			HaveField("SkipMessage", ContainSubstring("Machine "+w.ns+"/cp-1-new")))))

		By("the replacement joins, healthy: the NodeHealthCheck starts")
		joined := w.createNode(ctx, k8s, w.nodeName("cp-1-new"), corev1.ConditionTrue, 0)
		joined.Labels = map[string]string{gates.LabelControlPlane: "", "cp-pool": w.ns}
		Expect(k8s.Update(ctx, joined)).To(Succeed())
		m := w.machine(ctx, "cp-1-new")
		m.Status.NodeRef.Name = joined.Name
		Expect(k8s.Status().Update(ctx, m)).To(Succeed())
		reconcileMHC()
		reconcileNHC()
		Expect(w.powerCycleRemediations(ctx)).To(ConsistOf(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("name", cp0.Name)))))
	})
})
