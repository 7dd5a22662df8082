package harness_test

import (
	"context"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
)

// startHarness starts a world of n workers, stopped when the test ends.
func startHarness(t *testing.T, n int) *harness.Harness {
	t.Helper()
	h, err := harness.Start(context.Background(), harness.Options{Workers: n, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

// The real manager, under config/default's RBAC, checks every BMC of the world.
func TestManagerChecksBMCsWithDeployedRBAC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h := startHarness(t, 2)

	m, err := h.StartManager(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Kill)

	for _, node := range []string{harness.NodeName(1), harness.NodeName(2)} {
		g.Eventually(func(g Gomega) {
			var b v1alpha1.BMC
			g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: harness.Namespace, Name: node}, &b)).To(Succeed())
			g.Expect(b.Status.PowerState).To(Equal(v1alpha1.PowerOn))
			g.Expect(b.Status.Conditions).To(ContainElement(And(
				HaveField("Type", v1alpha1.ConditionReachable), HaveField("Status", BeEquivalentTo("True")))))
			g.Expect(b.Status.Conditions).To(ContainElement(And(
				HaveField("Type", v1alpha1.ConditionCredentialsValid), HaveField("Status", BeEquivalentTo("True")))))
		}).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "see %s", m.LogPath)
	}
	logs, err := os.ReadFile(m.LogPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(logs)).NotTo(ContainSubstring(harness.BMCPassword), "the manager logged a BMC password")
	g.Expect(string(logs)).NotTo(ContainSubstring("forbidden"), "the deployed RBAC lacks a permission the manager uses")
}

// The manager's leader election has the priority level config/flowcontrol gives it, as kube-controller-
// manager's has: leader-election, which no wave of requests starves. Its other requests are a service
// account's like any other (workload-low): no FlowSchema moves them (BENCHMARKS.md, the A/B).
func TestManagerRequestsHaveTheirPriorityLevel(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h := startHarness(t, 1)

	var levels flowcontrolv1.PriorityLevelConfigurationList
	g.Expect(h.Client.List(ctx, &levels)).To(Succeed())
	levelOf := map[string]string{} // UID → name
	for _, l := range levels.Items {
		levelOf[string(l.UID)] = l.Name
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", h.ManagerKubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	var last atomic.Value // the priority level of the last answer
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				last.Store(levelOf[resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")])
			}
			return resp, err
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())

	_, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(last.Load()).To(Equal("workload-low"), "reading Nodes")

	_, err = cs.CoordinationV1().Leases("medik8s-leases").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(last.Load()).To(Equal("workload-low"), "reading node maintenance leases")

	_, err = cs.CoordinationV1().Leases(harness.Namespace).Get(ctx, "metalheal.remediation.metalheal.io", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no leader yet: %v", err)
	g.Expect(last.Load()).To(Equal("leader-election"), "reading the leader election lease")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
