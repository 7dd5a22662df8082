package powercycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/redfish"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The suite runs the remediator against one real API server (internal/testenv), with metalheal's and
// Cluster API's CRDs, started once for every spec. Specs call Reconcile directly and step an injected fake
// clock; only the many-at-once spec runs a manager. Each spec keeps apart by its namespace and the prefix
// of its Nodes' names. The unit tables of the package (decisions, host phases, records, the state metrics)
// are plain `testing` and need no API server: `go test -run 'TestSpecDefaults|TestNextOffPhase'` starts none.
var (
	env *testenv.Env
	api *apiServer
	// stopCache stops api's cache.
	stopCache context.CancelFunc = func() {}
)

func TestEnvtest(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "PowerCycleRemediation controller")
}

var _ = BeforeSuite(func() {
	setupLogging()
	var err error
	env, err = testenv.Up(testenv.EnvOptions{ClusterAPI: true, Namespaces: []string{leases.DefaultNamespace}, QPS: 500, Burst: 1000})
	Expect(err).NotTo(HaveOccurred())
	api, err = newAPIServer(env)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	stopCache()
	Expect(env.Stop()).To(Succeed())
})

// apiServer is the package's API server: a direct client, and a cache that the BMC access layer reads
// BMCs and Secrets from (as it does in the manager).
type apiServer struct {
	// kubeconfig is an admin kubeconfig of the API server, with inline credentials.
	kubeconfig []byte
	cfg        *rest.Config
	scheme     *runtime.Scheme
	client     client.Client
	cache      cache.Cache
}

// newAPIServer starts the cache of env for the rest of the suite.
func newAPIServer(env *testenv.Env) (*apiServer, error) {
	ca, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, fmt.Errorf("creating a cache: %w", err)
	}
	// The field indexes the access layer looks BMCs up by, registered once for every Access built on
	// this cache.
	if err := bmcaccess.New(ca, "", nil, bmcaccess.Options{}).SetupIndexes(context.Background(), ca); err != nil {
		return nil, fmt.Errorf("indexing BMCs: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopCache = cancel
	go func() { _ = ca.Start(ctx) }()
	// Informers for what the access layer reads, started now.
	for _, o := range []client.Object{&v1alpha1.BMC{}, &corev1.Secret{}} {
		if _, err := ca.GetInformer(ctx, o); err != nil {
			return nil, fmt.Errorf("starting an informer: %w", err)
		}
	}
	if !ca.WaitForCacheSync(ctx) {
		return nil, errors.New("the cache did not sync")
	}
	return &apiServer{kubeconfig: env.KubeConfig(), cfg: env.Config, scheme: env.Scheme, client: env.Client, cache: ca}, nil
}

var loggingOnce sync.Once

// setupLogging sends the controllers' logs to stderr when METALHEAL_TEST_LOG is set, else nowhere.
func setupLogging() {
	loggingOnce.Do(func() {
		var out io.Writer = io.Discard
		if os.Getenv("METALHEAL_TEST_LOG") != "" {
			out = os.Stderr
		}
		ctrl.SetLogger(zap.New(zap.WriteTo(out), zap.UseDevMode(true)))
	})
}

// epoch is where the fake clocks start: whole seconds, as status times are.
var epoch = time.Date(2031, 3, 4, 5, 6, 0, 0, time.UTC)

// redfishFactory builds Redfish drivers, as cmd/manager's adapter does.
func redfishFactory(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
	return redfish.New(addr.Endpoint(), addr.Path, creds, opts)
}

var worldSeq atomic.Int32

// world is one spec's testenv world: its own namespace (BMCs, Secrets, remediations), nodes with
// unique names, a fake clock, an event recorder and the BMC drivers of a registry chosen by the spec.
type world struct {
	api      *apiServer
	c        client.Client
	ns       string
	prefix   string
	clock    *clocktesting.FakeClock
	recorder *events.FakeRecorder
	registry *bmc.Registry
	events   []string

	// reconcilerOptions tweaks the options of every reconciler the world builds.
	reconcilerOptions func(*RemediationReconcilerOptions)
}

func newWorld(ctx context.Context, registry *bmc.Registry) *world {
	GinkgoHelper()
	n := worldSeq.Add(1)
	tw := env.NewWorld(ctx, GinkgoT(), testenv.WorldOptions{Namespace: fmt.Sprintf("scenario-%d", n), Start: epoch})
	return &world{
		api:      api,
		c:        api.client,
		ns:       tw.Namespace,
		prefix:   fmt.Sprintf("s%d-", n),
		clock:    tw.Clock,
		recorder: events.NewFakeRecorder(10000),
		registry: registry,
	}
}

func (w *world) must(err error) {
	GinkgoHelper()
	Expect(err).NotTo(HaveOccurred())
}

// reconciler builds a fresh remediator, as a restarted manager would: a new access layer (no cached
// drivers) over the same API server, registry and clock.
func (w *world) reconciler() *RemediationReconciler {
	GinkgoHelper()
	opts := RemediationReconcilerOptions{
		Client:            w.c,
		Clock:             w.clock,
		Recorder:          w.recorder,
		Drivers:           bmcaccess.New(w.api.cache, w.ns, w.registry, bmcaccess.Options{RequestTimeout: 5 * time.Second}),
		PowerPollInterval: 5 * time.Second,
		BMCCallTimeout:    5 * time.Second,
		ManagerNamespace:  w.ns,
	}
	if w.reconcilerOptions != nil {
		w.reconcilerOptions(&opts)
	}
	r, err := NewRemediationReconciler(opts)
	w.must(err)
	return r
}

// node creates a broken node (Ready Unknown since long ago) and returns its full name.
func (w *world) node(ctx context.Context, name string, labels map[string]string) string {
	GinkgoHelper()
	name = w.prefix + name
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	w.must(w.c.Create(ctx, n))
	long := metav1.NewTime(epoch.Add(-time.Hour))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
		LastHeartbeatTime: long, LastTransitionTime: long, Reason: "NodeStatusUnknown"}}
	w.must(w.c.Status().Update(ctx, n))
	return name
}

// setReady sets the node's Ready condition as its kubelet (or the node lifecycle controller) would,
// stamped with the world's time.
func (w *world) setReady(ctx context.Context, name string, status corev1.ConditionStatus) {
	GinkgoHelper()
	n := &corev1.Node{}
	w.must(w.c.Get(ctx, client.ObjectKey{Name: name}, n))
	now := metav1.NewTime(w.clock.Now())
	for i, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status != status {
				n.Status.Conditions[i].LastTransitionTime = now
			}
			n.Status.Conditions[i].Status, n.Status.Conditions[i].LastHeartbeatTime = status, now
		}
	}
	w.must(w.c.Status().Update(ctx, n))
}

// bmc creates the node's BMC at address, with a credentials Secret (unless secret is nil).
func (w *world) bmc(ctx context.Context, node, address string, secret map[string]string) *v1alpha1.BMC {
	GinkgoHelper()
	b := &v1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-bmc", Namespace: w.ns},
		Spec: v1alpha1.BMCSpec{NodeName: node, Address: address,
			CredentialsSecretRef: v1alpha1.SecretReference{Name: node + "-bmc-credentials"}},
	}
	w.must(w.c.Create(ctx, b))
	if secret != nil {
		w.secret(ctx, b.Spec.CredentialsSecretRef.Name, secret)
	}
	w.waitCached(ctx, b, func(o client.Object) bool { return true })
	return b
}

// fakeHost creates a node (see node) whose BMC is a fake driver with good credentials, and returns the
// node's full name.
func (w *world) fakeHost(ctx context.Context, name string, labels map[string]string) string {
	GinkgoHelper()
	node := w.node(ctx, name, labels)
	w.bmc(ctx, node, fakeAddress(node), credentials)
	return node
}

// secret creates or updates a Secret and waits until the access layer's cache has this version.
func (w *world) secret(ctx context.Context, name string, data map[string]string) {
	GinkgoHelper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}}
	err := w.c.Get(ctx, client.ObjectKeyFromObject(s), s)
	s.StringData = data
	if apierrors.IsNotFound(err) {
		w.must(w.c.Create(ctx, s))
	} else {
		w.must(err)
		w.must(w.c.Update(ctx, s))
	}
	rv := s.ResourceVersion
	w.waitCached(ctx, s, func(o client.Object) bool { return o.GetResourceVersion() == rv })
}

// waitCached waits until the cache holds o in a state ok accepts (the cache is real: it lags).
func (w *world) waitCached(ctx context.Context, o client.Object, ok func(client.Object) bool) {
	GinkgoHelper()
	cached := o.DeepCopyObject().(client.Object)
	Eventually(func() bool {
		return w.api.cache.Get(ctx, client.ObjectKeyFromObject(o), cached) == nil && ok(cached)
	}).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(BeTrue())
}

// remediation creates a PowerCycleRemediation in the world's namespace.
func (w *world) remediation(ctx context.Context, name string, spec v1alpha1.PowerCycleRemediationSpec, annotations map[string]string, owners ...metav1.OwnerReference) client.ObjectKey {
	GinkgoHelper()
	p := &v1alpha1.PowerCycleRemediation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Annotations: annotations, OwnerReferences: owners},
		Spec:       spec,
	}
	w.must(w.c.Create(ctx, p))
	return client.ObjectKeyFromObject(p)
}

// nhcRemediation creates a remediation as NodeHealthCheck does: named after the node, annotated with it,
// owned by the Node and the health check.
func (w *world) nhcRemediation(ctx context.Context, node string, spec v1alpha1.PowerCycleRemediationSpec) client.ObjectKey {
	GinkgoHelper()
	n := &corev1.Node{}
	w.must(w.c.Get(ctx, client.ObjectKey{Name: node}, n))
	return w.remediation(ctx, node, spec, map[string]string{v1alpha1.AnnotationNodeName: node},
		metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID},
		metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeHealthCheck", Name: "workers", UID: "4a1b5e0e-0000-4000-8000-000000000001"})
}

func (w *world) get(ctx context.Context, key client.ObjectKey) *v1alpha1.PowerCycleRemediation {
	GinkgoHelper()
	p := &v1alpha1.PowerCycleRemediation{}
	w.must(w.c.Get(ctx, key, p))
	return p
}

func (w *world) getNode(ctx context.Context, name string) *corev1.Node {
	GinkgoHelper()
	n := &corev1.Node{}
	w.must(w.c.Get(ctx, client.ObjectKey{Name: name}, n))
	return n
}

// taintKeys lists the keys of the node's remediation taints (the API server adds others of its own,
// such as node.kubernetes.io/not-ready).
func (w *world) taintKeys(ctx context.Context, name string) []string {
	GinkgoHelper()
	var keys []string
	for _, t := range w.getNode(ctx, name).Spec.Taints {
		if _, ours := taintEffects[t.Key]; ours {
			keys = append(keys, t.Key)
		}
	}
	return keys
}

// lease returns the node's lease, or nil.
func (w *world) lease(ctx context.Context, node string) *coordinationv1.Lease {
	GinkgoHelper()
	l := &coordinationv1.Lease{}
	err := w.c.Get(ctx, client.ObjectKey{Namespace: leases.DefaultNamespace, Name: leases.LeaseName(node)}, l)
	if apierrors.IsNotFound(err) {
		return nil
	}
	w.must(err)
	return l
}

// drainEvents moves the recorded events into w.events and returns them all.
func (w *world) drainEvents() []string {
	for {
		select {
		case e := <-w.recorder.Events:
			w.events = append(w.events, e)
		default:
			return w.events
		}
	}
}

// step is what a drive observed after one reconcile.
type step struct {
	phase  v1alpha1.PowerCyclePhase
	result ctrl.Result
	at     time.Time // the world's time when the reconcile ran
	gone   bool
}

// drive reconciles the remediation until until says stop, with a reconciler from next for every
// reconcile (the same one, or a fresh one to simulate restarts). After each reconcile react lets the
// world respond (a kubelet reporting Ready, say), then the clock jumps to the requeue time. It fails the
// test after maxSteps reconciles, and returns what each reconcile saw.
func (w *world) drive(ctx context.Context, key client.ObjectKey, next func() *RemediationReconciler, react func(*v1alpha1.PowerCycleRemediation), until func([]step) bool) []step {
	GinkgoHelper()
	const maxSteps = 400
	var steps []step
	for range maxSteps {
		at := w.clock.Now()
		res, err := next().Reconcile(ctx, ctrl.Request{NamespacedName: key})
		if err != nil {
			Fail(fmt.Sprintf("reconcile %d (at +%s): %v", len(steps)+1, at.Sub(epoch), err))
		}
		p := &v1alpha1.PowerCycleRemediation{}
		err = w.c.Get(ctx, key, p)
		if apierrors.IsNotFound(err) {
			steps = append(steps, step{gone: true, result: res, at: at})
			return steps
		}
		w.must(err)
		steps = append(steps, step{phase: p.Status.Phase, result: res, at: at})
		if react != nil {
			react(p)
		}
		if until(steps) {
			return steps
		}
		if res.RequeueAfter > 0 {
			w.clock.Step(res.RequeueAfter)
		}
	}
	Fail(fmt.Sprintf("remediation %s did not get there in %d reconciles; phases: %v", key, maxSteps, phases(steps)))
	return nil
}

// same returns a next func that always hands out r.
func same(r *RemediationReconciler) func() *RemediationReconciler {
	return func() *RemediationReconciler { return r }
}

// untilPhase stops once the remediation entered phase.
func untilPhase(phase v1alpha1.PowerCyclePhase) func([]step) bool {
	return func(s []step) bool { return s[len(s)-1].phase == phase }
}

// untilSettled stops at a terminal phase with nothing left to do, or once the request is gone.
func untilSettled(s []step) bool {
	last := s[len(s)-1]
	return last.gone || (terminal(last.phase) && last.result.RequeueAfter == 0)
}

// untilTerminal stops at a terminal phase.
func untilTerminal(s []step) bool {
	last := s[len(s)-1]
	return last.gone || terminal(last.phase)
}

// phases lists the distinct phases in the order they were seen.
func phases(steps []step) []v1alpha1.PowerCyclePhase {
	var out []v1alpha1.PowerCyclePhase
	for _, s := range steps {
		if s.gone {
			break
		}
		if len(out) == 0 || out[len(out)-1] != s.phase {
			out = append(out, s.phase)
		}
	}
	return out
}

// kubeletOnPowerOn answers a power-on the way a healthy host does: once the BMC has confirmed it on, the
// kubelet reports Ready. healthy says whether this attempt's boot brings the node back.
func (w *world) kubeletOnPowerOn(ctx context.Context, node string, healthy func(attempt int32) bool) func(*v1alpha1.PowerCycleRemediation) {
	return func(p *v1alpha1.PowerCycleRemediation) {
		if p.Status.Phase != v1alpha1.PhaseWaitingForNode || len(p.Status.Attempts) == 0 {
			return
		}
		a := p.Status.Attempts[len(p.Status.Attempts)-1]
		if a.PowerOnRequested == nil || !healthy(a.Number) || nodeReadySince(w.getNode(ctx, node), a.PowerOnRequested.Time) {
			return
		}
		w.clock.Step(20 * time.Second) // the boot
		w.setReady(ctx, node, corev1.ConditionTrue)
	}
}

func always(int32) bool { return true }
func never(int32) bool  { return false }

func conditionOf(p *v1alpha1.PowerCycleRemediation, condType string) metav1.Condition {
	for _, c := range p.Status.Conditions {
		if c.Type == condType {
			return c
		}
	}
	return metav1.Condition{}
}

// writeLog counts a client's writes by verb and kind, e.g. "update PowerCycleRemediation/status".
type writeLog struct {
	mu     sync.Mutex
	counts map[string]int
}

func (l *writeLog) add(verb string, obj client.Object, sub string) {
	kind := reflect.TypeOf(obj).Elem().Name()
	if sub != "" {
		kind += "/" + sub
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	l.counts[verb+" "+kind]++
}

// all returns a copy of the counts.
func (l *writeLog) all() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.counts)
}

// of is how many writes went to kind, its subresources included.
func (l *writeLog) of(kind string) int {
	n := 0
	for key, c := range l.all() {
		if _, k, _ := strings.Cut(key, " "); k == kind || strings.HasPrefix(k, kind+"/") {
			n += c
		}
	}
	return n
}

func (l *writeLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts = nil
}

// interceptedClient is a client straight to the API server (no cache) with funcs in front of it. Every
// write that funcs leaves alone is counted in the log it returns.
func (w *world) interceptedClient(funcs interceptor.Funcs) (client.Client, *writeLog) {
	GinkgoHelper()
	direct, err := client.NewWithWatch(w.api.cfg, client.Options{Scheme: w.api.scheme})
	w.must(err)
	log := &writeLog{}
	if funcs.Create == nil {
		funcs.Create = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			log.add("create", obj, "")
			return c.Create(ctx, obj, opts...)
		}
	}
	if funcs.Update == nil {
		funcs.Update = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			log.add("update", obj, "")
			return c.Update(ctx, obj, opts...)
		}
	}
	if funcs.Patch == nil {
		funcs.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			log.add("patch", obj, "")
			return c.Patch(ctx, obj, patch, opts...)
		}
	}
	if funcs.Delete == nil {
		funcs.Delete = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			log.add("delete", obj, "")
			return c.Delete(ctx, obj, opts...)
		}
	}
	if funcs.SubResourceUpdate == nil {
		funcs.SubResourceUpdate = func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			log.add("update", obj, sub)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}
	}
	if funcs.SubResourcePatch == nil {
		funcs.SubResourcePatch = func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			log.add("patch", obj, sub)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}
	}
	return interceptor.NewClient(direct, funcs), log
}

// indexedClient is a client whose reads come from a cache of the world's namespace with the remediator's
// node index, as the manager's do; the cache runs until the spec ends.
func (w *world) indexedClient(ctx context.Context) client.Client {
	GinkgoHelper()
	ca, err := cache.New(w.api.cfg, cache.Options{Scheme: w.api.scheme, DefaultNamespaces: map[string]cache.Config{w.ns: {}}})
	w.must(err)
	w.must(indexRemediationsByNode(ctx, ca))
	ctx, cancel := context.WithCancel(ctx)
	DeferCleanup(cancel)
	go func() { _ = ca.Start(ctx) }()
	Expect(ca.WaitForCacheSync(ctx)).To(BeTrue(), "the cache did not sync")
	c, err := client.New(w.api.cfg, client.Options{Scheme: w.api.scheme, Cache: &client.CacheOptions{Reader: ca}})
	w.must(err)
	return c
}

// pauseBefore makes the remediator's first status write that enters phase fail with a conflict, as if
// someone had written the request a moment before: that reconcile ends there, with the request left in
// the phase before. It lets a test stop in a phase that a reconcile otherwise enters and leaves at once
// (PoweredOff, say). It sets w.reconcilerOptions.
func (w *world) pauseBefore(phase v1alpha1.PowerCyclePhase) {
	GinkgoHelper()
	var fired atomic.Bool
	c, _ := w.interceptedClient(interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if p, ok := obj.(*v1alpha1.PowerCycleRemediation); ok && p.Status.Phase == phase && fired.CompareAndSwap(false, true) {
				return apierrors.NewConflict(v1alpha1.GroupVersion.WithResource("powercycleremediations").GroupResource(), p.Name,
					errors.New("the test holds the request before "+string(phase)))
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client = c }
}
