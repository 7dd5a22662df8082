//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
)

// nhcControlPlaneDuration is how long the control-plane scenario's NodeHealthCheck waits before it acts:
// longer than its MachineHealthCheck (conditionDuration), so that the MachineHealthCheck's owner
// remediation takes the first Node.
const nhcControlPlaneDuration = 6 * time.Second

var _ = Describe("Control-plane Nodes under a NodeHealthCheck and a MachineHealthCheck", func() {
	It("are acted on one at a time: the second failing one waits ControlPlaneBusy until the first is released", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "control-plane"
		nodes := pool.take(ctx, group, 3)
		failing := nodes[:2]
		reportOnFailure(start, nodes...)
		ns := namespace(ctx, "e2e-control-plane")
		for _, n := range nodes {
			setControlPlaneRole(ctx, n, true)
			DeferCleanup(func(ctx SpecContext) { setControlPlaneRole(ctx, n, false) })
		}

		By("a NodeHealthCheck power-cycles the three control-plane Nodes; a MachineHealthCheck hands their Machines to their control plane")
		createTemplate(ctx, harness.Namespace, group, remediation())
		createNodeHealthCheck(ctx, group, maxUnhealthy(intstr.FromString("100%")), unhealthyFor(nhcControlPlaneDuration))
		machineOf := map[string]string{} // node → its Machine
		for _, n := range nodes {
			machineOf[n] = createControlPlaneMachine(ctx, ns, n, n)
		}
		mhc := &v1alpha1.MachineHealthCheck{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group},
			Spec: v1alpha1.MachineHealthCheckSpec{
				Selector: metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineControlPlaneLabel: ""}},
				UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
					{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: conditionDuration}},
					{Type: "Ready", Status: "False", Timeout: metav1.Duration{Duration: conditionDuration}},
				},
				MaxUnhealthy: ptr.To(intstr.FromString("100%")),
			},
		}
		Expect(k8s.Create(ctx, mhc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), mhc)).To(Succeed())
			g.Expect(mhc.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(3)))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())

		By("watching, from before the failures, who acts on which control-plane Node at every stored revision")
		acting := &actingRecord{}
		Expect(acting.watch(ctx, ns)).To(Succeed())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				AddReportEntry("who acted on the control-plane Nodes, by revision", acting.dump(nodes))
			}
		})

		By("two of them fail at once")
		for _, n := range failing {
			Expect(h.Sim.InjectFault(n, nodesim.FaultTransient)).To(Succeed())
		}

		By("the MachineHealthCheck hands the first to its owner, holding its lease; the second waits ControlPlaneBusy in both checks")
		var first, second string
		Eventually(func(g Gomega) {
			var marked []string
			for _, n := range failing {
				if ownerRemediating(ctx, g, ns, machineOf[n]) {
					marked = append(marked, n)
				}
			}
			g.Expect(marked).To(HaveLen(1))
			first = marked[0]
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
		second = failing[0]
		if second == first {
			second = failing[1]
		}
		busy := And(HaveField("SkipReason", "ControlPlaneBusy"), HaveField("SkipMessage", ContainSubstring(first)))
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), mhc)).To(Succeed())
			g.Expect(mhc.Status.UnhealthyMachines).To(ContainElement(And(HaveField("Name", machineOf[second]), busy)))
			nhc := &v1alpha1.NodeHealthCheck{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: group}, nhc)).To(Succeed())
			g.Expect(nhc.Status.UnhealthyNodes).To(ContainElement(And(HaveField("Name", second), busy)))
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
		lease, err := nodeLease(ctx, first)
		Expect(err).NotTo(HaveOccurred())
		Expect(lease.Spec.HolderIdentity).To(HaveValue(Equal("MachineHealthCheck.remediation.metalheal.io-" + group)))
		Consistently(func(g Gomega) {
			g.Expect(ownerRemediating(ctx, g, ns, machineOf[second])).To(BeFalse())
			g.Expect(remediationsOf(ctx, second)).To(BeEmpty())
			g.Expect(nodeLease(ctx, second)).To(BeNil())
		}).WithContext(ctx).WithTimeout(4 * time.Second).WithPolling(poll).Should(Succeed())

		By("its control plane replaces the first Machine (a repaired host joins as the same Node): its lease goes, and the second is remediated")
		replaceMachine(ctx, ns, first, machineOf)
		// Whichever check takes the second (each takes the Node's lease first): the NodeHealthCheck
		// power-cycles it, or the MachineHealthCheck hands it to its owner, which replaces it too.
		var holder string
		Eventually(func(g Gomega) {
			holder = acting.firstHolder(second)
			g.Expect(holder).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
		if strings.HasPrefix(holder, "MachineHealthCheck.") {
			Eventually(func(g Gomega) bool { return ownerRemediating(ctx, g, ns, machineOf[second]) }).
				WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(BeTrue())
			replaceMachine(ctx, ns, second, machineOf)
		}
		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), mhc)).To(Succeed())
			g.Expect(mhc.Status.UnhealthyMachines).To(BeEmpty())
			g.Expect(mhc.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(3)))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		Expect(k8s.Delete(ctx, mhc)).To(Succeed())

		By("at every stored revision at most one control-plane Node was acted on, and the second only after the first was released")
		Eventually(func() bool { return acting.quiet(nodes) }).WithContext(ctx).WithTimeout(10*time.Second).WithPolling(poll).
			Should(BeTrue(), func() string { return acting.dump(nodes) })
		fmt.Fprintf(GinkgoWriter, "who acted on the control-plane Nodes, by revision:\n%s", acting.dump(nodes))
		firstSpan, secondSpan := acting.check(nodes)
		Expect(firstSpan.node).To(Equal(first), acting.dump(nodes))
		Expect(secondSpan.node).To(Equal(second), acting.dump(nodes))
		Expect(secondSpan.from).To(BeNumerically(">", firstSpan.to), acting.dump(nodes))
		Expect(resets(nodes[2])).To(BeEmpty())
	}, SpecTimeout(scenarioMax))
})

// setControlPlaneRole gives a Node the control-plane role label, or takes it away.
func setControlPlaneRole(ctx context.Context, name string, on bool) {
	GinkgoHelper()
	node := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	patch := client.MergeFrom(node.DeepCopy())
	if on {
		node.Labels[gates.LabelControlPlane] = ""
	} else {
		delete(node.Labels, gates.LabelControlPlane)
	}
	Expect(k8s.Patch(ctx, node, patch)).To(Succeed())
}

// createControlPlaneMachine creates a control-plane Machine named name on node, controlled by the
// cluster's KubeadmControlPlane (which nothing serves here: no one replaces a Machine but the scenario, and
// the garbage collector leaves a Machine whose owner's kind it cannot resolve), and returns its name.
func createControlPlaneMachine(ctx context.Context, ns, name, node string) string {
	GinkgoHelper()
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.MachineControlPlaneLabel: ""},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "controlplane.cluster.x-k8s.io/v1beta2", Kind: "KubeadmControlPlane",
				Name: "e2e", UID: "5e2ec0de-0000-4000-8000-00000000c0de", Controller: ptr.To(true)}}},
		Spec: machineSpec(name),
	}
	Expect(k8s.Create(ctx, m)).To(Succeed())
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
	Expect(k8s.Status().Update(ctx, m)).To(Succeed())
	return name
}

// ownerRemediating reports whether a Machine was handed to its owner (OwnerRemediated=False).
func ownerRemediating(ctx context.Context, g Gomega, ns, name string) bool {
	m := &clusterv1.Machine{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		return false
	}
	return meta.IsStatusConditionFalse(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition)
}

// replaceMachine does what the control plane does with a Machine handed to it, the way a bare-metal host
// comes back: the host is repaired and its Node Ready, the Machine is deleted and a new one joins as the
// same Node.
func replaceMachine(ctx context.Context, ns, node string, machineOf map[string]string) {
	GinkgoHelper()
	Expect(h.Sim.ClearFault(node)).To(Succeed())
	Eventually(func(g Gomega) {
		n := &corev1.Node{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
		g.Expect(nodeReady(n)).To(Equal(string(corev1.ConditionTrue)))
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	old := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: machineOf[node]}}
	Expect(k8s.Delete(ctx, old)).To(Succeed())
	machineOf[node] = createControlPlaneMachine(ctx, ns, machineOf[node]+"-r", node)
}

// actingRecord records, as watches report them with the revision they were stored at, the writes that
// start or end an action on a Node: its node lease held or released, a remediation request for it created
// or gone, its Machine handed to its owner (OwnerRemediated=False) or not.
type actingRecord struct {
	mu     sync.Mutex
	events []actingEvent
}

// actingEvent is one write: after it, object acts on node or not.
type actingEvent struct {
	rev    int64
	at     time.Time
	object string
	node   string
	acting bool
	// holder is a lease's holder.
	holder string
}

func (e actingEvent) String() string {
	return fmt.Sprintf("rv %-8d %s  %-40s node %-10s acting=%t", e.rev, e.at.Format("15:04:05.000"), e.object, e.node, e.acting)
}

// watch starts informers over the node leases, the remediation requests in the manager's namespace and
// the Machines in ns; it returns once they have synced, and they run until the scenario ends.
func (a *actingRecord) watch(ctx context.Context, ns string) error {
	c, err := ctrlcache.New(h.World.RESTConfig(), ctrlcache.Options{Scheme: k8s.Scheme(), ByObject: map[client.Object]ctrlcache.ByObject{
		&coordinationv1.Lease{}:           {Namespaces: map[string]ctrlcache.Config{leaseNamespace: {}}},
		&v1alpha1.PowerCycleRemediation{}: {Namespaces: map[string]ctrlcache.Config{harness.Namespace: {}}},
		&clusterv1.Machine{}:              {Namespaces: map[string]ctrlcache.Config{ns: {}}},
	}})
	if err != nil {
		return err
	}
	kinds := []struct {
		obj  client.Object
		what func(o client.Object) actingEvent
	}{
		{&coordinationv1.Lease{}, func(o client.Object) actingEvent {
			l := o.(*coordinationv1.Lease)
			holder := ptr.Deref(l.Spec.HolderIdentity, "")
			return actingEvent{object: "lease/" + l.Name, node: strings.TrimPrefix(l.Name, "node-"), acting: holder != "", holder: holder}
		}},
		{&v1alpha1.PowerCycleRemediation{}, func(o client.Object) actingEvent {
			p := o.(*v1alpha1.PowerCycleRemediation)
			node := p.Annotations[v1alpha1.AnnotationNodeName]
			if node == "" {
				node = p.Name
			}
			return actingEvent{object: "pcr/" + p.Name, node: node, acting: true}
		}},
		{&clusterv1.Machine{}, func(o client.Object) actingEvent {
			m := o.(*clusterv1.Machine)
			return actingEvent{object: "machine/" + m.Name, node: m.Status.NodeRef.Name,
				acting: meta.IsStatusConditionFalse(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition)}
		}},
	}
	for _, k := range kinds {
		inf, err := c.GetInformer(ctx, k.obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", k.obj, err)
		}
		record := func(o any, deleted bool) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			obj, ok := o.(client.Object)
			if !ok {
				return
			}
			e := k.what(obj)
			e.rev, _ = strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
			e.at, e.acting = time.Now(), e.acting && !deleted
			a.mu.Lock()
			defer a.mu.Unlock()
			a.events = append(a.events, e)
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { record(o, false) },
			UpdateFunc: func(_, o any) { record(o, false) },
			DeleteFunc: func(o any) { record(o, true) },
		}); err != nil {
			return fmt.Errorf("handler for %T: %w", k.obj, err)
		}
	}
	watchCtx, stop := context.WithCancel(context.Background())
	DeferCleanup(stop)
	go func() { _ = c.Start(watchCtx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the informers did not sync: %w", ctx.Err())
	}
	return nil
}

// sorted returns the events in the order they were stored.
func (a *actingRecord) sorted() []actingEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.events)
	slices.SortStableFunc(out, func(x, y actingEvent) int { return int(x.rev - y.rev) })
	return out
}

// replay applies the events of nodes in stored order, calling at with the Nodes acted on after each.
func (a *actingRecord) replay(nodes []string, at func(e actingEvent, acting []string)) {
	state := map[string]actingEvent{} // object → its last write
	for _, e := range a.sorted() {
		if !slices.Contains(nodes, e.node) {
			continue
		}
		state[e.object] = e
		var acting []string
		for _, s := range state {
			if s.acting && !slices.Contains(acting, s.node) {
				acting = append(acting, s.node)
			}
		}
		slices.Sort(acting)
		at(e, acting)
	}
}

// firstHolder is the holder of the first lease taken on node, "" while none was.
func (a *actingRecord) firstHolder(node string) string {
	for _, e := range a.sorted() {
		if e.node == node && e.holder != "" {
			return e.holder
		}
	}
	return ""
}

// quiet reports whether, as last seen, nothing acts on any of nodes.
func (a *actingRecord) quiet(nodes []string) bool {
	var last []string
	a.replay(nodes, func(_ actingEvent, acting []string) { last = acting })
	return len(last) == 0
}

// span is when a Node was acted on: from the revision that started the first action on it to the one
// after which nothing acted on it any more.
type span struct {
	node     string
	from, to int64
}

// check fails the scenario if, at any stored revision, more than one of nodes was acted on, or if a
// revision is unknown (a deletion learnt from a relist); it returns the spans of the Nodes acted on, in
// the order they were.
func (a *actingRecord) check(nodes []string) (first, second span) {
	GinkgoHelper()
	var spans []span
	var before []string
	a.replay(nodes, func(e actingEvent, acting []string) {
		Expect(e.rev).NotTo(BeZero(), "a write of unknown revision: %s", e)
		Expect(len(acting)).To(BeNumerically("<=", 1), "at rv %d control-plane Nodes %v are acted on at once:\n%s", e.rev, acting, a.dump(nodes))
		for _, n := range acting {
			if !slices.ContainsFunc(spans, func(s span) bool { return s.node == n }) {
				spans = append(spans, span{node: n, from: e.rev})
			}
		}
		for _, n := range before {
			if !slices.Contains(acting, n) {
				spans[slices.IndexFunc(spans, func(s span) bool { return s.node == n })].to = e.rev
			}
		}
		before = acting
	})
	Expect(spans).To(HaveLen(2), "two control-plane Nodes acted on, one after the other:\n%s", a.dump(nodes))
	return spans[0], spans[1]
}

// dump lists the events of nodes in stored order, each with the Nodes acted on after it.
func (a *actingRecord) dump(nodes []string) string {
	var b strings.Builder
	a.replay(nodes, func(e actingEvent, acting []string) { fmt.Fprintf(&b, "%s  → acting on %v\n", e, acting) })
	return b.String()
}
