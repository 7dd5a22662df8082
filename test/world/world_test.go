package world_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/metalheal/metalheal/test/world"
)

const grace = 8 * time.Second

func TestWorld(t *testing.T) {
	g := NewWithT(t)
	w, err := world.Start(t.Context(), world.Options{NodeMonitorGracePeriod: grace})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = w.Stop() })
	cs, err := kubernetes.NewForConfig(w.RESTConfig())
	g.Expect(err).NotTo(HaveOccurred())

	t.Run("live", func(t *testing.T) {
		t.Run("the admin kubeconfig file reaches the API server", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			cfg, err := clientcmd.BuildConfigFromFlags("", w.Kubeconfig())
			g.Expect(err).NotTo(HaveOccurred())
			kc, err := kubernetes.NewForConfig(cfg)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = kc.CoreV1().Namespaces().Get(t.Context(), corev1.NamespaceNodeLease, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
		})

		t.Run("metalheal's CRDs are served", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			list, err := cs.Discovery().ServerResourcesForGroupVersion("remediation.metalheal.io/v1alpha1")
			g.Expect(err).NotTo(HaveOccurred())
			var names []string
			for _, r := range list.APIResources {
				names = append(names, r.Name)
			}
			g.Expect(names).To(ContainElements("nodehealthchecks", "machinehealthchecks", "powercycleremediations",
				"powercycleremediationtemplates", "bmcs"))
		})

		t.Run("the garbage collector deletes a dependent with its owner", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			ctx := t.Context()
			owner, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name:            "dependent",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
			}}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cs.CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{})).To(Succeed())
			g.Eventually(func() error {
				_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "dependent", metav1.GetOptions{})
				return err
			}).WithTimeout(30 * time.Second).Should(Satisfy(apierrors.IsNotFound))
		})

		t.Run("a node without heartbeats turns Ready=Unknown after the grace period", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			ctx := t.Context()
			now := metav1.Now()
			node := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "silent"},
				Status: corev1.NodeStatus{
					Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
					Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
						Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
				},
			}
			_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			var unknownAt time.Time
			g.Eventually(func(g Gomega) {
				n, err := cs.CoreV1().Nodes().Get(ctx, "silent", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				ready := readyCondition(n)
				g.Expect(ready).NotTo(BeNil())
				g.Expect(ready.Status).To(Equal(corev1.ConditionUnknown))
				unknownAt = ready.LastTransitionTime.Time
			}).WithTimeout(grace + 20*time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
			// Not before the grace period (the controller first sees the node a moment after its creation;
			// the condition's times have a precision of one second).
			g.Expect(unknownAt.Sub(now.Time)).To(BeNumerically(">=", grace-time.Second))
		})

		t.Run("RBAC applies to users outside system:masters", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			u, err := w.AddUser("nobody", nil, nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(u.Kubeconfig).To(BeARegularFile())
			kc, err := kubernetes.NewForConfig(u.Config)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = kc.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing nodes as nobody: %v", err)
		})

		t.Run("the processes are found with their usage", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			procs, err := w.Processes()
			g.Expect(err).NotTo(HaveOccurred())
			var names []string
			for _, p := range procs {
				names = append(names, p.Name)
				u, err := world.ProcessUsage(p.PID)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(u.CPU).To(BeNumerically(">", 0), p.Name)
				g.Expect(u.RSS).To(BeNumerically(">", 1<<20), p.Name)
				g.Expect(u.PeakRSS).To(BeNumerically(">=", u.RSS), p.Name)
			}
			slices.Sort(names)
			g.Expect(names).To(Equal([]string{"etcd", "kube-apiserver", "kube-controller-manager"}))
		})
	})

	// Stop ends every process and removes the directory, within seconds even while a client watches.
	procs, err := w.Processes()
	g.Expect(err).NotTo(HaveOccurred())
	dir := w.Dir()
	g.Expect(filepath.Join(w.LogDir(), "kube-controller-manager.log")).To(BeARegularFile())
	watch, err := cs.CoreV1().Nodes().Watch(t.Context(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer watch.Stop()
	stopping := time.Now()
	g.Expect(w.Stop()).To(Succeed())
	g.Expect(time.Since(stopping)).To(BeNumerically("<", 15*time.Second), "a watching client holds the API server")
	for _, p := range procs {
		_, err := world.ProcessUsage(p.PID)
		g.Expect(errors.Is(err, world.ErrNoProcess)).To(BeTrue(), "%s (pid %d) still runs after Stop", p.Name, p.PID)
	}
	if os.Getenv(world.KeepEnv) == "" {
		_, err = os.Stat(dir)
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "the world's directory is left after Stop")
	}
	g.Expect(w.Stop()).To(Succeed(), "a second Stop")
}

// Worlds started side by side (a management cluster and its workload clusters) share binaries and a
// parent process, yet each is its own: named directories, its own processes.
func TestWorldsSideBySide(t *testing.T) {
	g := NewWithT(t)
	worlds := make([]*world.World, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, name := range []string{"left", "right"} {
		wg.Go(func() { worlds[i], errs[i] = world.Start(t.Context(), world.Options{Name: name, SkipCRDs: true}) })
	}
	wg.Wait()
	for i, w := range worlds {
		if w != nil {
			t.Cleanup(func() { _ = w.Stop() })
		}
		g.Expect(errs[i]).NotTo(HaveOccurred())
	}

	pids := map[int]string{}
	for i, name := range []string{"left", "right"} {
		w := worlds[i]
		g.Expect(filepath.Base(w.Dir())).To(HavePrefix("metalheal-world-"+name+"-"), "a world's directory says its name")
		procs, err := w.Processes()
		g.Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, p := range procs {
			g.Expect(pids).NotTo(HaveKey(p.PID), "%s's %s is the other world's", name, p.Name)
			pids[p.PID] = name
			names = append(names, p.Name)
		}
		slices.Sort(names)
		g.Expect(names).To(Equal([]string{"etcd", "kube-apiserver", "kube-controller-manager"}), name)
	}
}

// A world's API server stops and starts again on the same address, certificates and etcd, and the
// controller-manager with it: clients that knew it before reach it again, what was stored is there, and a
// Node that heartbeat throughout is not counted as silent for the outage.
func TestAPIServerRestart(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	const grace = 4 * time.Second
	w, err := world.Start(ctx, world.Options{Name: "restart", SkipCRDs: true, NodeMonitorGracePeriod: grace})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = w.Stop() })
	cs, err := kubernetes.NewForConfig(w.RESTConfig()) // a client from before the stop
	g.Expect(err).NotTo(HaveOccurred())
	fromFile := func() *kubernetes.Clientset {
		cfg, err := clientcmd.BuildConfigFromFlags("", w.Kubeconfig())
		g.Expect(err).NotTo(HaveOccurred())
		kc, err := kubernetes.NewForConfig(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		return kc
	}
	nobody, err := w.AddUser("nobody", nil, nil) // a client certificate made before the stop
	g.Expect(err).NotTo(HaveOccurred())
	stored, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "before"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	heartbeat(t, cs, "alive", grace/8) // a kubelet that renews its lease throughout, failing while the API server is down
	g.Eventually(func() string { return readyStatus(ctx, g, cs, "alive") }).WithTimeout(grace).Should(Equal("True"))
	pids := func() map[string]int {
		procs, err := w.Processes()
		g.Expect(err).NotTo(HaveOccurred())
		m := map[string]int{}
		for _, p := range procs {
			m[p.Name] = p.PID
		}
		return m
	}
	before := pids()
	g.Expect(before).To(HaveLen(3))
	g.Expect(w.StartAPIServer(ctx)).To(MatchError(world.ErrAPIServerRunning))

	stopping := time.Now()
	g.Expect(w.StopAPIServer()).To(Succeed())
	g.Expect(time.Since(stopping)).To(BeNumerically("<", 15*time.Second), "stopping the API server")
	t.Logf("kube-apiserver and kube-controller-manager stopped in %s", time.Since(stopping).Round(time.Millisecond))
	g.Expect(w.StopAPIServer()).To(Succeed(), "a second stop")
	g.Expect(pids()).To(Equal(map[string]int{"etcd": before["etcd"]}), "only etcd runs on")
	_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
	var status apierrors.APIStatus
	g.Expect(err).To(HaveOccurred(), "a call of a client connected before the stop")
	g.Expect(errors.As(err, &status)).To(BeFalse(), "an answer from a stopped API server: %v", err)
	// Down for longer than the grace period.
	g.Consistently(func() error {
		_, err := fromFile().CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		return err
	}).WithTimeout(grace+time.Second).WithPolling(500*time.Millisecond).Should(MatchError(syscall.ECONNREFUSED), "a call while the API server is stopped")

	starting := time.Now()
	g.Expect(w.StartAPIServer(ctx)).To(Succeed())
	t.Logf("kube-apiserver and kube-controller-manager started again in %s", time.Since(starting).Round(time.Millisecond))
	after := pids()
	g.Expect(after).To(HaveLen(3))
	g.Expect(after["etcd"]).To(Equal(before["etcd"]))
	g.Expect(after["kube-apiserver"]).NotTo(Equal(before["kube-apiserver"]), "a new kube-apiserver")
	g.Expect(after["kube-controller-manager"]).NotTo(Equal(before["kube-controller-manager"]), "a new kube-controller-manager")
	for name, kc := range map[string]*kubernetes.Clientset{"the kubeconfig file": fromFile(), "the client from before": cs} {
		got, err := kc.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(got.UID).To(Equal(stored.UID), name)
		g.Expect(got.Data).To(Equal(stored.Data), name)
	}
	kc, err := kubernetes.NewForConfig(nobody.Config)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a user added before the stop is still authenticated: %v", err)
	for _, log := range []string{"kube-apiserver.log", "kube-controller-manager.log"} {
		b, err := os.ReadFile(filepath.Join(w.LogDir(), log))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(b)).To(And(ContainSubstring("----- test/world"), ContainSubstring("again (StartAPIServer)")),
			"%s tells the two runs apart", log)
	}

	// The node lifecycle controller, new, does not count the outage against the Node that heartbeat.
	g.Consistently(func() string { return readyStatus(ctx, g, cs, "alive") }).WithTimeout(2*grace).Should(Equal("True"),
		"a Node that heartbeat throughout turned Unknown after the API server came back")

	// The controller-manager works: its garbage collector deletes a dependent.
	owner, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:            "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
	}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func() error {
		_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "dependent", metav1.GetOptions{})
		return err
	}).WithTimeout(30 * time.Second).Should(Satisfy(apierrors.IsNotFound))

	g.Expect(w.Stop()).To(Succeed())
	g.Expect(w.StartAPIServer(ctx)).To(MatchError(world.ErrWorldStopped))
	g.Expect(w.StopAPIServer()).To(MatchError(world.ErrWorldStopped))
}

// heartbeat registers a Ready Node and renews its lease every interval, as a kubelet does, until the test
// ends; failed renewals (the API server is down) are tried again at the next one.
func heartbeat(t *testing.T, cs kubernetes.Interface, name string, interval time.Duration) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	now := metav1.Now()
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: ptr.To(int32(40)),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); wg.Wait() })
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if latest, err := leases.Get(ctx, name, metav1.GetOptions{}); err == nil {
				lease = latest
			}
			lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			if renewed, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err == nil {
				lease = renewed
			}
		}
	})
}

// readyStatus is a Node's Ready status.
func readyStatus(ctx context.Context, g Gomega, cs kubernetes.Interface, name string) string {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	if c := readyCondition(n); c != nil {
		return string(c.Status)
	}
	return ""
}

func TestStartWithoutBinaries(t *testing.T) {
	g := NewWithT(t)
	_, err := world.Start(t.Context(), world.Options{BinDir: t.TempDir()})
	g.Expect(errors.Is(err, world.ErrMissingBinary)).To(BeTrue(), "%v", err)
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
