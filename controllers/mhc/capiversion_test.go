package mhc

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/metrics"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/pkg/leases"
)

// apiServer is one management cluster of the version table: its client and the Cluster API version it
// serves.
type apiServer struct {
	version string
	cfg     *rest.Config
	c       client.Client
	disco   Discovery
}

// Two more API servers: one with Cluster API v1.10's CRDs (v1beta1 only), one with none at first (Cluster
// API is installed while a manager runs). The suite's management cluster serves v1.14.2's (v1beta2).
var _ = Describe("Cluster API versions", Ordered, func() {
	var v1beta1Server, lateServer *testenv.Env
	var lateCfg *rest.Config
	servers := map[string]*apiServer{}

	BeforeAll(func() {
		crds, err := testenv.ClusterAPIV1Beta1CRDs()
		Expect(err).NotTo(HaveOccurred())
		// Both know Cluster API's types, as the suite's scheme does; the late one has none of its CRDs.
		opts := testenv.EnvOptions{AddToScheme: []func(*runtime.Scheme) error{clusterv1.AddToScheme, clusterv1beta1.AddToScheme},
			Namespaces: []string{leases.DefaultNamespace}}
		var wg sync.WaitGroup
		var lateErr error
		lateOpts, v1beta1Opts := opts, opts
		v1beta1Opts.ExtraCRDPaths = []string{crds}
		wg.Go(func() { lateServer, lateErr = testenv.Up(lateOpts) })
		v1beta1Server, err = testenv.Up(v1beta1Opts)
		wg.Wait()
		Expect(err).NotTo(HaveOccurred())
		Expect(lateErr).NotTo(HaveOccurred())
		lateCfg = lateServer.Config
		servers["v1beta2"] = &apiServer{version: "v1beta2", cfg: mgmtCfg, c: k8s, disco: mgmtDiscovery}
		servers["v1beta1"] = newAPIServer("v1beta1", v1beta1Server.Config)
	})
	AfterAll(func() {
		Expect(v1beta1Server.Stop()).To(Succeed())
		Expect(lateServer.Stop()).To(Succeed())
	})

	It("discovers the served version", func() {
		for version, s := range servers {
			Expect(ServedClusterAPIVersion(s.disco)).To(Equal(version))
		}
	})

	type scenario struct {
		ready corev1.ConditionStatus
		// wantRequest: a remediation request is made for the Machine.
		wantRequest bool
		// wantStatus and wantReason: the Machine's HealthCheckSucceeded in status.conditions (v1beta2) or
		// status.v1beta2.conditions (v1beta1); the v1beta1 condition in status.conditions has Cluster API
		// v1.10's shape (a severity when False, no reason when True).
		wantStatus string
		wantReason string
	}
	scenarios := map[string]scenario{
		"an unhealthy Machine gets its request": {ready: corev1.ConditionUnknown, wantRequest: true,
			wantStatus: "False", wantReason: "UnhealthyNode"},
		"a healthy Machine does not": {ready: corev1.ConditionTrue, wantStatus: "True", wantReason: "HealthCheckSucceeded"},
	}
	for _, version := range []string{"v1beta2", "v1beta1"} {
		for name, sc := range scenarios {
			It(version+": "+name, func(ctx SpecContext) {
				s := servers[version]
				ns := createNamespace(ctx, s.c)
				clk := clocktesting.NewFakeClock(time.Now())
				r, err := New(Options{Client: s.c, Reader: s.c, APIReader: s.c, Recorder: newRecorder(), Clock: clk, Discovery: s.disco})
				Expect(err).NotTo(HaveOccurred())
				DeferCleanup(func() { r.remotes.StopAll() })

				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-n"}}
				Expect(s.c.Create(ctx, node)).To(Succeed())
				DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(s.c.Delete(ctx, node))).To(Succeed()) })
				node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: sc.ready, Reason: "Test",
					LastHeartbeatTime: metav1.NewTime(clk.Now()), LastTransitionTime: metav1.NewTime(clk.Now().Add(-time.Hour))}}
				Expect(s.c.Status().Update(ctx, node)).To(Succeed())
				createVersionedMachine(ctx, s, ns, "m", node.Name)
				createTemplateIn(ctx, s.c, ns, "reboot")
				check := &v1alpha1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "check", Namespace: ns},
					Spec: v1alpha1.MachineHealthCheckSpec{
						Selector:            metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
						RemediationTemplate: ptr.To(templateRef("reboot")),
						UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
							{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: 300 * time.Second}}},
					}}
				Expect(s.c.Create(ctx, check)).To(Succeed())

				_, err = r.Reconcile(ctx, reconcileRequest(ns, "check"))
				Expect(err).NotTo(HaveOccurred())

				unhealthy := 0.0
				if sc.wantRequest {
					unhealthy = 1
				}
				Expect(testutil.ToFloat64(unhealthyMachines.WithLabelValues(ns+"/check"))).To(Equal(unhealthy),
					"published as metalheal_mhc_unhealthy_machines")
				Expect(testutil.CollectAndCount(metrics.UnhealthyTargets)).To(BeZero(),
					"nothing of the MachineHealthCheck under the NodeHealthCheck's metalheal_nhc_unhealthy_nodes")

				requests := listRequests(ctx, s.c, ns)
				if sc.wantRequest {
					Expect(requests).To(HaveLen(1))
					Expect(requests[0].GetOwnerReferences()).To(ContainElement(And(
						HaveField("APIVersion", "cluster.x-k8s.io/"+version), HaveField("Kind", "Machine"), HaveField("Name", "m"))),
						"the request's owner reference names the served version (garbage collection and the remediator resolve it)")
					// What the power-cycle remediator does with a request without a node-name annotation
					// (Cluster API's own): read the owner in the version its reference names, then
					// status.nodeRef.name.
					owner := &unstructured.Unstructured{}
					owner.SetAPIVersion("cluster.x-k8s.io/" + version)
					owner.SetKind("Machine")
					Expect(s.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "m"}, owner)).To(Succeed())
					nodeName, _, _ := unstructured.NestedString(owner.Object, "status", "nodeRef", "name")
					Expect(nodeName).To(Equal(node.Name))
				} else {
					Expect(requests).To(BeEmpty())
				}

				m := &unstructured.Unstructured{}
				m.SetAPIVersion("cluster.x-k8s.io/" + version)
				m.SetKind("Machine")
				Expect(s.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "m"}, m)).To(Succeed())
				if version == "v1beta2" {
					c := findCondition(m, "status", "conditions")
					Expect(c).To(And(HaveKeyWithValue("status", sc.wantStatus), HaveKeyWithValue("reason", sc.wantReason),
						Not(HaveKey("severity"))))
					return
				}
				Expect(findCondition(m, "status", "v1beta2", "conditions")).To(And(
					HaveKeyWithValue("status", sc.wantStatus), HaveKeyWithValue("reason", sc.wantReason)))
				old := findCondition(m, "status", "conditions")
				if sc.wantStatus == "False" {
					Expect(old).To(And(HaveKeyWithValue("status", "False"), HaveKeyWithValue("severity", "Warning"),
						HaveKeyWithValue("reason", sc.wantReason)))
				} else {
					Expect(old).To(And(HaveKeyWithValue("status", "True"), Not(HaveKey("reason")), Not(HaveKey("severity"))))
				}
			})
		}
	}

	It("says when Cluster API is absent, and picks it up once installed while the manager runs", func(ctx SpecContext) {
		s := newAPIServer("", lateCfg)
		ns := createNamespace(ctx, s.c)
		// The check's namespace, and the node leases' (the check takes them).
		mgr, err := lateServer.NewManager(testenv.ManagerOptions{Namespaces: []string{ns, leases.DefaultNamespace}})
		Expect(err).NotTo(HaveOccurred())
		// A real clock: the manager's requeues wait in real time. The recheck is short for the test.
		r, err := New(Options{Clock: clock.RealClock{}, Recorder: newRecorder(), ClusterAPIRecheckInterval: time.Second})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.SetupWithManager(ctx, mgr)).To(Succeed())
		testenv.RunManager(ctx, GinkgoT(), mgr)

		createTemplateIn(ctx, s.c, ns, "reboot")
		check := &v1alpha1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "check", Namespace: ns},
			Spec: v1alpha1.MachineHealthCheckSpec{
				Selector:            metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
				RemediationTemplate: ptr.To(templateRef("reboot")),
				UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
					{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: 300 * time.Second}}},
			}}
		Expect(s.c.Create(ctx, check)).To(Succeed())

		By("no Cluster API: the check's status says so")
		Eventually(func(g Gomega) {
			got := &v1alpha1.MachineHealthCheck{}
			g.Expect(s.c.Get(ctx, client.ObjectKeyFromObject(check), got)).To(Succeed())
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionDisabled)).To(And(Not(BeNil()),
				HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonClusterAPINotInstalled)))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())

		By("Cluster API v1.10 installed: an unhealthy Machine gets its request, no restart")
		crds, err := testenv.ClusterAPIV1Beta1CRDs()
		Expect(err).NotTo(HaveOccurred())
		_, err = envtest.InstallCRDs(lateCfg, envtest.CRDInstallOptions{Paths: []string{crds}, ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())
		s = newAPIServer("v1beta1", lateCfg) // a client whose REST mapper knows the new kinds
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-n"}}
		Expect(s.c.Create(ctx, node)).To(Succeed())
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "Test",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}
		Expect(s.c.Status().Update(ctx, node)).To(Succeed())
		createVersionedMachine(ctx, s, ns, "m", node.Name)
		Eventually(func(g Gomega) {
			g.Expect(listRequests(ctx, s.c, ns)).To(HaveLen(1))
			got := &v1alpha1.MachineHealthCheck{}
			g.Expect(s.c.Get(ctx, client.ObjectKeyFromObject(check), got)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionDisabled)).To(BeFalse())
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())

		By("Cluster API upgraded to v1.14.2 (v1beta2 served and stored): the check moves to v1beta2, no restart")
		newCRDs, err := testenv.ClusterAPICRDs()
		Expect(err).NotTo(HaveOccurred())
		_, err = envtest.InstallCRDs(lateCfg, envtest.CRDInstallOptions{Paths: []string{newCRDs}, ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() float64 { return testutil.ToFloat64(clusterAPIVersion.WithLabelValues("v1beta2")) }).
			WithTimeout(eventuallyTimeout).Should(Equal(1.0))
		s = newAPIServer("v1beta2", lateCfg)
		node2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-n2"}}
		Expect(s.c.Create(ctx, node2)).To(Succeed())
		node2.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "Test",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}
		Expect(s.c.Status().Update(ctx, node2)).To(Succeed())
		createVersionedMachine(ctx, s, ns, "m2", node2.Name)
		Eventually(func(g Gomega) {
			var owners []string
			for _, req := range listRequests(ctx, s.c, ns) {
				for _, ref := range req.GetOwnerReferences() {
					if ref.Kind == "Machine" {
						owners = append(owners, ref.Name+" "+ref.APIVersion)
					}
				}
			}
			g.Expect(owners).To(ContainElement("m2 cluster.x-k8s.io/v1beta2"))
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
	})
})

func newAPIServer(version string, cfg *rest.Config) *apiServer {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	// Node leases live in medik8s-leases (config/default ships it).
	Expect(client.IgnoreAlreadyExists(c.Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leases.DefaultNamespace}}))).To(Succeed())
	return &apiServer{version: version, cfg: cfg, c: c, disco: d}
}

func createNamespace(ctx context.Context, c client.Client) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "capi-"}}
	Expect(c.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// createVersionedMachine creates a Machine labelled pool=a, controlled by a MachineSet, whose nodeRef
// names node, in the server's version and its own shape (v1beta1: infrastructureRef with an apiVersion,
// nodeRef an ObjectReference; v1beta2: infrastructureRef with an apiGroup, nodeRef a name).
func createVersionedMachine(ctx context.Context, s *apiServer, ns, name, node string) {
	infra := map[string]any{"kind": "FakeMachine", "name": name}
	nodeRef := map[string]any{"name": node}
	if s.version == "v1beta1" {
		infra["apiVersion"] = "infrastructure.cluster.x-k8s.io/v1beta1"
		nodeRef["kind"], nodeRef["apiVersion"] = "Node", "v1"
	} else {
		infra["apiGroup"] = "infrastructure.cluster.x-k8s.io"
	}
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/" + s.version,
		"kind":       "Machine",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"pool": "a"},
			"ownerReferences": []any{map[string]any{"apiVersion": "cluster.x-k8s.io/" + s.version, "kind": "MachineSet",
				"name": "ms", "uid": "ms-uid", "controller": true}}},
		"spec": map[string]any{"clusterName": "c1", "bootstrap": map[string]any{"dataSecretName": "bootstrap"},
			"infrastructureRef": infra},
	}}
	Expect(s.c.Create(ctx, m)).To(Succeed())
	Expect(unstructured.SetNestedMap(m.Object, nodeRef, "status", "nodeRef")).To(Succeed())
	Expect(s.c.Status().Update(ctx, m)).To(Succeed())
}

func createTemplateIn(ctx context.Context, c client.Client, ns, name string) {
	tpl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "remediation.metalheal.io/v1alpha1",
		"kind":       "PowerCycleRemediationTemplate",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       map[string]any{"template": map[string]any{"spec": map[string]any{"strategy": "reboot"}}},
	}}
	Expect(c.Create(ctx, tpl)).To(Succeed())
}

func listRequests(ctx context.Context, c client.Client, ns string) []unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("remediation.metalheal.io/v1alpha1")
	list.SetKind("PowerCycleRemediationList")
	Expect(c.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	return list.Items
}

// findCondition returns the HealthCheckSucceeded condition in the list at path, or nil.
func findCondition(u *unstructured.Unstructured, path ...string) map[string]any {
	list, _, _ := unstructured.NestedSlice(u.Object, path...)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok && m["type"] == "HealthCheckSucceeded" {
			return m
		}
	}
	return nil
}
