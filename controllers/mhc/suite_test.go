package mhc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The suite runs two real API servers: the management cluster (metalheal's and Cluster API's CRDs) and a
// workload cluster (bare), reached through a <cluster>-kubeconfig Secret.
var (
	scheme = runtime.NewScheme()

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
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	Expect(clusterv1beta1.AddToScheme(scheme)).To(Succeed())

	capiCRDs, err := testenv.ClusterAPICRDs()
	Expect(err).NotTo(HaveOccurred())
	var wg sync.WaitGroup
	var wlCfg *rest.Config
	var wlErr error
	wg.Go(func() { workloadEnv, wlCfg, wlErr = testenv.Start(testenv.Options{SkipCRDs: true}) })
	mgmtEnv, mgmtCfg, err = testenv.Start(testenv.Options{ExtraCRDPaths: []string{capiCRDs}})
	wg.Wait()
	Expect(err).NotTo(HaveOccurred())
	Expect(wlErr).NotTo(HaveOccurred())

	k8s, err = client.New(mgmtCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	mgmtDiscovery, err = discovery.NewDiscoveryClientForConfig(mgmtCfg)
	Expect(err).NotTo(HaveOccurred())
	workloadK8s, err = client.New(wlCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if mgmtEnv != nil {
		Expect(mgmtEnv.Stop()).To(Succeed())
	}
	if workloadEnv != nil {
		Expect(workloadEnv.Stop()).To(Succeed())
	}
})

// recordedEvent is an event the recorder saw.
type recordedEvent struct {
	Kind, Name, Type, Reason, Note string
}

// recorder records events for assertions.
type recorder struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (r *recorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	o, ok := regarding.(client.Object)
	Expect(ok).To(BeTrue())
	kind := fmt.Sprintf("%T", regarding)
	switch o.(type) {
	case *clusterv1.Machine:
		kind = "Machine"
	case *v1alpha1.MachineHealthCheck:
		kind = "MachineHealthCheck"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, recordedEvent{Kind: kind, Name: o.GetName(), Type: eventtype, Reason: reason, Note: fmt.Sprintf(note, args...)})
}

func (r *recorder) all() []recordedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// world is one test's namespace, clock, recorder and reconciler.
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
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mhc-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	// Node leases live in medik8s-leases (config/default ships it).
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leases.DefaultNamespace}}))).To(Succeed())
	w := &world{ns: ns.Name, clock: clocktesting.NewFakeClock(ns.CreationTimestamp.Add(time.Second)), rec: &recorder{}}
	var err error
	// The resync is left out of the tests' requeue assertions: they see the decision's own deadlines.
	w.r, err = New(Options{Client: k8s, Reader: k8s, APIReader: k8s, Recorder: w.rec, Clock: w.clock, Discovery: mgmtDiscovery,
		ResyncPeriod: worldResync})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { w.r.remotes.StopAll() })
	return w
}

// worldResync is the resync period of newWorld's reconciler.
const worldResync = 24 * time.Hour

// eventuallyTimeout bounds the waits on a real API server or a running manager.
const eventuallyTimeout = 30 * time.Second
