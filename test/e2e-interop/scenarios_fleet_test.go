//go:build interop

package interop

import (
	"context"
	"fmt"
	"slices"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// Cluster API's usual topology: the Machines in the management cluster (the world), the Nodes in a
// workload cluster with its own API server, reached through the Cluster's kubeconfig Secret, whose Node
// names repeat the management cluster's. Cluster API's real manager connects its cluster cache through
// that Secret and sets the Machines' nodeRefs from the workload Nodes' providerIDs; metalheal runs under
// config/default plus what config/cluster-api adds in the Clusters' namespace.
var _ = Describe("A Cluster API management cluster and a separate workload cluster", func() {
	It("has Cluster API's MachineHealthCheck and metalheal's each power-cycle a hung workload host, never the management host of the same name (scenario 6)", func(ctx SpecContext) {
		// Two management Nodes, healthy throughout: the workload cluster's hung Nodes take their names.
		namesakes := pool.take(ctx, "fleet-namesakes", 2)
		theirsNode, oursNode := namesakes[0], namesakes[1]
		const cpNode = "control-plane-0"

		By("starting a workload cluster whose Nodes are named after management Nodes; the manager may read its kubeconfig Secret as config/cluster-api grants")
		Expect(h.GrantClusterNamespace(ctx, fleetNamespace)).To(Succeed())
		wcs, err := h.StartWorkloadClusters(ctx, harness.FleetOptions{Namespace: fleetNamespace, SkipClusterObjects: true,
			Clusters: []harness.Workload{{Name: "edge", Nodes: []string{cpNode, theirsNode, oursNode}}}})
		Expect(err).NotTo(HaveOccurred())
		wc := wcs[0]
		DeferCleanup(func(ctx SpecContext) { Expect(wc.Stop(ctx)).To(Succeed()) })
		AddReportEntry("workload cluster "+wc.Name, fmt.Sprintf("kubectl --kubeconfig=%s (logs in %s)", wc.World.Kubeconfig(), wc.World.LogDir()))
		resetsBefore := map[string]int{}
		for _, node := range namesakes {
			resetsBefore[node] = len(resets(node))
		}
		mgmtMarks := watchNodeMarks(ctx, h.World.RESTConfig())
		edgeMarks := watchNodeMarks(ctx, wc.World.RESTConfig())

		By("Cluster API reaches the workload cluster: its Machines get their nodeRefs from the workload Nodes' providerIDs")
		cluster := standInCluster(ctx, fleetNamespace, wc.Name, wc.World.RESTConfig().Host) // torn down before the cluster stops
		machineOf(ctx, fleetNamespace, wc.Name, wc.MachineName(cpNode), cpNode, wc.ProviderID(cpNode),
			map[string]string{clusterv1.MachineControlPlaneLabel: ""})
		waitControlPlaneInitialized(ctx, cluster)
		theirs := machineOf(ctx, fleetNamespace, wc.Name, wc.MachineName(theirsNode), theirsNode, wc.ProviderID(theirsNode),
			map[string]string{roleLabel: "theirs"})
		ours := machineOf(ctx, fleetNamespace, wc.Name, wc.MachineName(oursNode), oursNode, wc.ProviderID(oursNode),
			map[string]string{roleLabel: "ours"})
		controlledByMachineSet(ctx, theirs, map[string]string{roleLabel: "theirs"})
		controlledByMachineSet(ctx, ours, map[string]string{roleLabel: "ours"})

		By("Cluster API's MachineHealthCheck checks one Machine, metalheal's the other, both with one PowerCycleRemediationTemplate")
		powerCycleTemplate(ctx, fleetNamespace, "power-cycle", reboot(), nil)
		templateRef := v1alpha1.TemplateReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediationTemplate", Name: "power-cycle"}
		capiMHC := clusterAPIHealthCheck(ctx, fleetNamespace, wc.Name, "theirs", "theirs", clusterv1.MachineHealthCheckRemediationTemplateReference{
			APIVersion: templateRef.APIVersion, Kind: templateRef.Kind, Name: templateRef.Name})
		ourMHC := &v1alpha1.MachineHealthCheck{
			ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, Name: "ours"},
			Spec: v1alpha1.MachineHealthCheckSpec{
				ClusterName: wc.Name,
				Selector:    metav1.LabelSelector{MatchLabels: map[string]string{roleLabel: "ours"}},
				UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
					{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: unhealthy}},
					{Type: "Ready", Status: "False", Timeout: metav1.Duration{Duration: unhealthy}},
				},
				MaxUnhealthy:        ptrIntOrString(intstr.FromString("100%")),
				RemediationTemplate: &templateRef,
			},
		}
		create(ctx, ourMHC)
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(capiMHC), capiMHC)).To(Succeed())
			g.Expect(capiMHC.Status.ExpectedMachines).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(capiMHC.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(1)), "Cluster API reads the workload Node healthy")
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ourMHC), ourMHC)).To(Succeed())
			g.Expect(ourMHC.Status.ExpectedMachines).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(ourMHC.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(1)), "metalheal reads the workload Node healthy")
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())

		By("the kubelets of the workload cluster's " + theirsNode + " and " + oursNode + " hang")
		breakWorkloadNode(ctx, wc, theirsNode)
		breakWorkloadNode(ctx, wc, oursNode)

		By("each check asks for a power cycle of its Machine; metalheal places both requests in the workload cluster, on that cluster's BMCs")
		// The two requests need not live at the same time: Cluster API's check looks at most every 15s.
		theirsKey := client.ObjectKey{Namespace: fleetNamespace, Name: theirs.Name}
		oursKey := client.ObjectKey{Namespace: fleetNamespace, Name: ours.Name}
		seen := map[client.ObjectKey]*v1alpha1.PowerCycleRemediation{}
		Eventually(func(g Gomega) {
			for _, key := range []client.ObjectKey{theirsKey, oursKey} {
				if seen[key] != nil {
					continue
				}
				p := &v1alpha1.PowerCycleRemediation{}
				err := k8s.Get(ctx, key, p)
				if apierrors.IsNotFound(err) {
					continue
				}
				g.Expect(err).NotTo(HaveOccurred())
				if p.Status.BMCName != "" { // chosen once the Node's cluster is known
					seen[key] = p
				}
			}
			g.Expect(seen).To(HaveKey(theirsKey), "Cluster API's request with its BMC chosen")
			g.Expect(seen).To(HaveKey(oursKey), "metalheal's request with its BMC chosen")
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
		byCAPI, byUs := seen[theirsKey], seen[oursKey]
		Expect(byCAPI.OwnerReferences).To(ConsistOf(And(HaveField("Kind", "Machine"), HaveField("UID", theirs.UID))), "Cluster API's request")
		Expect(byCAPI.Annotations).NotTo(HaveKey(v1alpha1.AnnotationNodeName), "Cluster API names no node: metalheal follows the Machine's nodeRef")
		Expect(byUs.OwnerReferences).To(ContainElement(And(HaveField("Kind", "Machine"), HaveField("UID", ours.UID))), "metalheal's request")
		Expect(byCAPI.Status).To(And(HaveField("ClusterName", wc.Name), HaveField("BMCName", wc.BMCName(theirsNode))), "Cluster API's request")
		Expect(byUs.Status).To(And(HaveField("ClusterName", wc.Name), HaveField("BMCName", wc.BMCName(oursNode))), "metalheal's request")

		By("both workload hosts are power-cycled, their Nodes come back Ready, and each check deletes its request")
		for _, key := range []client.ObjectKey{theirsKey, oursKey} {
			Eventually(func(g Gomega) {
				p := &v1alpha1.PowerCycleRemediation{}
				err := k8s.Get(ctx, key, p)
				g.Expect(client.IgnoreNotFound(err)).To(Succeed())
				g.Expect(err).To(HaveOccurred(), "request %s is still there: phase %q, finalizers %v", key.Name, p.Status.Phase, p.Finalizers)
			}).WithContext(ctx).WithTimeout(remedyWait).WithPolling(poll).Should(Succeed())
		}
		for _, node := range []string{theirsNode, oursNode} {
			r, err := h.Mock.Resets(wc.SystemID(node))
			Expect(err).NotTo(HaveOccurred())
			Expect(r).To(Equal([]string{"ForceOff", "On"}), "the resets of the workload host %s", wc.Host(node))
			expectSettledIn(ctx, wc, node)
			Expect(edgeMarks.of(node)).To(ContainElement("taint "+v1alpha1.TaintOutOfService), "the out-of-service taint came to the workload Node %s", node)
		}
		r, err := h.Mock.Resets(wc.SystemID(cpNode))
		Expect(err).NotTo(HaveOccurred())
		Expect(r).To(BeEmpty(), "the workload control-plane host")
		Expect(edgeMarks.of(cpNode)).To(BeEmpty())

		By("the management hosts of the same names were never touched: no power change, taint or cordon, and no lease at the end")
		for _, node := range namesakes {
			Expect(resets(node)[resetsBefore[node]:]).To(BeEmpty(), "the management host %s", node)
			Expect(mgmtMarks.of(node)).To(BeEmpty(), "the management Node %s", node)
		}
		expectSettled(ctx, namesakes...)

		By("both Machines' HealthCheckSucceeded are True again")
		Eventually(func(g Gomega) {
			for _, m := range []*clusterv1.Machine{theirs, ours} {
				c, err := machineCondition(ctx, client.ObjectKeyFromObject(m), clusterv1.MachineHealthCheckSucceededCondition)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(c).NotTo(BeNil(), "Machine %s", m.Name)
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "Machine %s: %s", m.Name, c.Message)
			}
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	}, SpecTimeout(scenarioMax))
})

// breakWorkloadNode hangs the kubelet of a workload cluster's Node and, at the end of the scenario, repairs
// it: the fault cleared, the host powered on.
func breakWorkloadNode(ctx context.Context, wc *harness.WorkloadCluster, node string) {
	GinkgoHelper()
	Expect(wc.Sim.InjectFault(node, nodesim.FaultTransient)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(wc.Sim.ClearFault(node)).To(Succeed())
		if p, err := h.Mock.PowerState(wc.SystemID(node)); err == nil && p != redfishmock.PowerOn {
			Expect(h.Mock.SetPowerState(wc.SystemID(node), redfishmock.PowerOn)).To(Succeed())
		}
	})
}

// expectSettledIn waits for a workload cluster's Node to be healthy again: Ready, none of the
// remediator's taints, not cordoned, its host powered on and its kubelet running, its lease released.
func expectSettledIn(ctx context.Context, wc *harness.WorkloadCluster, node string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		n := &corev1.Node{}
		g.Expect(wc.Client.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
		g.Expect(nodeReady(n)).To(Equal(corev1.ConditionTrue), "%s is not Ready", wc.Host(node))
		g.Expect(taintKeys(n)).NotTo(HaveKey(v1alpha1.TaintRemediation), "%s keeps the remediation taint", wc.Host(node))
		g.Expect(taintKeys(n)).NotTo(HaveKey(v1alpha1.TaintOutOfService), "%s keeps the out-of-service taint", wc.Host(node))
		g.Expect(n.Spec.Unschedulable).To(BeFalse(), "%s is cordoned", wc.Host(node))
		power, err := h.Mock.PowerState(wc.SystemID(node))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(power).To(Equal(redfishmock.PowerOn), "the host of %s is not powered on", wc.Host(node))
		g.Expect(wc.Sim.State(node)).To(Equal(nodesim.StateRunning), "the kubelet of %s", wc.Host(node))
		lease := &coordinationv1.Lease{}
		err = wc.Client.Get(ctx, client.ObjectKey{Namespace: harness.LeaseNamespace, Name: "node-" + node}, lease)
		if !apierrors.IsNotFound(err) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(lease.Spec.HolderIdentity).To(Or(BeNil(), HaveValue(BeEmpty())), "the lease of %s is still held", wc.Host(node))
		}
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
}

// nodeMarks is what a watch of one cluster's Nodes saw of metalheal's marks on each Node at any moment
// since it started: "taint <key>" for each of the remediator's taints, "cordon" for spec.unschedulable.
type nodeMarks struct {
	mu   sync.Mutex
	seen map[string][]string
}

// watchNodeMarks starts recording the marks on a cluster's Nodes; it stops at the end of the scenario.
func watchNodeMarks(ctx context.Context, cfg *rest.Config) *nodeMarks {
	GinkgoHelper()
	m := &nodeMarks{seen: map[string][]string{}}
	c, err := ctrlcache.New(cfg, ctrlcache.Options{Scheme: harness.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	inf, err := c.GetInformer(ctx, &corev1.Node{})
	Expect(err).NotTo(HaveOccurred())
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { m.record(o.(*corev1.Node)) },
		UpdateFunc: func(_, o any) { m.record(o.(*corev1.Node)) },
	})
	Expect(err).NotTo(HaveOccurred())
	watchCtx, stop := context.WithCancel(context.Background())
	DeferCleanup(stop)
	go func() { _ = c.Start(watchCtx) }()
	Expect(c.WaitForCacheSync(ctx)).To(BeTrue(), "the Node watch of %s did not sync", cfg.Host)
	return m
}

func (m *nodeMarks) record(n *corev1.Node) {
	var marks []string
	for _, t := range n.Spec.Taints {
		if t.Key == v1alpha1.TaintRemediation || t.Key == v1alpha1.TaintOutOfService {
			marks = append(marks, "taint "+t.Key)
		}
	}
	if n.Spec.Unschedulable {
		marks = append(marks, "cordon")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mark := range marks {
		if !slices.Contains(m.seen[n.Name], mark) {
			m.seen[n.Name] = append(m.seen[n.Name], mark)
		}
	}
}

// of lists the marks a Node carried, in the order first seen.
func (m *nodeMarks) of(node string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.seen[node])
}
