package powercycle

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/internal/workload"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The remediator's scenarios (remediation_test.go), continued: Nodes of other clusters, and a Node in a
// workload cluster.
var _ = Describe("Remediation", func() {
	// A management cluster whose healthy worker-1 shares its name with a hung worker-1 of a Cluster API
	// workload cluster: a request for the workload Machine never acts on the management host, whether our
	// MachineHealthCheck (node-name annotation) or Cluster API's (only the owning Machine) created it. When
	// the workload cluster cannot be reached (here: its kubeconfig is unusable) the request waits, saying so;
	// when the manager may not read the kubeconfig Secret of an existing Cluster it is refused for good. Either
	// way nothing is touched (no BMC call, no taint, no lease, no finalizer), and one warning event says why.
	// A self-hosted management cluster (Nodes carrying their Machines' providerIDs, or a kubeconfig reaching
	// the very same Node) is served as before, as is a Machine without Cluster or kubeconfig.
	type nodeOfAnotherClusterCase struct {
		annotated  bool   // the request names its node (our MachineHealthCheck), or only its Machine (Cluster API)
		kubeconfig bool   // the Machine's cluster has a <cluster>-kubeconfig Secret
		nodeID     string // the providerID of this cluster's Node of the Machine's node name
		unreadable bool   // the manager may not read Secrets in the Machine's namespace
		reach      bool   // the remediator reaches workload clusters, and the kubeconfig is this cluster's own
		noCluster  bool   // the Machine's Cluster object does not exist
		// want is what happens: served (here), waiting (the workload cluster unreachable) or refused.
		want string
	}
	DescribeTable("node of another cluster is refused", func(ctx SpecContext, tc nodeOfAnotherClusterCase) {
		w, hosts := fakeHosts(ctx)
		if tc.unreadable {
			w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.APIReader = w.secretsForbidden() }
		}
		kubeconfig := []byte("apiVersion: v1\nkind: Config\n")
		if tc.reach {
			clusters := workload.New(workload.Options{Clock: w.clock})
			DeferCleanup(clusters.StopAll)
			w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.WorkloadClusters = clusters }
			kubeconfig = api.kubeconfig
		}
		node := w.fakeHost(ctx, "worker-1", nil)
		n := w.getNode(ctx, node)
		n.Spec.ProviderID = tc.nodeID
		w.must(w.c.Update(ctx, n))
		w.setReady(ctx, node, corev1.ConditionTrue)
		if tc.kubeconfig {
			w.must(w.c.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "workload-kubeconfig", Namespace: w.ns},
				Data:       map[string][]byte{"value": kubeconfig},
			}))
		}
		if !tc.noCluster {
			w.must(w.c.Create(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "workload", Namespace: w.ns},
				Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "Metal3Cluster", Name: "workload"}}}))
		}
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: "workload-md-0-x7k2p", Namespace: w.ns},
			Spec: clusterv1.MachineSpec{
				ClusterName:       "workload",
				ProviderID:        "metal3://workload-worker-1",
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: new("bootstrap-data")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "Metal3Machine", Name: "workload-md-0-x7k2p"},
			},
		}
		w.must(w.c.Create(ctx, machine))
		machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
		w.must(w.c.Status().Update(ctx, machine))
		var annotations map[string]string
		if tc.annotated {
			annotations = map[string]string{v1alpha1.AnnotationNodeName: node}
		}
		key := w.remediation(ctx, machine.Name, spec(reboot, 1), annotations, metav1.OwnerReference{
			APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID})
		host := hosts.Driver(fakeAddress(node))

		if tc.want == "served" {
			w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilTerminal)
			p := w.get(ctx, key)
			Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonNodeReady, metav1.ConditionTrue))
			Expect(powerOps(host)).To(Equal([]string{"Off", "On"}), "the Machine's own host was power-cycled")
			Expect(p.Status.ClusterName).To(BeEmpty(), "the Node is this cluster's")
			Expect(w.countEvents("Warning " + EventNodeNotInThisCluster)).To(BeZero())
			return
		}

		r := w.reconciler()
		var results []ctrl.Result
		for range 3 { // its creation, and whatever else brings it back
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			Expect(err).NotTo(HaveOccurred())
			results = append(results, res)
			w.clock.Step(time.Minute)
		}
		Expect(host.Calls()).To(BeEmpty(), "the management host's BMC was never called")
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.getNode(ctx, node).Spec.Unschedulable).To(BeFalse())
		Expect(w.lease(ctx, node)).To(BeNil())
		p := w.get(ctx, key)
		Expect(p.Finalizers).NotTo(ContainElement(v1alpha1.FinalizerPowerCycle))
		Expect(p.Status.Attempts).To(BeEmpty())
		Expect(r.Remediating(ctx, node)).To(BeFalse(), "it holds no host of this cluster")
		events := w.drainEvents()
		Expect(events).To(HaveLen(1), "one warning, and nothing else announced")
		if tc.want == "waiting" {
			Expect(conditionOf(p, v1alpha1.ConditionWorkloadClusterReachable)).To(
				MatchFields(v1alpha1.ReasonWorkloadClusterUnreachable, metav1.ConditionFalse))
			Expect(conditionOf(p, v1alpha1.ConditionWorkloadClusterReachable).Message).To(ContainSubstring("workload"))
			Expect(conditionOf(p, v1alpha1.ConditionSucceeded).Status).To(BeEmpty(), "not refused: it waits for the cluster")
			Expect(events[0]).To(HavePrefix("Warning " + EventWorkloadClusterUnreachable + " "))
			for _, res := range results {
				Expect(res.RequeueAfter).To(BeNumerically(">", 0), "it looks again")
			}
		} else {
			Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
			Expect(conditionOf(p, v1alpha1.ConditionProcessing)).To(MatchFields(v1alpha1.ReasonNodeNotInThisCluster, metav1.ConditionFalse))
			Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonNodeNotInThisCluster, metav1.ConditionFalse))
			Expect(conditionOf(p, v1alpha1.ConditionProcessing).Message).To(And(
				ContainSubstring("workload"), ContainSubstring(machine.Name), ContainSubstring(node), ContainSubstring("Nothing was done")))
			Expect(events[0]).To(HavePrefix("Warning " + EventNodeNotInThisCluster + " "))
			Expect(results).To(HaveEach(ctrl.Result{}), "nothing to come back for")
		}

		// Deleted, it goes at once: no clean-up touches the host.
		w.must(w.c.Delete(ctx, p))
		steps := w.drive(ctx, key, same(r), nil, untilSettled)
		Expect(steps[len(steps)-1].gone).To(BeTrue())
		Expect(host.Calls()).To(BeEmpty())
	},
		Entry("our MachineHealthCheck's request for a workload cluster's Node, which cannot be reached", nodeOfAnotherClusterCase{
			annotated: true, kubeconfig: true, nodeID: "metal3://management-worker-1", want: "waiting"}),
		Entry("Cluster API's request for a workload cluster's Node, which cannot be reached", nodeOfAnotherClusterCase{
			kubeconfig: true, nodeID: "metal3://management-worker-1", want: "waiting"}),
		Entry("a Node here without a providerID, the workload cluster unreachable", nodeOfAnotherClusterCase{
			annotated: true, kubeconfig: true, want: "waiting"}),
		Entry("the kubeconfig Secret not readable, and the providerIDs differ", nodeOfAnotherClusterCase{
			annotated: true, kubeconfig: true, nodeID: "metal3://management-worker-1", unreadable: true, want: "refused"}),
		Entry("a self-hosted management cluster: the Node carries the Machine's providerID", nodeOfAnotherClusterCase{
			kubeconfig: true, nodeID: "metal3://workload-worker-1", want: "served"}),
		Entry("the kubeconfig Secret not readable, and no Cluster: the Machine's Nodes are this cluster's", nodeOfAnotherClusterCase{
			annotated: true, kubeconfig: true, nodeID: "metal3://management-worker-1", unreadable: true, noCluster: true, want: "served"}),
		Entry("the kubeconfig Secret not readable, and the Node carries the Machine's providerID", nodeOfAnotherClusterCase{
			annotated: true, kubeconfig: true, nodeID: "metal3://workload-worker-1", unreadable: true, want: "served"}),
		Entry("a self-hosted management cluster whose kubeconfig reaches this very Node, without providerIDs", nodeOfAnotherClusterCase{
			annotated: true, kubeconfig: true, reach: true, want: "served"}),
		Entry("no kubeconfig Secret: the Machine's Nodes are in this cluster", nodeOfAnotherClusterCase{
			annotated: true, nodeID: "metal3://management-worker-1", want: "served"}),
	)

	// A Cluster API management cluster whose Machine's Node, worker-1, lives in workload cluster edge-a,
	// beside a healthy worker-1 of the management cluster itself: the remediator reaches edge-a through its
	// kubeconfig Secret and acts there. The BMC that names edge-a's worker-1 powers that host off and on;
	// the out-of-service taint comes and goes on edge-a's Node, and the node lease is held in edge-a; the
	// management cluster's worker-1, its host and its lease namespace are never touched. When edge-a's API
	// server cannot be reached the request says so and waits, without a second power request; it goes on
	// when the cluster answers.
	It("node in a workload cluster", func(ctx SpecContext) {
		wl, direct := workloadAPIServer()
		api := newAPIProxy(direct) // the manager reaches edge-a through it: cut, edge-a's API server is gone
		kubeconfig := api.kubeconfig(direct)
		w, hosts := fakeHosts(ctx)
		clusters := workload.New(workload.Options{Clock: w.clock, SyncTimeout: 2 * time.Second})
		DeferCleanup(clusters.StopAll)
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.WorkloadClusters = clusters }

		// The management cluster's own worker-1: healthy, with a BMC that names no cluster.
		node := w.fakeHost(ctx, "worker-1", nil)
		mgmtNode := w.getNode(ctx, node)
		mgmtNode.Spec.ProviderID = "metal3://management-worker-1"
		w.must(w.c.Update(ctx, mgmtNode))
		w.setReady(ctx, node, corev1.ConditionTrue)
		mgmtHost := hosts.Driver(fakeAddress(node))

		// edge-a's worker-1: hung; its BMC names the cluster.
		edge := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: corev1.NodeSpec{ProviderID: "metal3://edge-a-worker-1"}}
		w.must(wl.Create(ctx, edge))
		long := metav1.NewTime(epoch.Add(-time.Hour))
		edge.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastHeartbeatTime: long, LastTransitionTime: long}}
		w.must(wl.Status().Update(ctx, edge))
		edgeAddress := fakeAddress("edge-a-" + node)
		b := &v1alpha1.BMC{
			ObjectMeta: metav1.ObjectMeta{Name: "edge-a-" + node, Namespace: w.ns},
			Spec: v1alpha1.BMCSpec{NodeName: node, Cluster: &v1alpha1.ClusterReference{Namespace: w.ns, Name: "edge-a"},
				Address: edgeAddress, CredentialsSecretRef: v1alpha1.SecretReference{Name: "edge-a-" + node + "-bmc-credentials"}},
		}
		w.must(w.c.Create(ctx, b))
		w.secret(ctx, b.Spec.CredentialsSecretRef.Name, credentials)
		w.waitCached(ctx, b, func(client.Object) bool { return true })
		edgeHost := hosts.Driver(edgeAddress)

		w.must(w.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "edge-a-kubeconfig", Namespace: w.ns},
			Data: map[string][]byte{"value": kubeconfig}}))
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: "edge-a-md-0-x7k2p", Namespace: w.ns},
			Spec: clusterv1.MachineSpec{ClusterName: "edge-a", ProviderID: "metal3://edge-a-worker-1",
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: new("bootstrap-data")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "Metal3Machine", Name: "edge-a-md-0-x7k2p"}},
		}
		w.must(w.c.Create(ctx, machine))
		machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
		w.must(w.c.Status().Update(ctx, machine))
		key := w.remediation(ctx, machine.Name, spec(reboot, 1), map[string]string{v1alpha1.AnnotationNodeName: node},
			metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID})

		edgeTaints := func() []string { // the remediation taints of edge-a's worker-1
			n := &corev1.Node{}
			w.must(wl.Get(ctx, client.ObjectKey{Name: node}, n))
			var keys []string
			for _, t := range n.Spec.Taints {
				if _, ours := taintEffects[t.Key]; ours {
					keys = append(keys, t.Key)
				}
			}
			return keys
		}
		edgeLease := func() *coordinationv1.Lease {
			l := &coordinationv1.Lease{}
			if err := wl.Get(ctx, client.ObjectKey{Namespace: leases.DefaultNamespace, Name: leases.LeaseName(node)}, l); apierrors.IsNotFound(err) {
				return nil
			} else {
				w.must(err)
			}
			return l
		}
		r := w.reconciler()

		// Fenced and powered on again: the out-of-service taint is on edge-a's worker-1 until it is Ready, and
		// edge-a holds the lease.
		w.drive(ctx, key, same(r), nil, untilPhase(v1alpha1.PhaseWaitingForNode))
		p := w.get(ctx, key)
		Expect(p.Status.ClusterName).To(Equal("edge-a"))
		Expect(p.Status.BMCName).To(Equal(b.Name))
		Expect(edgeTaints()).To(ContainElement(corev1.TaintNodeOutOfService))
		l := edgeLease()
		Expect(l).NotTo(BeNil(), "the lease is held in the Node's cluster (its namespace made there on first use)")
		Expect(*l.Spec.HolderIdentity).To(Equal("PowerCycleRemediation-" + machine.Name))

		// The workload cluster's API server stops answering while the host boots: the request says so and
		// waits, past its powerOnTimeoutSeconds, with no power request.
		api.cut()
		before := powerOps(edgeHost)
		Eventually(func(g Gomega) {
			_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(conditionOf(w.get(ctx, key), v1alpha1.ConditionWorkloadClusterReachable)).To(
				MatchFields(v1alpha1.ReasonWorkloadClusterUnreachable, metav1.ConditionFalse))
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		w.clock.Step(10 * time.Minute)
		for range 2 {
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			Expect(err).NotTo(HaveOccurred())
			Expect(res.RequeueAfter).To(BeNumerically(">", 0))
			w.clock.Step(res.RequeueAfter)
		}
		p = w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseWaitingForNode), "nothing is decided of a Node that cannot be seen")
		Expect(powerOps(edgeHost)).To(Equal(before), "no power request while the Node cannot be seen")
		Expect(w.countEvents("Warning "+EventWorkloadClusterUnreachable)).To(Equal(1), "one warning for the change")

		// It answers again, the host having booted: edge-a's Node is Ready, its taints and lease go.
		api.restore()
		n := &corev1.Node{}
		w.must(wl.Get(ctx, client.ObjectKey{Name: node}, n))
		now := metav1.NewTime(w.clock.Now())
		n.Status.Conditions[0].Status, n.Status.Conditions[0].LastHeartbeatTime, n.Status.Conditions[0].LastTransitionTime = corev1.ConditionTrue, now, now
		w.must(wl.Status().Update(ctx, n))
		w.drive(ctx, key, same(r), nil, untilTerminal)
		p = w.get(ctx, key)
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonNodeReady, metav1.ConditionTrue))
		Expect(conditionOf(p, v1alpha1.ConditionWorkloadClusterReachable)).To(MatchFields(v1alpha1.ReasonAsExpected, metav1.ConditionTrue))
		Expect(powerOps(edgeHost)).To(Equal([]string{"Off", "On"}), "edge-a's worker-1 was power-cycled once")
		Expect(edgeTaints()).To(BeEmpty())

		w.must(w.c.Delete(ctx, p))
		steps := w.drive(ctx, key, same(r), nil, untilSettled)
		Expect(steps[len(steps)-1].gone).To(BeTrue())
		if l := edgeLease(); l != nil {
			Expect(l.Spec.HolderIdentity).To(Or(BeNil(), HaveValue(BeEmpty())), "the lease was released in edge-a")
		}

		// The management cluster's worker-1 was never touched.
		Expect(mgmtHost.Calls()).To(BeEmpty())
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
		Expect(powerOps(edgeHost)).To(Equal([]string{"Off", "On"}))
	})
})

// secretsForbidden is a reader straight from the API server that may not read Secrets, as the manager
// under config/default in a Cluster API namespace.
func (w *world) secretsForbidden() client.Reader {
	direct, err := client.NewWithWatch(w.api.cfg, client.Options{Scheme: w.api.scheme})
	w.must(err)
	return interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, key.Name, nil)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

// workloadAPIServer is a second, bare API server: a Cluster API workload cluster (without the lease
// namespace, as Cluster API makes one), reached through the kubeconfig it returns.
func workloadAPIServer() (client.Client, []byte) {
	GinkgoHelper()
	env, err := testenv.Up(testenv.EnvOptions{Options: testenv.Options{SkipCRDs: true}, AddToScheme: []func(*runtime.Scheme) error{clusterv1.AddToScheme}})
	if err != nil {
		Fail(fmt.Sprintf("starting the workload cluster's API server: %v", err))
	}
	DeferCleanup(func() { _ = env.Stop() })
	return env.Client, env.KubeConfig()
}

// apiProxy forwards TCP connections to an API server until it is cut: then it closes those open and
// refuses new ones, as an API server that stopped does; restored, it listens at the same address again.
type apiProxy struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

// newAPIProxy forwards to the API server of kubeconfig (its current cluster's server) until t ends.
func newAPIProxy(kubeconfig []byte) *apiProxy {
	GinkgoHelper()
	cfg, err := clientcmd.Load(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	u, err := url.Parse(cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server)
	Expect(err).NotTo(HaveOccurred())
	p := &apiProxy{target: u.Host}
	Expect(p.listen("127.0.0.1:0")).To(Succeed())
	DeferCleanup(p.cut)
	return p
}

// kubeconfig is kubeconfig with its server the proxy (TLS passes through it: the certificates hold).
func (p *apiProxy) kubeconfig(kubeconfig []byte) []byte {
	GinkgoHelper()
	cfg, err := clientcmd.Load(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	for _, c := range cfg.Clusters {
		c.Server = "https://" + p.addr
	}
	out, err := clientcmd.Write(*cfg)
	Expect(err).NotTo(HaveOccurred())
	return out
}

func (p *apiProxy) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	return nil
}

func (p *apiProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// cut stops the proxy: the connections through it are closed, new ones refused.
func (p *apiProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// restore listens again, at the same address.
func (p *apiProxy) restore() {
	if err := p.listen(p.addr); err != nil {
		panic(fmt.Sprintf("restoring the API server proxy at %s: %v", p.addr, err))
	}
}
