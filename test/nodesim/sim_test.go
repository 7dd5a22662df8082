package nodesim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
	"github.com/metalheal/metalheal/test/world"
)

// The world is started once, by the first test that needs it, and stopped by TestMain.
var (
	worldOnce sync.Once
	theWorld  *world.World
	worldErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theWorld != nil {
		if err := theWorld.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the world:", err)
		}
	}
	os.Exit(code)
}

// sharedWorld returns the package's world (the default node monitor grace period: 20s).
func sharedWorld(t *testing.T) *world.World {
	t.Helper()
	worldOnce.Do(func() { theWorld, worldErr = world.Start(t.Context(), world.Options{}) })
	if worldErr != nil {
		t.Fatalf("starting the world: %v", worldErr)
	}
	t.Logf("kubectl --kubeconfig=%s (logs in %s)", theWorld.Kubeconfig(), theWorld.LogDir())
	return theWorld
}

// Timings of the fault tests: fast heartbeats, a short boot, a short BMC.
const (
	leaseInterval = 2 * time.Second
	bootDelay     = 2 * time.Second
	powerDelay    = time.Second
)

// The two tests below run side by side in one world: the fault scenarios among 2,000 live nodes.

func TestPowerAndFaults(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := sharedWorld(t)
	ctx := t.Context()
	grace := w.NodeMonitorGracePeriod()
	cs, err := nodesim.NewClient(w.RESTConfig(), "faults")
	g.Expect(err).NotTo(HaveOccurred())

	bmc, err := redfishmock.New().WithSystems(6).WithCredentials("admin", "secret").WithPowerDelay(powerDelay).Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(bmc.Close)
	power, err := nodesim.RedfishPowerByID(bmc, func(id string) string { return "fault-" + id })
	g.Expect(err).NotTo(HaveOccurred())
	sim := nodesim.New(cs, nodesim.Options{Name: "faults", Power: power, LeaseInterval: leaseInterval, BootDelay: bootDelay})
	g.Expect(sim.Start(ctx)).To(Succeed())
	t.Cleanup(func() { _ = sim.RemoveAll(context.WithoutCancel(ctx)) })
	g.Expect(sim.AddNodes(ctx, nodesim.Nodes("fault", 6, map[string]string{"pool": "faults"})...)).To(Succeed())

	// A BMC client's view: reset a system through the Redfish API.
	reset := func(g Gomega, id, resetType string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, bmc.URL()+bmc.SystemPath(id)+"/Actions/ComputerSystem.Reset",
			bytes.NewBufferString(fmt.Sprintf(`{"ResetType":%q}`, resetType)))
		g.Expect(err).NotTo(HaveOccurred())
		req.SetBasicAuth("admin", "secret")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusNoContent))
	}
	// readyBecomes waits for a node's Ready condition to reach a status, and returns the node.
	readyBecomes := func(g Gomega, name string, want corev1.ConditionStatus, within time.Duration) *corev1.Node {
		var node *corev1.Node
		g.Eventually(func(g Gomega) {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(readyStatus(n)).To(Equal(want))
			node = n
		}).WithTimeout(within).WithPolling(200 * time.Millisecond).Should(Succeed())
		return node
	}
	unknownWithin := grace + 10*time.Second
	readyWithin := powerDelay + bootDelay + 10*time.Second

	t.Run("registered nodes look like a kubelet's", func(t *testing.T) {
		g := NewWithT(t)
		n, err := cs.CoreV1().Nodes().Get(ctx, "fault-1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(readyStatus(n)).To(Equal(corev1.ConditionTrue))
		g.Expect(n.Labels).To(HaveKeyWithValue(corev1.LabelHostname, "fault-1"))
		g.Expect(n.Labels).To(HaveKeyWithValue("pool", "faults"))
		g.Expect(n.Labels).To(HaveKeyWithValue(nodesim.SimulatorLabel, "faults"))
		g.Expect(n.Status.Capacity.Cpu().Equal(resource.MustParse("8"))).To(BeTrue())
		g.Expect(n.Status.Allocatable.Pods().Value()).To(BeEquivalentTo(110))
		g.Expect(n.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.16.0.1"}))
		g.Expect(n.Status.NodeInfo.BootID).To(Equal("fault-1-boot-1"))
		lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "fault-1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(*lease.Spec.HolderIdentity).To(Equal("fault-1"))
		g.Expect(lease.OwnerReferences).To(ConsistOf(HaveField("UID", n.UID)))
		// The lease is renewed every interval.
		first := lease.Spec.RenewTime.Time
		g.Eventually(func(g Gomega) {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "fault-1", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(l.Spec.RenewTime.Time).To(BeTemporally(">", first))
		}).WithTimeout(3 * leaseInterval).Should(Succeed())
	})

	// The scenarios run at once, each on its own node (not with t.Parallel: -parallel defaults to the
	// number of CPUs, and these tests wait on real processes rather than compute).
	scenarios := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"power off turns the node Unknown within the grace period; power on brings it back Ready", func(t *testing.T) {
			g := NewWithT(t)
			off := time.Now()
			reset(g, "1", "ForceOff")
			n := readyBecomes(g, "fault-1", corev1.ConditionUnknown, unknownWithin)
			// The last heartbeat came at most one lease interval before the power went.
			g.Expect(time.Since(off)).To(BeNumerically(">=", grace-leaseInterval-time.Second))
			g.Expect(sim.State("fault-1")).To(Equal(nodesim.StateOff))
			bootBefore := n.Status.NodeInfo.BootID

			on := time.Now()
			reset(g, "1", "On")
			n = readyBecomes(g, "fault-1", corev1.ConditionTrue, readyWithin)
			g.Expect(time.Since(on)).To(BeNumerically(">=", powerDelay+bootDelay))
			g.Expect(n.Status.NodeInfo.BootID).NotTo(Equal(bootBefore), "a boot has a new boot ID")
			// The kubelet is Running once its boot has also renewed the lease, just after the Ready post.
			g.Eventually(sim.State).WithArguments("fault-1").Should(Equal(nodesim.StateRunning))
		}},
		{"a transient fault turns the node Unknown and a power cycle cures it", func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(sim.InjectFault("fault-2", nodesim.FaultTransient)).To(Succeed())
			g.Expect(sim.State("fault-2")).To(Equal(nodesim.StateHung))
			readyBecomes(g, "fault-2", corev1.ConditionUnknown, unknownWithin)
			on, err := bmc.PowerState("2")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(on).To(Equal(redfishmock.PowerOn), "a hung kubelet on a live host")

			reset(g, "2", "ForceRestart")
			readyBecomes(g, "fault-2", corev1.ConditionTrue, readyWithin)
			// The kubelet is Running once its boot has also renewed the lease, just after the Ready post.
			g.Eventually(sim.State).WithArguments("fault-2").Should(Equal(nodesim.StateRunning))
		}},
		{"a persistent fault keeps the node Unknown after power on", func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(sim.InjectFault("fault-3", nodesim.FaultPersistent)).To(Succeed())
			readyBecomes(g, "fault-3", corev1.ConditionUnknown, unknownWithin)
			reset(g, "3", "ForceOff")
			g.Eventually(bmc.PowerState).WithArguments("3").WithTimeout(5 * powerDelay).Should(Equal(redfishmock.PowerOff))
			reset(g, "3", "On")
			g.Eventually(bmc.PowerState).WithArguments("3").WithTimeout(5 * powerDelay).Should(Equal(redfishmock.PowerOn))
			lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "fault-3", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			// Long enough for a healthy host to have booted and renewed its lease twice.
			g.Consistently(func(g Gomega) {
				n, err := cs.CoreV1().Nodes().Get(ctx, "fault-3", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(readyStatus(n)).To(Equal(corev1.ConditionUnknown))
				l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "fault-3", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(l.Spec.RenewTime.Time).To(Equal(lease.Spec.RenewTime.Time))
			}).WithTimeout(bootDelay + 3*leaseInterval).WithPolling(500 * time.Millisecond).Should(Succeed())
			g.Expect(sim.State("fault-3")).To(Equal(nodesim.StateBroken))
		}},
		{"PodGC force-deletes a pod on a powered-off node with the out-of-service taint", func(t *testing.T) {
			g := NewWithT(t)
			_, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			pod, err := sim.RunPod(ctx, nodesim.NewPod("default", "stateful", "fault-4", nodesim.WithClaim("data")))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))

			reset(g, "4", "ForceOff")
			readyBecomes(g, "fault-4", corev1.ConditionUnknown, unknownWithin)
			// Nothing deletes the pod of a silent node by itself...
			pod, err = cs.CoreV1().Pods("default").Get(ctx, "stateful", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pod.DeletionTimestamp).To(BeNil())

			// ...until the node is fenced: taint-eviction deletes it, no kubelet finishes the deletion, and
			// PodGC (every 20s) force-deletes it.
			n, err := cs.CoreV1().Nodes().Get(ctx, "fault-4", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
			_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Eventually(func() error {
				_, err := cs.CoreV1().Pods("default").Get(ctx, "stateful", metav1.GetOptions{})
				return err
			}).WithTimeout(45 * time.Second).WithPolling(500 * time.Millisecond).Should(Satisfy(apierrors.IsNotFound))
		}},
		{"the kubelet of a live node runs its pods and finishes their deletion", func(t *testing.T) {
			g := NewWithT(t)
			// Created without RunPod: the simulated kubelet notices it.
			_, err := cs.CoreV1().Pods("default").Create(ctx, nodesim.NewPod("default", "plain", "fault-5"), metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Eventually(func(g Gomega) {
				p, err := cs.CoreV1().Pods("default").Get(ctx, "plain", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
				g.Expect(p.Status.HostIP).To(Equal("172.16.0.5"))
			}).WithTimeout(10 * time.Second).Should(Succeed())
			// A graceful deletion (30s) ends as soon as the kubelet has stopped the containers.
			g.Expect(cs.CoreV1().Pods("default").Delete(ctx, "plain", metav1.DeleteOptions{})).To(Succeed())
			g.Eventually(func() error {
				_, err := cs.CoreV1().Pods("default").Get(ctx, "plain", metav1.GetOptions{})
				return err
			}).WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
		}},
		{"a live kubelet repairs a Ready condition someone else changed", func(t *testing.T) {
			g := NewWithT(t)
			n, err := cs.CoreV1().Nodes().Get(ctx, "fault-6", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			for i := range n.Status.Conditions {
				if n.Status.Conditions[i].Type == corev1.NodeReady {
					n.Status.Conditions[i].Status = corev1.ConditionUnknown
					n.Status.Conditions[i].Reason = "NodeStatusUnknown"
				}
			}
			_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			readyBecomes(g, "fault-6", corev1.ConditionTrue, leaseInterval+5*time.Second)
		}},
	}
	var wg sync.WaitGroup
	for _, sc := range scenarios {
		wg.Go(func() { t.Run(sc.name, sc.run) })
	}
	wg.Wait()

	st := sim.Stats()
	t.Logf("fault simulator: %+v", st)
	g.Expect(st.Nodes).To(Equal(6))
}

func TestScale(t *testing.T) {
	const nodes = 2000
	const keepAlive = 30 * time.Second
	t.Parallel()
	g := NewWithT(t)
	w := sharedWorld(t)
	ctx := t.Context()
	cs, err := nodesim.NewClient(w.RESTConfig(), "scale")
	g.Expect(err).NotTo(HaveOccurred())
	sim := nodesim.New(cs, nodesim.Options{Name: "scale"}) // a kubelet's timings: lease every 10s
	g.Expect(sim.Start(ctx)).To(Succeed())
	t.Cleanup(func() { _ = sim.RemoveAll(context.WithoutCancel(ctx)) })

	cpuBefore := selfCPU(t)
	start := time.Now()
	g.Expect(sim.AddNodes(ctx, nodesim.Nodes("scale", nodes, nil)...)).To(Succeed())
	registered := time.Now()
	cpuRegistered := selfCPU(t)
	procsBefore := usage(t, w)

	// Every node stays Ready: the node lifecycle controller sees every lease renewed in time.
	g.Consistently(func(g Gomega) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesim.SimulatorLabel + "=scale"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(list.Items).To(HaveLen(nodes))
		for i := range list.Items {
			g.Expect(readyStatus(&list.Items[i])).To(Equal(corev1.ConditionTrue), list.Items[i].Name)
		}
	}).WithTimeout(keepAlive).WithPolling(10 * time.Second).Should(Succeed())
	window := time.Since(registered)
	cpuKept := selfCPU(t) - cpuRegistered
	procsAfter := usage(t, w)

	// Nobody marked a node Unknown in between, even briefly: every Ready condition is the one posted at
	// registration (a repair would have moved its transition time).
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesim.SimulatorLabel + "=scale"})
	g.Expect(err).NotTo(HaveOccurred())
	for i := range list.Items {
		g.Expect(readyTransition(&list.Items[i])).To(BeTemporally("<=", registered.Add(time.Second)), list.Items[i].Name)
	}
	st := sim.Stats()
	g.Expect(st.Errors).To(BeZero())
	g.Expect(st.States[nodesim.StateRunning]).To(Equal(nodes))
	// Each lease is first renewed within one interval of registration, then every interval.
	g.Expect(st.LeaseRenewals).To(BeNumerically(">=", int64(nodes)*int64(window/nodesim.DefaultLeaseInterval-1)))
	// Far from the grace period (20s) even on a busy machine.
	g.Expect(st.MaxLeaseDelay).To(BeNumerically("<", w.NodeMonitorGracePeriod()/4), "the simulator fell behind")
	g.Expect(sim.TakeMaxLeaseDelay()).To(Equal(st.MaxLeaseDelay))
	g.Expect(sim.Stats().MaxLeaseDelay).To(BeNumerically("<=", st.MaxLeaseDelay), "started over")

	load := cpuKept.Seconds() / window.Seconds()
	t.Logf("%d nodes registered in %s (simulator CPU %s); kept alive %s: %d lease renewals, %d status posts, worst lease delay %s; simulator CPU %s = %.1f%% of a core",
		nodes, registered.Sub(start).Round(time.Millisecond), (cpuRegistered - cpuBefore).Round(time.Millisecond),
		window.Round(time.Millisecond), st.LeaseRenewals, st.StatusPosts, st.MaxLeaseDelay.Round(time.Millisecond),
		cpuKept.Round(time.Millisecond), 100*load)
	for name, before := range procsBefore {
		after := procsAfter[name]
		t.Logf("  %s: CPU %.1f%% of a core while keeping alive, RSS %d MiB", name,
			100*(after.CPU-before.CPU).Seconds()/window.Seconds(), after.RSS>>20)
	}
	// Bounded: heartbeats of thousands of nodes cost a fraction of a core (race detector included).
	g.Expect(load).To(BeNumerically("<", 0.75), "simulator CPU per second of keep-alive")
}

func TestStopsWithItsContext(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := sharedWorld(t)
	cs, err := nodesim.NewClient(w.RESTConfig(), "stop")
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(t.Context())
	sim := nodesim.New(cs, nodesim.Options{Name: "stop", LeaseInterval: leaseInterval})
	g.Expect(sim.Start(ctx)).To(Succeed())
	t.Cleanup(func() { _ = sim.RemoveAll(context.WithoutCancel(t.Context())) })
	g.Expect(sim.AddNodes(ctx, nodesim.Nodes("stop", 1, nil)...)).To(Succeed())

	cancel()
	g.Eventually(sim.Done()).Should(BeClosed())
	lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), "stop-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	// Every kubelet of a stopped simulator is silent.
	g.Consistently(func(g Gomega) {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), "stop-1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.Spec.RenewTime.Time).To(Equal(lease.Spec.RenewTime.Time))
	}).WithTimeout(3 * leaseInterval).WithPolling(500 * time.Millisecond).Should(Succeed())
	g.Expect(errors.Is(sim.AddNodes(t.Context(), nodesim.Nodes("other", 1, nil)...), nodesim.ErrStopped)).To(BeTrue())
}

// A node registers with the providerID its spec gives (the kubelet's --provider-id), the one a Cluster
// API Machine names; a node given none registers without.
func TestRegistersProviderID(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := sharedWorld(t)
	cs, err := nodesim.NewClient(w.RESTConfig(), "provider")
	g.Expect(err).NotTo(HaveOccurred())
	sim := nodesim.New(cs, nodesim.Options{Name: "provider", LeaseInterval: leaseInterval})
	g.Expect(sim.Start(t.Context())).To(Succeed())
	t.Cleanup(func() { _ = sim.RemoveAll(context.WithoutCancel(t.Context())) })
	g.Expect(sim.AddNodes(t.Context(), nodesim.NodeSpec{Name: "provider-1", ProviderID: "nodesim://fleet-a/provider-1"},
		nodesim.NodeSpec{Name: "provider-2"})).To(Succeed())

	n, err := cs.CoreV1().Nodes().Get(t.Context(), "provider-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.Spec.ProviderID).To(Equal("nodesim://fleet-a/provider-1"))
	n, err = cs.CoreV1().Nodes().Get(t.Context(), "provider-2", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.Spec.ProviderID).To(BeEmpty())
}

// readyStatus is the status of a node's Ready condition, "" without one.
func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// readyTransition is when a node's Ready condition last changed.
func readyTransition(n *corev1.Node) time.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// selfCPU is the CPU time this test process has used.
func selfCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// usage reads the world's processes' usage, by name.
func usage(t *testing.T, w *world.World) map[string]world.Usage {
	t.Helper()
	procs, err := w.Processes()
	if err != nil {
		t.Fatalf("processes: %v", err)
	}
	out := map[string]world.Usage{}
	for _, p := range procs {
		u, err := world.ProcessUsage(p.PID)
		if err != nil {
			t.Fatalf("usage of %s: %v", p.Name, err)
		}
		out[p.Name] = u
	}
	return out
}
