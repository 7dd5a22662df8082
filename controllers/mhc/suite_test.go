package mhc

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The suite runs two real API servers (internal/testenv), started once for every spec: the management
// cluster (metalheal's and Cluster API's CRDs, the lease namespace) and a workload cluster (bare), reached
// through a <cluster>-kubeconfig Secret.
var (
	mgmtServer, workloadServer *testenv.Env

	scheme               *runtime.Scheme
	mgmtEnv, workloadEnv *envtest.Environment
	mgmtCfg              *rest.Config
	k8s, workloadK8s     client.Client
	mgmtDiscovery        Discovery
)

func TestEnvtest(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "MachineHealthCheck controller")
}

var _ = BeforeSuite(func() {
	var wg sync.WaitGroup
	var wlErr error
	wg.Go(func() {
		workloadServer, wlErr = testenv.Up(testenv.EnvOptions{Options: testenv.Options{SkipCRDs: true}})
	})
	// Node leases live in medik8s-leases (config/default ships it).
	var err error
	mgmtServer, err = testenv.Up(testenv.EnvOptions{ClusterAPI: true, Namespaces: []string{leases.DefaultNamespace}})
	wg.Wait()
	Expect(err).NotTo(HaveOccurred())
	Expect(wlErr).NotTo(HaveOccurred())

	scheme, mgmtEnv, mgmtCfg, k8s, mgmtDiscovery = mgmtServer.Scheme, mgmtServer.Environment, mgmtServer.Config, mgmtServer.Client, mgmtServer.Discovery
	workloadEnv = workloadServer.Environment
	// The workload cluster is read with the management cluster's scheme, as the controller reads it.
	workloadK8s, err = client.New(workloadServer.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	Expect(mgmtServer.Stop()).To(Succeed())
	Expect(workloadServer.Stop()).To(Succeed())
})

// recordedEvent is an event the recorder saw.
type recordedEvent = testenv.Event

// recorder records events for assertions.
type recorder struct{ *testenv.Recorder }

// newRecorder is a recorder naming kinds by the suite's scheme.
func newRecorder() *recorder { return &recorder{testenv.NewRecorder(scheme)} }

func (r *recorder) all() []recordedEvent { return r.All() }

// world is one spec's namespace, clock, recorder and reconciler.
type world struct {
	ns    string
	clock *clocktesting.FakeClock
	rec   *recorder
	r     *Reconciler
}

// newWorld creates a namespace and a reconciler that reads everything directly from the API server, with a
// fake clock starting at the namespace's creation (the API server's time, to which the creation
// timestamps of the test's objects are close).
func newWorld(ctx context.Context) *world {
	GinkgoHelper()
	tw := mgmtServer.NewWorld(ctx, GinkgoT(), testenv.WorldOptions{GenerateNamespace: "mhc-"})
	w := &world{ns: tw.Namespace, clock: tw.Clock, rec: &recorder{tw.Events}}
	var err error
	// The resync is left out of the tests' requeue assertions: they see the decision's own deadlines.
	w.r, err = New(Options{Client: k8s, Reader: k8s, APIReader: k8s, Recorder: w.rec, Clock: w.clock, Discovery: mgmtDiscovery,
		ResyncPeriod: worldResync})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { w.r.remotes.StopAll() })
	return w
}

// runManager runs the controller in a manager for the rest of the spec, as main does: the world's
// namespace cached, and Leases only in the lease namespace. mopts adds to that (a request log, a user to
// act as); opts are the reconciler's, its clock and recorder the world's. It returns the manager, started.
func (w *world) runManager(ctx context.Context, mopts testenv.ManagerOptions, opts Options) manager.Manager {
	GinkgoHelper()
	mopts.Namespaces = append(mopts.Namespaces, w.ns)
	mopts.LeaseNamespace = leases.DefaultNamespace
	mgr, err := mgmtServer.NewManager(mopts)
	Expect(err).NotTo(HaveOccurred())
	opts.Clock, opts.Recorder = w.clock, w.rec
	r, err := New(opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(r.SetupWithManager(ctx, mgr)).To(Succeed())
	testenv.RunManager(ctx, GinkgoT(), mgr)
	return mgr
}

// worldResync is the resync period of newWorld's reconciler.
const worldResync = 24 * time.Hour

// eventuallyTimeout bounds the waits on a real API server or a running manager.
const eventuallyTimeout = 30 * time.Second
