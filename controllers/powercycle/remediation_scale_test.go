package powercycle

import (
	"context"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/leases"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The remediator in a real manager (real time, informers, workqueue) against 50 Redfish systems that each
// take 200 ms to answer any request, plus one dead BMC whose system never answers. All 50 remediations
// complete, and in a fraction of the time their BMC requests would take one after the other: no worker
// waits on another's BMC, and the dead one delays no one.
var _ = Describe("Many remediations at once", func() {
	It("completes 50 remediations concurrently, and a dead BMC delays no one", func(ctx SpecContext) {
		const (
			hosts   = 50
			latency = 200 * time.Millisecond
		)
		realClock := clock.RealClock{}

		m, err := redfishmock.New().WithSystems(hosts+1).
			WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey]).
			WithPowerDelay(500 * time.Millisecond).Start()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(m.Close)
		Expect(m.SetGlobalFaults(redfishmock.Faults{Latency: latency})).To(Succeed())
		dead := strconv.Itoa(hosts + 1)
		Expect(m.SetFaults(dead, redfishmock.Faults{Latency: time.Hour})).To(Succeed())

		const ns = "many-at-once"
		c := api.client
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bmc-credentials", Namespace: ns},
			StringData: credentials})).To(Succeed())

		// The manager sees this test's namespace only: the package's API server holds other tests' requests.
		mgr, err := env.NewManager(testenv.ManagerOptions{Namespaces: []string{ns}, LeaseNamespace: leases.DefaultNamespace,
			ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {Namespaces: map[string]cache.Config{ns: {}}}}})
		Expect(err).NotTo(HaveOccurred())
		registry := bmc.NewRegistry()
		Expect(registry.Register(bmc.DriverRedfish, redfishFactory)).To(Succeed())
		access := bmcaccess.New(mgr.GetClient(), ns, registry, bmcaccess.Options{RequestTimeout: 2 * time.Second})
		Expect(access.SetupIndexes(ctx, mgr.GetFieldIndexer())).To(Succeed())
		r, err := NewRemediationReconciler(RemediationReconcilerOptions{
			Client:                  mgr.GetClient(),
			APIReader:               mgr.GetAPIReader(),
			Clock:                   realClock,
			Recorder:                mgr.GetEventRecorder(RemediationControllerName),
			Drivers:                 access,
			MaxConcurrentReconciles: hosts + 1,
			BMCCallTimeout:          2 * time.Second,
			PowerPollInterval:       250 * time.Millisecond,
			ManagerNamespace:        ns,
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.SetupWithManager(ctx, mgr)).To(Succeed())
		testenv.RunManager(ctx, GinkgoT(), mgr)

		// The nodes' kubelets: a node reports Ready once its host is powered on.
		nodeOf := func(system string) string { return "many-" + system }
		m.OnPowerChange(func(system string, _, to redfishmock.PowerState) {
			if to != redfishmock.PowerOn {
				return
			}
			go func() {
				n := &corev1.Node{}
				if err := c.Get(context.Background(), client.ObjectKey{Name: nodeOf(system)}, n); err != nil {
					return
				}
				now := metav1.NewTime(realClock.Now())
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
					LastHeartbeatTime: now, LastTransitionTime: now, Reason: "KubeletReady"}}
				_ = c.Status().Update(context.Background(), n)
			}()
		})
		for i := 1; i <= hosts+1; i++ {
			id := strconv.Itoa(i)
			name := nodeOf(id)
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
			Expect(c.Create(ctx, n)).To(Succeed())
			long := metav1.NewTime(realClock.Now().Add(-time.Hour))
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
				LastHeartbeatTime: long, LastTransitionTime: long, Reason: "NodeStatusUnknown"}}
			Expect(c.Status().Update(ctx, n)).To(Succeed())
			Expect(c.Create(ctx, &v1alpha1.BMC{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: v1alpha1.BMCSpec{NodeName: name, Address: mockAddress(m, id),
					CredentialsSecretRef: v1alpha1.SecretReference{Name: "bmc-credentials"}},
			})).To(Succeed())
		}
		m.ResetRequests()

		start := realClock.Now()
		for i := 1; i <= hosts+1; i++ {
			name := nodeOf(strconv.Itoa(i))
			Expect(c.Create(ctx, &v1alpha1.PowerCycleRemediation{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{v1alpha1.AnnotationNodeName: name}},
				Spec:       spec(reboot, 3),
			})).To(Succeed())
		}
		succeeded := func() (int, error) {
			var list v1alpha1.PowerCycleRemediationList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return 0, err
			}
			n := 0
			for _, p := range list.Items {
				if p.Status.Phase == v1alpha1.PhaseSucceeded {
					n++
				}
			}
			return n, nil
		}
		Eventually(succeeded).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Equal(hosts))
		elapsed := realClock.Since(start)

		// What the BMCs saw: every healthy host cycled exactly once, many requests in flight at once.
		requests := slices.DeleteFunc(m.Requests(), func(r redfishmock.Request) bool { return r.System == dead })
		for i := 1; i <= hosts; i++ {
			Expect(m.Resets(strconv.Itoa(i))).To(Equal([]string{"ForceOff", "On"}), "system %d", i)
		}
		serial := time.Duration(len(requests)) * latency
		inFlight := maxInFlight(requests, latency)
		GinkgoWriter.Printf("%d remediations done in %s; their %d BMC requests of %s each would take %s one after the other; up to %d were in flight at once\n",
			hosts, elapsed.Round(time.Millisecond), len(requests), latency, serial, inFlight)
		GinkgoWriter.Printf("reconciles of %s: %v\n", RemediationControllerName, reconcileCounts())
		// Wall time depends on how busy the machine is (CI shares 2 cores with real apiservers); half the
		// serial time still rules out remediations waiting on each other's BMCs, and the overlap of the BMC
		// requests below is the load-independent proof.
		Expect(elapsed).To(BeNumerically("<", serial/2), "remediations ran concurrently")
		Expect(inFlight).To(BeNumerically(">=", 20), "BMC requests overlapped")

		// The dead BMC: its remediation is stuck waiting, reported, and cost the others nothing.
		p := &v1alpha1.PowerCycleRemediation{}
		Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: nodeOf(dead)}, p)).To(Succeed())
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhasePoweringOff))
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady)).To(MatchFields(v1alpha1.ReasonBMCTimeout, metav1.ConditionFalse))
		Expect(m.Resets(dead)).To(BeEmpty())
	})
})

// maxInFlight is the largest number of requests that arrived within one latency of each other: requests
// the BMCs were answering at the same time.
func maxInFlight(requests []redfishmock.Request, latency time.Duration) int {
	times := make([]time.Time, 0, len(requests))
	for _, r := range requests {
		times = append(times, r.Time)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	best, lo := 0, 0
	for hi, t := range times {
		for t.Sub(times[lo]) >= latency {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// reconcileCounts reads controller-runtime's reconcile counter for the remediator, by result.
func reconcileCounts() map[string]float64 {
	GinkgoHelper()
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] == RemediationControllerName {
				out[labels["result"]] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}
