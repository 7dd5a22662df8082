//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/ipmisim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
	"github.com/metalheal/metalheal/test/world"
)

// Timings of the world: short, so the whole suite fits in a few minutes, and paired as
// docs/development.md says (the kubelets' lease interval a quarter of the grace period).
const (
	gracePeriod       = 8 * time.Second // node lifecycle: silence before Ready=Unknown
	leaseInterval     = 2 * time.Second // simulated kubelets renew their lease this often
	bootDelay         = 3 * time.Second // power on → Ready
	powerDelay        = time.Second     // a BMC's power transition
	conditionDuration = 2 * time.Second // how long Ready must be Unknown/False before a check acts
	workers           = 56              // the pool scenarios take their nodes from (53 taken today)
)

// Waits. Every wait is an Eventually bounded by one of these.
const (
	poll        = 200 * time.Millisecond
	detectWait  = 45 * time.Second // a node breaks → its remediation request exists
	remedyWait  = 90 * time.Second // a remediation request exists → it is done and deleted
	settledWait = 60 * time.Second // the end state, once the last action is under way
	scenarioMax = 5 * time.Minute  // a whole scenario
	suiteSetup  = 5 * time.Minute  // building and starting the world
)

// groupLabel puts a node in a scenario's group: the scenario's health check selects it.
const groupLabel = "e2e.metalheal.io/group"

// managerArgs tune the manager to the world's timings: power transitions checked every second, BMC
// calls bounded at 3s, BMCs checked every 10s. Logs at V(2) for the failure reports. The Cluster API
// scenarios' namespaces are trusted with remediation requests, as an admin lists their cluster namespaces.
var managerArgs = []string{
	"--remediation-namespaces=e2e-mhc," + fleetNamespace + "," + fleetCutNamespace,
	"--power-poll-interval=1s",
	"--bmc-call-timeout=3s",
	"--bmc-check-interval=10s",
	"--zap-log-level=2",
}

var (
	h    *harness.Harness
	k8s  client.Client // the administrator, knowing Cluster API's kinds too
	tl   = newTimeline()
	gate *phaseGate
	mgrs = &managers{}
	pool = &nodePool{size: workers}

	// powerHooks lets a scenario react to a node's power changes (e.g. a host slow to boot).
	powerHooks sync.Map // node name → func(to redfishmock.PowerState)
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "metalheal end-to-end")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	// The suite's own caches (the timeline's, a workload cluster's Node watch) log through
	// controller-runtime: a watch broken by a stopped API server, say.
	ctrllog.SetLogger(GinkgoLogr)
	capiCRDs, err := testenv.ClusterAPICRDs()
	Expect(err).NotTo(HaveOccurred())
	By("building the manager")
	_, err = harness.BuildManager(ctx)
	Expect(err).NotTo(HaveOccurred())

	By("starting the world: control plane, Redfish BMCs, simulated kubelets")
	h, err = harness.Start(ctx, harness.Options{
		Workers:       workers,
		LeaseInterval: leaseInterval,
		BootDelay:     bootDelay,
		PowerDelay:    powerDelay,
		KubeletPorts:  true, // the power watch's second reading
		World: world.Options{
			NodeMonitorGracePeriod: gracePeriod,
			ExtraCRDPaths:          []string{capiCRDs},
		},
		Log: GinkgoWriter,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if os.Getenv(world.KeepEnv) != "" {
			fmt.Fprintf(GinkgoWriter, "world kept in %s\n", h.World.Dir())
		}
		h.Stop()
	})
	AddReportEntry("world", fmt.Sprintf("kubectl --kubeconfig=%s (logs in %s)", h.World.Kubeconfig(), h.World.LogDir()))

	scheme := harness.Scheme()
	Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(h.World.RESTConfig(), client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	By("recording power changes and what the watches see")
	h.Mock.OnPowerChange(func(id string, _, to redfishmock.PowerState) {
		node := h.HostOfSystem(id)
		tl.record("power/"+node, string(to))
		if fn, ok := powerHooks.Load(node); ok {
			fn.(func(redfishmock.PowerState))(to)
		}
	})
	watchCtx, stopWatching := context.WithCancel(context.Background())
	DeferCleanup(stopWatching)
	cache, err := newCache(scheme)
	Expect(err).NotTo(HaveOccurred())
	Expect(tl.watch(watchCtx, cache)).To(Succeed())

	By("installing the phase gate")
	gate, err = installPhaseGate(ctx, k8s)
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(suiteSetup))

// anyFailed is set when a scenario failed: the world's end state is then not worth asserting.
var anyFailed bool

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		anyFailed = true
	}
})

// After every scenario the whole world is at rest: no remediation request, no node maintenance lease,
// every simulated node Ready and untainted by metalheal, every Redfish host powered on. And whatever the
// scenarios did, no manager logged a credential or lacked a permission.
var _ = AfterSuite(func(ctx SpecContext) {
	if !anyFailed && k8s != nil {
		for _, node := range h.Sim.Nodes() {
			expectSettled(ctx, node)
		}
		for _, id := range h.Mock.SystemIDs() {
			state, err := h.Mock.PowerState(id)
			Expect(err).NotTo(HaveOccurred())
			Expect(state).To(Equal(redfishmock.PowerOn), "system %s", id)
		}
		var pcrs v1alpha1.PowerCycleRemediationList
		Expect(k8s.List(ctx, &pcrs)).To(Succeed())
		Expect(pcrs.Items).To(BeEmpty())
		var leases coordinationv1.LeaseList
		Expect(k8s.List(ctx, &leases, client.InNamespace(leaseNamespace))).To(Succeed())
		Expect(leases.Items).To(BeEmpty())
	}
	for _, m := range mgrs.started() {
		m.Kill()
		logs, err := os.ReadFile(m.LogPath)
		Expect(err).NotTo(HaveOccurred())
		for _, secret := range []string{harness.BMCPassword, ipmisim.Password} {
			Expect(string(logs)).NotTo(ContainSubstring(secret), "%s logged a BMC password (%s)", m.Name, m.LogPath)
		}
		for _, line := range strings.Split(string(logs), "\n") {
			// A refusal because a scenario's namespace was being deleted (an event about its objects, say)
			// is the namespace lifecycle's, not RBAC's.
			terminating := strings.Contains(line, "because it is being terminated")
			if strings.Contains(line, "forbidden") && !terminating && !strings.Contains(line, phaseGateName) && !strings.Contains(line, wedgeGroup) {
				Fail(fmt.Sprintf("%s was refused something config/default's RBAC should allow (%s):\n%s", m.Name, m.LogPath, line))
			}
		}
	}
})

func newCache(scheme *runtime.Scheme) (ctrlcache.Cache, error) {
	return ctrlcache.New(h.World.RESTConfig(), ctrlcache.Options{Scheme: scheme})
}

// managers are the manager processes the suite started. Most scenarios share one (shared); those that
// kill managers replace it.
type managers struct {
	mu     sync.Mutex
	shared *harness.Manager
	all    []*harness.Manager
}

// start starts one more manager process.
func (ms *managers) start(ctx context.Context) *harness.Manager {
	GinkgoHelper()
	m, err := h.StartManager(ctx, managerArgs...)
	Expect(err).NotTo(HaveOccurred())
	ms.mu.Lock()
	ms.all = append(ms.all, m)
	ms.mu.Unlock()
	fmt.Fprintf(GinkgoWriter, "started %s (pid %d, log %s)\n", m.Name, m.PID(), m.LogPath)
	return m
}

// ensure returns the shared manager, starting it if there is none running.
func (ms *managers) ensure(ctx context.Context) *harness.Manager {
	GinkgoHelper()
	ms.mu.Lock()
	m := ms.shared
	ms.mu.Unlock()
	if m != nil && !exited(m) {
		return m
	}
	m = ms.start(ctx)
	ms.setShared(m)
	return m
}

func (ms *managers) setShared(m *harness.Manager) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.shared = m
}

func (ms *managers) started() []*harness.Manager {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return append([]*harness.Manager(nil), ms.all...)
}

func exited(m *harness.Manager) bool {
	select {
	case <-m.Exited():
		return true
	default:
		return false
	}
}

// leaderElectionLease is the Lease the harness's managers elect their leader with.
var leaderElectionLease = client.ObjectKey{Namespace: harness.Namespace, Name: "metalheal-harness"}

// forgetLeader deletes the leader election Lease of a leader that is known to be dead (killed and
// reaped), so that its successor takes over at once instead of after the Lease's 15s: what the Lease's
// expiry would do, sooner. The two-manager scenario does not use it: there the standby takes over on
// its own.
func forgetLeader(ctx context.Context) {
	GinkgoHelper()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaderElectionLease.Namespace, Name: leaderElectionLease.Name}}
	Expect(client.IgnoreNotFound(k8s.Delete(ctx, lease))).To(Succeed())
}

// nodePool hands out worker nodes: each scenario takes fresh ones and labels them as its group.
type nodePool struct {
	mu   sync.Mutex
	next int
	size int
}

// take labels the next n workers with group and returns their names.
func (p *nodePool) take(ctx context.Context, group string, n int) []string {
	GinkgoHelper()
	p.mu.Lock()
	first := p.next + 1
	p.next += n
	last := p.next
	p.mu.Unlock()
	Expect(last).To(BeNumerically("<=", p.size), "the node pool is exhausted: raise workers")
	var names []string
	for i := first; i <= last; i++ {
		name := harness.NodeName(i)
		labelNode(ctx, name, group)
		names = append(names, name)
	}
	return names
}

// labelNode puts a node in a scenario's group.
func labelNode(ctx context.Context, name, group string) {
	GinkgoHelper()
	node := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels[groupLabel] = group
	Expect(k8s.Patch(ctx, node, patch)).To(Succeed())
}

// namespace creates a namespace for a scenario's objects and deletes it afterwards.
func namespace(ctx context.Context, name string) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, ns))).To(Succeed())
	})
	return name
}

// onPower registers what to do when a node's host changes power, for the rest of the scenario.
func onPower(node string, fn func(to redfishmock.PowerState)) {
	powerHooks.Store(node, fn)
	DeferCleanup(func() { powerHooks.Delete(node) })
}

// reportOnFailure prints, when the scenario fails, the timeline of its nodes since it started and where
// the managers' logs are.
func reportOnFailure(start time.Time, names ...string) {
	DeferCleanup(func() {
		if !CurrentSpecReport().Failed() {
			return
		}
		AddReportEntry("timeline", tl.dump(start, names...))
		var logs []string
		for _, m := range mgrs.started() {
			logs = append(logs, m.Name+": "+m.LogPath)
		}
		AddReportEntry("manager logs (set "+world.KeepEnv+"=1 to keep them)", strings.Join(logs, "\n"))
	})
}

func ignoreAlreadyExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
