package mhc

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/internal/workload"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The node leases of a workload cluster's Nodes are held in that cluster, as the check holds its local
// Nodes' leases in the management cluster: taken before a remediation starts (a worker's
// PowerCycleRemediation: right after its request, engine.LeaseAfter), renewed while it lasts, released
// after, respected when someone else holds them, and the one record both control-plane rules read. Node
// names repeat across clusters: the management cluster's Node of the same name is never leased.
var _ = Describe("Node leases in a workload cluster", func() {
	DescribeTable("the check takes the lease in the workload cluster when it starts, renews it, releases it after",
		func(ctx SpecContext, template, controlPlane bool, atStart func(holder string) leaseAtStart) {
			w := newWorld(ctx)
			w.workloadCluster(ctx, "wl", workloadEnv.KubeConfig)
			starts := w.spyOnStarts()
			// The same Node name in both clusters: healthy here, unresponsive in the workload cluster.
			shared := w.nodeName("shared")
			w.createNode(ctx, k8s, shared, corev1.ConditionTrue, time.Hour)
			remote := w.createNode(ctx, workloadK8s, shared, corev1.ConditionUnknown, time.Hour)
			forgetWorkloadLeases(shared)
			if template {
				w.createTemplate(ctx, "reboot", "reboot")
			}
			w.createCheck(ctx, "remote", func(mhc *v1alpha1.MachineHealthCheck) {
				mhc.Spec.ClusterName = "wl"
				mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "r"}
				if template {
					mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot"))
				}
			})
			opts := []machineOpt{withCluster("wl"), withLabels("pool", "r"), withNodeRef(shared)}
			if controlPlane {
				opts = append(opts, asControlPlane)
			}
			w.createMachine(ctx, "m", opts...)
			holder := checkLeaseHolder("remote")

			By("the lease is held in the workload cluster once the remediation starts")
			takenAt := w.clock.Now()
			w.reconcile(ctx, "remote")
			if template {
				Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))
			} else {
				Expect(condition(w.machine(ctx, "m"), clusterv1.MachineOwnerRemediatedCondition)).To(
					haveCondition(metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
			}
			Expect(starts.all()).To(ConsistOf(atStart(holder)), "the lease's order, in the Node's own cluster")
			l := workloadLease(ctx, shared)
			Expect(l).NotTo(BeNil())
			Expect(l.Spec.HolderIdentity).To(HaveValue(Equal(holder)))
			Expect(l.OwnerReferences).To(ConsistOf(HaveField("UID", remote.UID)), "owned by the workload cluster's Node")
			Expect(l.Spec.RenewTime.Time).To(BeTemporally("==", takenAt.Truncate(time.Microsecond)))
			Expect(leaseHolder(ctx, shared)).To(BeEmpty(), "the management cluster's Node of that name is not leased")
			Eventually(func(g Gomega) {
				res := w.reconcile(ctx, "remote")
				g.Expect(res.RequeueAfter).To(BeNumerically("~", defaultLeaseDuration/2, time.Second), "looks again to renew it at half-time")
			}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())

			By("half the lease later it is renewed, in the workload cluster")
			w.clock.Step(defaultLeaseDuration/2 + time.Second)
			w.reconcile(ctx, "remote")
			l = workloadLease(ctx, shared)
			Expect(l).NotTo(BeNil())
			Expect(l.Spec.HolderIdentity).To(HaveValue(Equal(holder)))
			Expect(l.Spec.RenewTime.Time).To(BeTemporally("==", w.clock.Now().Truncate(time.Microsecond)))
			Expect(leaseHolder(ctx, shared)).To(BeEmpty())

			By("the remediation is over: the lease is released in the workload cluster")
			w.setReady(ctx, workloadK8s, remote, corev1.ConditionTrue, 0)
			if !template {
				// Its owner replaced the Machine: the new one joins as the same Node, healthy.
				Expect(k8s.Delete(ctx, w.machine(ctx, "m"))).To(Succeed())
				w.createMachine(ctx, "m-replacement", withCluster("wl"), withLabels("pool", "r"), withNodeRef(shared))
			}
			Eventually(func(g Gomega) {
				w.reconcile(ctx, "remote")
				g.Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
				g.Expect(workloadLease(ctx, shared)).To(BeNil())
			}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
			Expect(leaseHolder(ctx, shared)).To(BeEmpty())
			Expect(starts.all()).To(HaveLen(1))
		},
		Entry("a worker's PowerCycleRemediation: the request first, its lease right after", true, false,
			func(string) leaseAtStart { return leaseAtStart{} }),
		Entry("a control-plane Machine's request: the lease first", true, true,
			func(holder string) leaseAtStart { return leaseAtStart{Workload: holder} }),
		Entry("the hand-over to the Machine's owner: the lease first", false, false,
			func(holder string) leaseAtStart { return leaseAtStart{Workload: holder} }),
	)

	It("hands a workload Node off while node-maintenance holds its lease there, and acts when it is let go (lease watch)", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.startManager(ctx)
		w.workloadCluster(ctx, "wl", workloadEnv.KubeConfig)
		shared := w.nodeName("held")
		mgmtNode := w.createNode(ctx, k8s, shared, corev1.ConditionTrue, time.Hour)
		remote := w.createNode(ctx, workloadK8s, shared, corev1.ConditionTrue, time.Hour)
		forgetWorkloadLeases(shared)
		Expect(client.IgnoreAlreadyExists(workloadK8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leases.DefaultNamespace}}))).To(Succeed())
		maintenance, err := leases.NewManager(workloadK8s, "node-maintenance", w.clock)
		Expect(err).NotTo(HaveOccurred())
		Expect(maintenance.RequestLease(ctx, remote, time.Hour)).To(Succeed())
		w.createCheck(ctx, "remote", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.ClusterName = "wl"
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "r"}
		})
		w.createMachine(ctx, "m", withCluster("wl"), withLabels("pool", "r"), withNodeRef(shared))

		By("the workload Node fails under maintenance: skipped, LeaseHeldByOther")
		w.setReady(ctx, workloadK8s, remote, corev1.ConditionUnknown, time.Hour)
		Eventually(func(g Gomega) {
			e := entryOf(w.check(ctx, "remote"), "m")
			g.Expect(e).NotTo(BeNil())
			g.Expect(e.SkipReason).To(Equal(v1alpha1.ReasonLeaseHeldByOther))
			g.Expect(e.SkipMessage).To(ContainSubstring(`"node-maintenance"`))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
		Expect(condition(w.machine(ctx, "m"), clusterv1.MachineOwnerRemediatedCondition)).To(BeNil())
		Expect(w.rec.all()).To(ContainElement(And(HaveField("Name", "m"), HaveField("Reason", EventRemediationSkipped),
			HaveField("Note", ContainSubstring("node-maintenance")))))

		By("node-maintenance lets go in the workload cluster: the check acts at once, not at the lease's end an hour on")
		Expect(maintenance.InvalidateLease(ctx, shared)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(w.machine(ctx, "m"), clusterv1.MachineOwnerRemediatedCondition)).To(
				haveCondition(metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
			l := workloadLease(ctx, shared)
			g.Expect(l).NotTo(BeNil())
			g.Expect(l.Spec.HolderIdentity).To(HaveValue(Equal(checkLeaseHolder("remote"))))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
		Expect(leaseHolder(ctx, mgmtNode.Name)).To(BeEmpty(), "the management cluster's Node of that name is not leased")
	})

	It("remediates two failing control-plane Nodes of one workload cluster one at a time, across its checks", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.workloadCluster(ctx, "wl", workloadEnv.KubeConfig)
		var cps []*corev1.Node
		for _, name := range []string{"cp-0", "cp-1", "cp-2"} {
			ready := corev1.ConditionUnknown
			if name == "cp-2" {
				ready = corev1.ConditionTrue
			}
			n := w.createNode(ctx, workloadK8s, w.nodeName(name), ready, time.Hour)
			n.Labels = map[string]string{gates.LabelControlPlane: ""}
			Expect(workloadK8s.Update(ctx, n)).To(Succeed())
			forgetWorkloadLeases(n.Name)
			cps = append(cps, n)
		}
		cp0, cp1, cp2 := cps[0], cps[1], cps[2]
		// The management cluster has a control-plane Node named as the workload cluster's cp-2, under
		// maintenance there: that is another cluster's control plane, and holds up nothing here.
		mgmtCP := w.createNode(ctx, k8s, cp2.Name, corev1.ConditionTrue, time.Hour)
		mgmtCP.Labels = map[string]string{gates.LabelControlPlane: ""}
		Expect(k8s.Update(ctx, mgmtCP)).To(Succeed())
		Expect(w.leaseManager("node-maintenance").RequestLease(ctx, mgmtCP, time.Hour)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
				Namespace: leases.DefaultNamespace, Name: leases.LeaseName(mgmtCP.Name)}}))).To(Succeed())
		})
		for i, check := range []string{"cp-a", "cp-b"} {
			w.createCheck(ctx, check, func(mhc *v1alpha1.MachineHealthCheck) {
				mhc.Spec.ClusterName = "wl"
				mhc.Spec.Selector.MatchLabels = map[string]string{"pool": check}
			})
			w.createMachine(ctx, cps[i].Name, withCluster("wl"), withLabels("pool", check), withNodeRef(cps[i].Name), asControlPlane)
		}

		By("the first check starts cp-0 under its lease in the workload cluster; the second, right after, does not start cp-1")
		w.reconcile(ctx, "cp-a")
		res := w.reconcile(ctx, "cp-b")
		Expect(workloadLeaseHolders(ctx, cps)).To(Equal(map[string]string{cp0.Name: checkLeaseHolder("cp-a")}))
		Expect(condition(w.machine(ctx, cp0.Name), clusterv1.MachineOwnerRemediatedCondition)).To(HaveField("Status", metav1.ConditionFalse))
		Expect(condition(w.machine(ctx, cp1.Name), clusterv1.MachineOwnerRemediatedCondition)).To(BeNil(), "not handed to its owner")
		e := entryOf(w.check(ctx, "cp-b"), cp1.Name)
		Expect(e).To(And(Not(BeNil()), HaveField("SkipReason", string(blockedControlPlaneBusy)), HaveField("SkipMessage", ContainSubstring(cp0.Name))))
		Expect(res.RequeueAfter).To(BeNumerically(">", 0))
		Expect(leaseHolder(ctx, cp0.Name)).To(BeEmpty())
		Expect(leaseHolder(ctx, cp1.Name)).To(BeEmpty())

		By("cp-0 is replaced and its lease released: cp-1 starts")
		w.setReady(ctx, workloadK8s, cp0, corev1.ConditionTrue, 0)
		Expect(k8s.Delete(ctx, w.machine(ctx, cp0.Name))).To(Succeed())
		w.createMachine(ctx, "cp-0-replacement", withCluster("wl"), withLabels("pool", "cp-a"), withNodeRef(cp0.Name), asControlPlane)
		Eventually(func(g Gomega) {
			w.reconcile(ctx, "cp-a")
			g.Expect(workloadLease(ctx, cp0.Name)).To(BeNil())
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
		Eventually(func(g Gomega) {
			w.reconcile(ctx, "cp-b")
			g.Expect(workloadLeaseHolders(ctx, cps)).To(Equal(map[string]string{cp1.Name: checkLeaseHolder("cp-b")}))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
		Expect(condition(w.machine(ctx, cp1.Name), clusterv1.MachineOwnerRemediatedCondition)).To(HaveField("Status", metav1.ConditionFalse))
		Expect(leaseHolder(ctx, cp2.Name)).To(Equal("node-maintenance"), "the management cluster's lease is its own")
	})

	It("does not hold up the checks of another workload cluster while one stops answering", func(ctx SpecContext) {
		w := newWorld(ctx)
		const bound = 3 * time.Second
		clusters := workload.New(workload.Options{Clock: w.clock, CallTimeout: bound})
		DeferCleanup(clusters.StopAll)
		var err error
		w.r, err = New(Options{Client: k8s, Reader: k8s, APIReader: k8s, Recorder: w.rec, Clock: w.clock, Discovery: mgmtDiscovery,
			ResyncPeriod: worldResync, WorkloadClusters: clusters})
		Expect(err).NotTo(HaveOccurred())
		proxy, err := testenv.NewProxy(workloadEnv.KubeConfig)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(proxy.Close)
		throughProxy, err := proxy.Kubeconfig(workloadEnv.KubeConfig)
		Expect(err).NotTo(HaveOccurred())
		// Two workload clusters, each with a failing control-plane Node: "hung" is reached through a proxy
		// that will stop answering, "up" directly. (Both are the suite's workload API server.)
		w.workloadCluster(ctx, "hung", throughProxy)
		w.workloadCluster(ctx, "up", workloadEnv.KubeConfig)
		for _, c := range []string{"hung", "up"} {
			n := w.createNode(ctx, workloadK8s, w.nodeName(c), corev1.ConditionUnknown, time.Hour)
			n.Labels = map[string]string{gates.LabelControlPlane: ""}
			Expect(workloadK8s.Update(ctx, n)).To(Succeed())
			forgetWorkloadLeases(n.Name)
			w.createCheck(ctx, c, func(mhc *v1alpha1.MachineHealthCheck) {
				mhc.Spec.ClusterName = c
				mhc.Spec.Selector.MatchLabels = map[string]string{"pool": c}
			})
			w.createMachine(ctx, c, withCluster(c), withLabels("pool", c), withNodeRef(n.Name), asControlPlane)
		}
		// Connected (and its Nodes cached) before it stops answering.
		Expect(w.r.remotes.Get(ctx, k8s, types.NamespacedName{Namespace: w.ns, Name: "hung"})).Error().NotTo(HaveOccurred())

		By("the hung cluster's check waits on its lease under its cluster's claim; meanwhile the other cluster's check starts")
		proxy.Stall()
		hung := make(chan error, 1)
		go func() {
			defer GinkgoRecover()
			_, err := w.r.Reconcile(ctx, reconcileRequest(w.ns, "hung"))
			hung <- err
		}()
		start := time.Now()
		w.reconcile(ctx, "up")
		Expect(time.Since(start)).To(BeNumerically("<", bound))
		Expect(hung).NotTo(Receive(), "the hung cluster's check is still waiting")
		Expect(condition(w.machine(ctx, "up"), clusterv1.MachineOwnerRemediatedCondition)).To(HaveField("Status", metav1.ConditionFalse))
		Expect(workloadLease(ctx, w.nodeName("up"))).To(HaveField("Spec.HolderIdentity", HaveValue(Equal(checkLeaseHolder("up")))))

		By("the hung cluster's check fails within the call bound, nothing started, and its connection is dropped")
		var hungErr error
		Eventually(hung).WithTimeout(2 * bound).Should(Receive(&hungErr))
		var unreachable *workload.Error
		Expect(errors.As(hungErr, &unreachable)).To(BeTrue(), "a *workload.Error: %v", hungErr)
		Expect(condition(w.machine(ctx, "hung"), clusterv1.MachineOwnerRemediatedCondition)).To(BeNil())
		Expect(workloadLease(ctx, w.nodeName("hung"))).To(BeNil())
		proxy.Resume()
		again, _, err := w.r.remotes.Get(ctx, k8s, types.NamespacedName{Namespace: w.ns, Name: "hung"})
		Expect(err).NotTo(HaveOccurred())
		Expect(again).NotTo(BeNil())
	})
})

// workloadCluster makes Cluster name in the world's namespace, reached through kubeconfig.
func (w *world) workloadCluster(ctx context.Context, name string, kubeconfig []byte) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, newCluster(w.ns, name))).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + workload.KubeconfigSecretSuffix, Namespace: w.ns},
		Data: map[string][]byte{workload.KubeconfigSecretKey: kubeconfig}})).To(Succeed())
}

// workloadLease is node's lease in the workload cluster, nil when there is none.
func workloadLease(ctx context.Context, node string) *coordinationv1.Lease {
	GinkgoHelper()
	l := &coordinationv1.Lease{}
	err := workloadK8s.Get(ctx, types.NamespacedName{Namespace: leases.DefaultNamespace, Name: leases.LeaseName(node)}, l)
	if apierrors.IsNotFound(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	return l
}

// workloadLeaseHolders maps each of nodes whose lease someone holds in the workload cluster to its holder.
func workloadLeaseHolders(ctx context.Context, nodes []*corev1.Node) map[string]string {
	GinkgoHelper()
	out := map[string]string{}
	for _, n := range nodes {
		if l := workloadLease(ctx, n.Name); l != nil && ptr.Deref(l.Spec.HolderIdentity, "") != "" {
			out[n.Name] = *l.Spec.HolderIdentity
		}
	}
	return out
}

// forgetWorkloadLeases deletes the nodes' leases in the workload cluster when the test ends: it runs no
// garbage collector, and a control-plane Node's lease left held would hold up every later test's.
func forgetWorkloadLeases(nodes ...string) {
	DeferCleanup(func(ctx context.Context) {
		for _, n := range nodes {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leases.DefaultNamespace, Name: leases.LeaseName(n)}}
			Expect(client.IgnoreNotFound(workloadK8s.Delete(ctx, l))).To(Succeed())
		}
	})
}

// leaseAtStart is who held the started Node's lease, in the workload and in the management cluster, when a
// remediation started (a request was created, or the Machine handed to its owner).
type leaseAtStart struct {
	Workload, Management string
}

// startSpy records leaseAtStart at each start.
type startSpy struct {
	mu     sync.Mutex
	starts []leaseAtStart
}

func (s *startSpy) all() []leaseAtStart {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.starts)
}

// spyOnStarts makes the world's reconciler write to the management cluster through a client that records,
// as each remediation starts, who holds its Node's lease in either cluster.
func (w *world) spyOnStarts() *startSpy {
	GinkgoHelper()
	spy := &startSpy{}
	base, err := client.NewWithWatch(mgmtCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	record := func(ctx context.Context, node string) {
		var at leaseAtStart
		if l := workloadLease(ctx, node); l != nil {
			at.Workload = ptr.Deref(l.Spec.HolderIdentity, "")
		}
		at.Management = leaseHolder(ctx, node)
		spy.mu.Lock()
		defer spy.mu.Unlock()
		spy.starts = append(spy.starts, at)
	}
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == "PowerCycleRemediation" {
				record(ctx, u.GetAnnotations()[v1alpha1.AnnotationNodeName])
			}
			return c.Create(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if m, ok := obj.(*clusterv1.Machine); ok && meta.IsStatusConditionFalse(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition) {
				prev := &clusterv1.Machine{}
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(m), prev)).To(Succeed())
				if !ownerReplacing(prev) {
					record(ctx, m.Status.NodeRef.Name)
				}
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	w.r.remotes.StopAll()
	w.r, err = New(Options{Client: c, Reader: k8s, APIReader: k8s, Recorder: w.rec, Clock: w.clock, Discovery: mgmtDiscovery,
		ResyncPeriod: worldResync})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { w.r.remotes.StopAll() })
	return spy
}

// startManager runs the world's checks in a manager, as main does, with the resync out of the way: what
// happens is brought by a watch.
func (w *world) startManager(ctx context.Context) {
	GinkgoHelper()
	w.runManager(ctx, testenv.ManagerOptions{}, Options{ResyncPeriod: worldResync})
}

// The check holds its workload Nodes' leases in its lease namespace, and reads them from the shared
// connections' cache: connections that cache another namespace would show it none, so New refuses them.
func TestNewRefusesConnectionsCachingAnotherLeaseNamespace(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	_, err := New(Options{Clock: clk, LeaseNamespace: "maintenance", WorkloadClusters: workload.New(workload.Options{Clock: clk})})
	g.Expect(err).To(MatchError(And(ContainSubstring(`"maintenance"`), ContainSubstring(leases.DefaultNamespace))))
	_, err = New(Options{Clock: clk, LeaseNamespace: "maintenance",
		WorkloadClusters: workload.New(workload.Options{Clock: clk, LeaseNamespace: "maintenance"})})
	g.Expect(err).NotTo(HaveOccurred())
}
