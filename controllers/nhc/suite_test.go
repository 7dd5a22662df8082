package nhc

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/metrics"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The envtest suite runs the controller against a real kube-apiserver and etcd (internal/testenv) with
// metalheal's CRDs and a third-party remediator's (testdata/crds), started once for every spec. Specs call
// Reconcile directly and step an injected fake clock; only the manager specs run a manager. Each spec has
// its own pool label, Nodes, templates and checks, and removes them when it ends (envtest runs no garbage
// collector). The unit tests of the package (decide, parity, the watches' predicates) are plain `testing`
// and need no API server: `go test -run TestDecide` starts none.

const (
	leaseNS = "medik8s-leases"
	pcNS    = "metalheal-system"
	fenceNS = "ops"

	// worldResync is the resync period of a world's reconciler: long, so that the specs assert the exact
	// requeue at each deadline.
	worldResync = 24 * time.Hour
	// eventuallyTimeout bounds the waits on a running manager.
	eventuallyTimeout = 20 * time.Second
)

var (
	env     *testenv.Env
	k8s     client.Client
	restCfg *rest.Config
	t0      = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	pools   atomic.Int32

	pcRemediation    = schema.GroupVersionKind{Group: "remediation.metalheal.io", Version: "v1alpha1", Kind: "PowerCycleRemediation"}
	fenceRemediation = schema.GroupVersionKind{Group: "fence.example.com", Version: "v1", Kind: "FenceRemediation"}
)

func TestEnvtest(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "NodeHealthCheck controller")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.Up(testenv.EnvOptions{
		Options:    testenv.Options{ExtraCRDPaths: []string{filepath.Join("testdata", "crds")}},
		Namespaces: []string{leaseNS, pcNS, fenceNS},
	})
	Expect(err).NotTo(HaveOccurred())
	k8s, restCfg = env.Client, env.Config
})

var _ = AfterSuite(func() {
	Expect(env.Stop()).To(Succeed())
})

// world is one spec's corner of the cluster: the testenv world (clock, recorder) and a pool label of its
// own that its Nodes carry and its checks select.
type world struct {
	clk  *clocktesting.FakeClock
	rec  *testenv.Recorder
	r    *Reconciler
	pool string
}

func newWorld(ctx context.Context) *world {
	GinkgoHelper()
	tw := env.NewWorld(ctx, GinkgoT(), testenv.WorldOptions{Start: t0})
	w := &world{clk: tw.Clock, rec: tw.Events, pool: fmt.Sprintf("p%02d", pools.Add(1))}
	w.restart()
	return w
}

// restart gives w a new reconciler, as a restarted manager has: nothing remembered of earlier writes.
func (w *world) restart() {
	GinkgoHelper()
	r, err := New(Options{Client: k8s, Clock: w.clk, Recorder: w.rec, LeaseNamespace: leaseNS, ResyncPeriod: worldResync})
	Expect(err).NotTo(HaveOccurred())
	w.r = r
}

// startManager runs the controller in a manager for the rest of the spec, on the world's clock and
// recorder, with the lease cache limited to the lease namespace as cmd/manager does; opts adds to the
// reconciler's options.
func (w *world) startManager(ctx context.Context, mopts testenv.ManagerOptions, opts Options) {
	GinkgoHelper()
	mopts.LeaseNamespace = leaseNS
	mgr, err := env.NewManager(mopts)
	Expect(err).NotTo(HaveOccurred())
	opts.Client, opts.Clock, opts.Recorder, opts.LeaseNamespace = mgr.GetClient(), w.clk, w.rec, leaseNS
	r, err := New(opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(r.SetupWithManager(ctx, mgr)).To(Succeed())
	testenv.RunManager(ctx, GinkgoT(), mgr)
}

// eventually waits on what a running manager does.
func eventually(f any) AsyncAssertion {
	return Eventually(f).WithTimeout(eventuallyTimeout).WithPolling(20 * time.Millisecond)
}

// node creates a Node of this world's pool whose Ready condition has had status since the given time.
// Extra labels come in key, value pairs.
func (w *world) node(ctx context.Context, name string, status corev1.ConditionStatus, since time.Time, extra ...string) *corev1.Node {
	GinkgoHelper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.pool + "-" + name, Labels: map[string]string{"pool": w.pool}}}
	for i := 0; i+1 < len(extra); i += 2 {
		n.Labels[extra[i]] = extra[i+1]
	}
	Expect(k8s.Create(ctx, n)).To(Succeed())
	DeferCleanup(func() {
		_ = k8s.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS, Name: leases.LeaseName(n.Name)}})
		_ = k8s.Delete(context.Background(), n)
	})
	w.setReady(ctx, n, status, since)
	return n
}

// setReady sets node's Ready condition.
func (w *world) setReady(ctx context.Context, n *corev1.Node, status corev1.ConditionStatus, since time.Time) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(n), n)).To(Succeed())
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test",
		LastTransitionTime: metav1.NewTime(since), LastHeartbeatTime: metav1.NewTime(since)}}
	Expect(k8s.Status().Update(ctx, n)).To(Succeed())
}

// pcTemplate creates a PowerCycleRemediationTemplate in metalheal-system.
func (w *world) pcTemplate(ctx context.Context, name string) v1alpha1.TemplateReference {
	GinkgoHelper()
	tpl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "remediation.metalheal.io/v1alpha1",
		"kind":       "PowerCycleRemediationTemplate",
		"metadata":   map[string]any{"name": w.pool + "-" + name, "namespace": pcNS},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"strategy": "reboot", "powerOffTimeoutSeconds": int64(120),
		}}},
	}}
	w.create(ctx, tpl)
	return v1alpha1.TemplateReference{APIVersion: tpl.GetAPIVersion(), Kind: tpl.GetKind(), Name: tpl.GetName(), Namespace: pcNS}
}

// fenceTemplate creates a third-party FenceRemediationTemplate in ops; spec is its whole spec.
func (w *world) fenceTemplate(ctx context.Context, name string, spec map[string]any) v1alpha1.TemplateReference {
	GinkgoHelper()
	tpl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "fence.example.com/v1",
		"kind":       "FenceRemediationTemplate",
		"metadata":   map[string]any{"name": w.pool + "-" + name, "namespace": fenceNS},
		"spec":       spec,
	}}
	w.create(ctx, tpl)
	return v1alpha1.TemplateReference{APIVersion: tpl.GetAPIVersion(), Kind: tpl.GetKind(), Name: tpl.GetName(), Namespace: fenceNS}
}

func (w *world) create(ctx context.Context, obj client.Object) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, obj)).To(Succeed())
	DeferCleanup(func() { _ = k8s.Delete(context.Background(), obj) })
}

// pcCheckWithSickNode is the common opening: a check "nhc" with a PowerCycleRemediation template, one
// Node w1 Ready=False since t0, and the clock an hour later, so that the Node is due for a request.
func (w *world) pcCheckWithSickNode(ctx context.Context) (*v1alpha1.NodeHealthCheck, *corev1.Node) {
	GinkgoHelper()
	pc := w.pcTemplate(ctx, "pc")
	check := w.check(ctx, "nhc", &pc)
	sick := w.node(ctx, "w1", corev1.ConditionFalse, t0)
	w.clk.SetTime(t0.Add(time.Hour))
	return check, sick
}

// check creates a NodeHealthCheck selecting this world's pool: Ready Unknown or False for 5m, no budget
// limit (maxUnhealthy 100%) unless mods change it.
func (w *world) check(ctx context.Context, name string, ref *v1alpha1.TemplateReference, mods ...func(*v1alpha1.NodeHealthCheck)) *v1alpha1.NodeHealthCheck {
	GinkgoHelper()
	all := intstr.FromString("100%")
	c := &v1alpha1.NodeHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: w.pool + "-" + name},
		Spec: v1alpha1.NodeHealthCheckSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": w.pool}},
			UnhealthyConditions: []v1alpha1.NodeUnhealthyCondition{
				{Type: "Ready", Status: "Unknown", Duration: metav1.Duration{Duration: 5 * time.Minute}},
				{Type: "Ready", Status: "False", Duration: metav1.Duration{Duration: 5 * time.Minute}},
			},
			MaxUnhealthy:        &all,
			RemediationTemplate: ref,
		},
	}
	for _, m := range mods {
		m(c)
	}
	Expect(k8s.Create(ctx, c)).To(Succeed())
	DeferCleanup(func() {
		ctx := context.Background()
		_ = k8s.Delete(ctx, c)
		for _, gvk := range []schema.GroupVersionKind{pcRemediation, fenceRemediation} {
			for _, emr := range listKind(ctx, gvk) {
				if ownedBy(&emr, c.UID) {
					_ = k8s.Delete(ctx, &emr)
				}
			}
		}
	})
	return c
}

// reconcile reconciles the check once and refreshes it.
func (w *world) reconcile(ctx context.Context, c *v1alpha1.NodeHealthCheck) ctrl.Result {
	GinkgoHelper()
	res, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: c.Name}})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
	return res
}

// remediations lists the requests of kind gvk owned by check c.
func (w *world) remediations(ctx context.Context, gvk schema.GroupVersionKind, c *v1alpha1.NodeHealthCheck) []unstructured.Unstructured {
	GinkgoHelper()
	var out []unstructured.Unstructured
	for _, emr := range listKind(ctx, gvk) {
		if ownedBy(&emr, c.UID) {
			out = append(out, emr)
		}
	}
	return out
}

// names returns the objects' names.
func names(objs []unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetName())
	}
	slices.Sort(out)
	return out
}

func listKind(ctx context.Context, gvk schema.GroupVersionKind) []unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := k8s.List(ctx, list); err != nil {
		panic(err)
	}
	return list.Items
}

// maintenance is node maintenance's lease manager ("node-maintenance"), on the world's clock.
func (w *world) maintenance() *leases.Manager {
	GinkgoHelper()
	return w.leaseManager("node-maintenance")
}

// leaseManager is a lease manager acting as holder, on the world's clock.
func (w *world) leaseManager(holder string) *leases.Manager {
	GinkgoHelper()
	m, err := leases.NewManager(k8s, holder, w.clk, leases.WithNamespace(leaseNS))
	Expect(err).NotTo(HaveOccurred())
	return m
}

// leaseHolder returns who holds node's lease, "" when there is none.
func (w *world) leaseHolder(ctx context.Context, n *corev1.Node) string {
	GinkgoHelper()
	l := &coordinationv1.Lease{}
	err := k8s.Get(ctx, types.NamespacedName{Namespace: leaseNS, Name: leases.LeaseName(n.Name)}, l)
	if apierrors.IsNotFound(err) {
		return ""
	}
	Expect(err).NotTo(HaveOccurred())
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// entry returns the status entry of node n.
func entry(c *v1alpha1.NodeHealthCheck, n *corev1.Node) *v1alpha1.UnhealthyNode {
	return findEntry(c.Status.UnhealthyNodes, n.Name)
}

// detectionDelays returns the count and sum of the detection delay histogram.
func detectionDelays() (uint64, float64) {
	GinkgoHelper()
	m := &dto.Metric{}
	h, ok := metrics.DetectionDelay.WithLabelValues(metrics.CheckerNHC).(interface{ Write(*dto.Metric) error })
	Expect(ok).To(BeTrue(), "detection delay histogram cannot be read")
	Expect(h.Write(m)).To(Succeed())
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// setSucceeded sets the remediator's Succeeded condition on a request.
func (w *world) setSucceeded(ctx context.Context, emr *unstructured.Unstructured, status metav1.ConditionStatus) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(emr), emr)).To(Succeed())
	Expect(unstructured.SetNestedSlice(emr.Object, []any{map[string]any{
		"type": "Succeeded", "status": string(status), "reason": "GaveUp", "message": "test",
		"lastTransitionTime": t0.Format(time.RFC3339),
	}}, "status", "conditions")).To(Succeed())
	Expect(k8s.Status().Update(ctx, emr)).To(Succeed())
}
