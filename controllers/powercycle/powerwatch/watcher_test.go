package powerwatch

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/internal/workload"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/fake"
)

// wait bounds the waits on a running manager: generous, for a shared, loaded machine.
const wait = 20 * time.Second

var unreachable = &bmc.Error{Driver: "fake", Operation: bmc.OperationWatchPower, Kind: bmc.ErrUnreachable}

// remediations is a fake remediator: the hosts it says it is at work on.
type remediations struct {
	mu    sync.Mutex
	hosts map[string]bool
}

func (r *remediations) Remediating(_ context.Context, host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hosts[host]
}

func (r *remediations) set(host string, at bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hosts[host] = at
}

// world is one spec's manager with the power watch, its fake BMCs, clock, recorder and remediator.
type world struct {
	*testenv.World
	hosts        *fake.Factory
	remediations *remediations
	watcher      *Watcher
	cached       client.Reader // the manager's cache: what the watch reads
}

func startWorld(ctx context.Context, mutate ...func(*Options)) *world {
	w := &world{World: env.NewWorld(ctx, GinkgoT(), testenv.WorldOptions{GenerateNamespace: "powerwatch-test-"}),
		hosts: fake.NewFactory(bmc.PowerStateOn), remediations: &remediations{hosts: map[string]bool{}}}
	mgr, err := env.NewManager(testenv.ManagerOptions{Logger: GinkgoLogr,
		ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {Namespaces: map[string]cache.Config{w.Namespace: {}}}}})
	Expect(err).NotTo(HaveOccurred())
	reg := bmc.NewRegistry()
	Expect(reg.Register(bmc.DriverRedfish, w.hosts.New)).To(Succeed())
	access := bmcaccess.New(mgr.GetClient(), w.Namespace, reg, bmcaccess.Options{})
	opts := Options{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Access: access, Recorder: w.Events, Clock: w.Clock,
		Remediations: w.remediations, ProbeTimeout: 500 * time.Millisecond}
	for _, m := range mutate {
		m(&opts)
	}
	w.cached = mgr.GetClient()
	w.watcher, err = New(opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(w.watcher.SetupWithManager(ctx, mgr)).To(Succeed())
	Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "bmc"},
		StringData: map[string]string{"username": "admin", "password": "pw"}})).To(Succeed())

	DeferCleanup(func() {
		// Cleanups run last in, first out: RunManager's, registered after this one, has stopped the manager.
		Expect(w.watcher.goroutines.Load()).To(BeZero(), "every watch ends with the manager")
	})
	testenv.RunManager(context.WithoutCancel(ctx), GinkgoT(), mgr)
	return w
}

// kubeletPort is a host's kubelet port: a listener that accepts (the host runs) until stopped.
type kubeletPort struct {
	ln   net.Listener
	port int32
}

func startKubelet() *kubeletPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	k := &kubeletPort{ln: ln, port: int32(p)}
	DeferCleanup(k.stop)
	return k
}

// stop closes the port: connections are refused from now on.
func (k *kubeletPort) stop() { _ = k.ln.Close() }

// silentKubelet is a kubelet port where nothing listens.
func silentKubelet() *kubeletPort {
	k := startKubelet()
	k.stop()
	return k
}

// addHost creates a Node whose kubelet listens at k (nil: the Node publishes no endpoint) and its BMC
// with watch, and returns the host's fake BMC.
func (w *world) addHost(ctx context.Context, name string, watch *v1alpha1.PowerWatch, k *kubeletPort) (*fake.Driver, *v1alpha1.BMC) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.Namespace + "-" + name}}
	Expect(k8sClient.Create(ctx, node)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if k != nil {
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = k.port
	}
	Expect(k8sClient.Status().Update(ctx, node)).To(Succeed())

	address := "redfish://" + name + ".bmc.example.com/redfish/v1/Systems/" + strings.TrimPrefix(w.Namespace, "powerwatch-test-")
	d := w.hosts.Driver(address)
	b := &v1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: name},
		Spec: v1alpha1.BMCSpec{NodeName: node.Name, Address: address, CredentialsSecretRef: v1alpha1.SecretReference{Name: "bmc"}, PowerWatch: watch}}
	Expect(k8sClient.Create(ctx, b)).To(Succeed())
	return d, b
}

// condition is the Node's PoweredOff condition as the API server holds it, nil when it has none.
func condition(ctx context.Context, b *v1alpha1.BMC) *corev1.NodeCondition {
	n := &corev1.Node{}
	Expect(k8sClient.Get(ctx, types.NamespacedName{Name: b.Spec.NodeName}, n)).To(Succeed())
	return poweredOff(n)
}

// conditionState is "Status/Reason" of the Node's PoweredOff condition, "" when it has none.
func conditionState(ctx context.Context, b *v1alpha1.BMC) func() string {
	return func() string {
		if c := condition(ctx, b); c != nil {
			return string(c.Status) + "/" + c.Reason
		}
		return ""
	}
}

// kubeletReports has the host's kubelet report Ready (a heartbeat) after its Node's PoweredOff turned True,
// as a kubelet does when its host has booted, and waits for the manager's cache to show it.
func (w *world) kubeletReports(ctx context.Context, b *v1alpha1.BMC) {
	n := &corev1.Node{}
	Expect(k8sClient.Get(ctx, types.NamespacedName{Name: b.Spec.NodeName}, n)).To(Succeed())
	since := poweredOff(n).LastTransitionTime.Add(2 * time.Second)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = corev1.ConditionTrue
			n.Status.Conditions[i].LastHeartbeatTime = metav1.NewTime(since)
		}
	}
	Expect(k8sClient.Status().Update(ctx, n)).To(Succeed())
	Eventually(func() string {
		cached := &corev1.Node{}
		Expect(w.cached.Get(ctx, types.NamespacedName{Name: n.Name}, cached)).To(Succeed())
		return cached.ResourceVersion
	}).WithTimeout(wait).Should(Equal(n.ResourceVersion))
}

// events returns the events emitted so far, as "Type Reason note".
func (w *world) events() []string {
	var out []string
	for _, e := range w.Events.All() {
		out = append(out, e.Type+" "+e.Reason+" "+e.Note)
	}
	return out
}

// eventsWith counts the events emitted so far with this reason.
func (w *world) eventsWith(reason string) func() int {
	return func() int { return len(w.Events.With(reason)) }
}

func reads(d *fake.Driver) func() int {
	return func() int { return d.CallCount(bmc.OperationPowerState) }
}

func decisions(act action) float64 { return testutil.ToFloat64(Decisions.WithLabelValues(string(act))) }

var streamed = &v1alpha1.PowerWatch{EventStream: v1alpha1.PowerWatchEventStreamAuto, PollIntervalSeconds: 5}

var _ = Describe("Power watch", func() {
	It("sets PoweredOff=True when the BMC's stream reports a power loss nobody asked for, and False when it is on again", func(ctx SpecContext) {
		w := startWorld(ctx)
		d, b := w.addHost(ctx, "lost", streamed, silentKubelet())
		Eventually(d.OpenStreams).WithTimeout(wait).Should(Equal(1))

		d.SetPowerState(bmc.PowerStateOff) // the stream tells; the clock does not move: no poll is due
		Eventually(conditionState(ctx, b)).WithTimeout(wait).Should(Equal("True/" + v1alpha1.ReasonBMCReportedOff))
		msg := condition(ctx, b).Message
		Expect(msg).To(ContainSubstring("its event stream"))
		Expect(msg).To(ContainSubstring("read it off again"))
		Expect(msg).To(ContainSubstring("did not answer"))
		Eventually(w.eventsWith(EventHostPoweredOff)).WithTimeout(wait).Should(Equal(1), "announced once the condition is written")
		at := reads(d)()
		d.Notify() // a burst of events about the same loss: read, but nothing written or said again
		d.Notify()
		Eventually(reads(d)).WithTimeout(wait).Should(BeNumerically(">", at))
		n := &corev1.Node{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Name: b.Spec.NodeName}, n)).To(Succeed())
		Expect(n.Status.Conditions).To(ContainElement(HaveField("Type", corev1.NodeReady)), "the kubelet's conditions stay")

		By("powered on: the host is back only once its kubelet reports Ready since (its Node's Ready is the dead kubelet's last word till then)")
		at = reads(d)()
		d.SetPowerState(bmc.PowerStateOn)
		Eventually(reads(d)).WithTimeout(wait).Should(BeNumerically(">", at))
		Expect(conditionState(ctx, b)()).To(Equal("True/"+v1alpha1.ReasonBMCReportedOff), "booting, not back")
		w.kubeletReports(ctx, b)
		Eventually(w.Clock.HasWaiters).WithTimeout(wait).Should(BeTrue())
		w.Clock.Step(5 * time.Second) // the watch polls while the host comes back, stream or not
		Eventually(conditionState(ctx, b)).WithTimeout(wait).Should(Equal("False/" + v1alpha1.ReasonBMCReportedOn))
		Expect(condition(ctx, b).Message).To(ContainSubstring("its kubelet reported Ready at"))
		Eventually(w.eventsWith(EventHostPoweredOn)).WithTimeout(wait).Should(Equal(1))
		Expect(w.eventsWith(EventHostPoweredOff)()).To(Equal(1), "the burst said nothing more (the readings are one at a time: done before this one)")
	})

	It("leaves a power-off to the remediation at work on the host", func(ctx SpecContext) {
		w := startWorld(ctx)
		d, b := w.addHost(ctx, "remediated", streamed, silentKubelet())
		Eventually(d.OpenStreams).WithTimeout(wait).Should(Equal(1))
		w.remediations.set(b.Spec.NodeName, true)

		before := decisions(actRemediating)
		d.SetPowerState(bmc.PowerStateOff)
		Eventually(func() float64 { return decisions(actRemediating) }).WithTimeout(wait).Should(Equal(before + 1))
		Expect(condition(ctx, b)).To(BeNil())
		Expect(w.events()).To(BeEmpty())
	})

	It("does not fence a host whose kubelet answers while its BMC says off: one warning, however many readings", func(ctx SpecContext) {
		w := startWorld(ctx)
		k := startKubelet()
		d, b := w.addHost(ctx, "liar", streamed, k)
		Eventually(d.OpenStreams).WithTimeout(wait).Should(Equal(1))

		d.SetPowerState(bmc.PowerStateOff) // a lying BMC: the host runs
		Eventually(w.eventsWith(EventPowerReadingContradicted)).WithTimeout(wait).Should(Equal(1))
		for range 3 {
			at := reads(d)()
			d.Notify()
			Eventually(reads(d)).WithTimeout(wait).Should(Equal(at+2), "read, and read again to confirm")
		}
		Expect(condition(ctx, b)).To(BeNil())

		By("the kubelet goes silent too: now the readings agree")
		k.stop()
		d.Notify()
		Eventually(conditionState(ctx, b)).WithTimeout(wait).Should(Equal("True/" + v1alpha1.ReasonBMCReportedOff))
		Expect(w.eventsWith(EventPowerReadingContradicted)()).To(Equal(1), "one warning for the whole contradiction")
		Expect(w.events()).To(ContainElement(ContainSubstring("kubelet at 127.0.0.1:" + strconv.Itoa(int(k.port)) + " answers")))
	})

	It("does not fence a host whose Node publishes no kubelet endpoint", func(ctx SpecContext) {
		w := startWorld(ctx)
		d, b := w.addHost(ctx, "noendpoint", streamed, nil)
		Eventually(d.OpenStreams).WithTimeout(wait).Should(Equal(1))
		d.SetPowerState(bmc.PowerStateOff)
		Eventually(w.eventsWith(EventPowerReadingUnverifiable)).WithTimeout(wait).Should(Equal(1))
		Expect(condition(ctx, b)).To(BeNil())
	})

	It("polls a BMC without an event stream, and catches a power loss within the interval", func(ctx SpecContext) {
		w := startWorld(ctx)
		d, b := w.addHostUnsupported(ctx, "polled")
		// The first reading at the start, the attempt at a stream, and the reading after it failed.
		Eventually(func() int { return d.CallCount(bmc.OperationWatchPower) }).WithTimeout(wait).Should(Equal(1))
		Eventually(reads(d)).WithTimeout(wait).Should(Equal(2))

		d.SetPowerStateQuietly(bmc.PowerStateOff)
		Expect(reads(d)()).To(Equal(2), "nothing reads the power until the poll")
		w.Clock.Step(5 * time.Second)
		Eventually(conditionState(ctx, b)).WithTimeout(wait).Should(Equal("True/" + v1alpha1.ReasonBMCReportedOff))
		Expect(condition(ctx, b).Message).To(ContainSubstring("(a poll)"))
		Expect(d.CallCount(bmc.OperationWatchPower)).To(Equal(1), "a BMC without a stream is not asked again at once")

		By("asked again after a while, a BMC that offers a stream now gets it followed")
		d.SetWatchUnsupported(false)
		w.Clock.Step(UnsupportedRecheck)
		Eventually(d.OpenStreams).WithTimeout(wait).Should(Equal(1))
	})

	It("polls while a dropped stream is down, and opens it again with backoff", func(ctx SpecContext) {
		w := startWorld(ctx)
		d, b := w.addHost(ctx, "dropped", streamed, silentKubelet())
		Eventually(d.OpenStreams).WithTimeout(wait).Should(Equal(1))
		Eventually(reads(d)).WithTimeout(wait).Should(Equal(1))

		d.FailAlways(bmc.OperationWatchPower, unreachable) // the BMC refuses new streams for a while
		Expect(d.DropStreams(unreachable)).To(Equal(1))
		Eventually(reads(d)).WithTimeout(wait).Should(Equal(2), "a change may have been missed: read at once")

		d.SetPowerStateQuietly(bmc.PowerStateOff) // no stream to tell
		Eventually(w.Clock.HasWaiters).WithTimeout(wait).Should(BeTrue())
		w.Clock.Step(5 * time.Second) // the poll's interval; the reopening (after 1s) fails again
		Eventually(conditionState(ctx, b)).WithTimeout(wait).Should(Equal("True/" + v1alpha1.ReasonBMCReportedOff))
		Expect(condition(ctx, b).Message).To(ContainSubstring("(a poll)"))
		Expect(d.OpenStreams()).To(BeZero())

		d.FailAlways(bmc.OperationWatchPower, nil)
		w.Clock.Step(DefaultStreamBackoffMax)
		Eventually(d.OpenStreams).WithTimeout(wait).Should(Equal(1), "the stream is opened again")
		Expect(d.CallCount(bmc.OperationWatchPower)).To(BeNumerically(">=", 3))
		w.kubeletReports(ctx, b)
		d.SetPowerState(bmc.PowerStateOn)
		Eventually(conditionState(ctx, b)).WithTimeout(wait).Should(Equal("False/" + v1alpha1.ReasonBMCReportedOn))
		Expect(condition(ctx, b).Message).To(ContainSubstring("its event stream"))
	})

	It("sets the condition on the Node of the workload cluster the BMC names, not on this cluster's Node of that name", func(ctx SpecContext) {
		env, wcfg, err := testenv.Start(testenv.Options{SkipCRDs: true})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(env.Stop)
		edge, err := client.New(wcfg, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		clusters := workload.New(workload.Options{})
		DeferCleanup(clusters.StopAll)
		w := startWorld(ctx, func(o *Options) { o.WorkloadClusters = clusters })
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "edge-a" + workload.KubeconfigSecretSuffix},
			Data: map[string][]byte{workload.KubeconfigSecretKey: env.KubeConfig}})).To(Succeed())

		// This cluster's Node of the name (addHost), and edge-a's, whose BMC it is.
		d, b := w.addHost(ctx, "edge", nil, silentKubelet())
		Expect(k8sClient.Delete(ctx, b)).To(Succeed()) // recreated below, naming edge-a
		k := silentKubelet()
		remote := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: b.Spec.NodeName}}
		Expect(edge.Create(ctx, remote)).To(Succeed())
		remote.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		remote.Status.DaemonEndpoints.KubeletEndpoint.Port = k.port
		Expect(edge.Status().Update(ctx, remote)).To(Succeed())
		b = &v1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "edge-a-" + b.Name}, Spec: *b.Spec.DeepCopy()}
		b.Spec.Cluster = &v1alpha1.ClusterReference{Namespace: w.Namespace, Name: "edge-a"}
		b.Spec.PowerWatch = streamed
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Eventually(d.OpenStreams).WithTimeout(wait).Should(Equal(1))

		d.SetPowerState(bmc.PowerStateOff)
		Eventually(func() string {
			n := &corev1.Node{}
			Expect(edge.Get(ctx, client.ObjectKeyFromObject(remote), n)).To(Succeed())
			if c := poweredOff(n); c != nil {
				return string(c.Status) + "/" + c.Reason
			}
			return ""
		}).WithTimeout(wait).Should(Equal("True/" + v1alpha1.ReasonBMCReportedOff))
		Expect(condition(ctx, b)).To(BeNil(), "this cluster's Node of the same name is another host")
	})

	It("restarts a watch whose spec changes and stops it, goroutines and stream, when the BMC goes", func(ctx SpecContext) {
		w := startWorld(ctx)
		d, b := w.addHost(ctx, "deleted", streamed, silentKubelet())
		Eventually(d.OpenStreams).WithTimeout(wait).Should(Equal(1))
		Expect(w.watcher.watching()).To(Equal(1))
		Expect(w.watcher.goroutines.Load()).To(Equal(int64(2)), "one for the watch, one for its stream")

		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
		b.Spec.PowerWatch = &v1alpha1.PowerWatch{EventStream: v1alpha1.PowerWatchEventStreamDisabled, PollIntervalSeconds: 60}
		Expect(k8sClient.Update(ctx, b)).To(Succeed())
		Eventually(d.OpenStreams).WithTimeout(wait).Should(BeZero(), "eventStream: Disabled")
		Eventually(w.watcher.goroutines.Load).WithTimeout(wait).Should(Equal(int64(1)))

		Expect(k8sClient.Delete(ctx, b)).To(Succeed())
		Eventually(w.watcher.goroutines.Load).WithTimeout(wait).Should(BeZero())
		Expect(w.watcher.watching()).To(BeZero())
	})
})

// addHostUnsupported adds a host whose BMC offers no event stream, polled every 5s.
func (w *world) addHostUnsupported(ctx context.Context, name string) (*fake.Driver, *v1alpha1.BMC) {
	address := "redfish://" + name + ".bmc.example.com/redfish/v1/Systems/" + strings.TrimPrefix(w.Namespace, "powerwatch-test-")
	w.hosts.Driver(address).SetWatchUnsupported(true)
	return w.addHost(ctx, name, streamed, silentKubelet())
}
