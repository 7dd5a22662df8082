package nodesim_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/metalheal/metalheal/test/nodesim"
)

// leaseCalls records the simulator's requests to node leases, by method.
type leaseCalls struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *leaseCalls) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if strings.Contains(req.URL.Path, "/namespaces/"+corev1.NamespaceNodeLease+"/leases") {
			c.mu.Lock()
			c.calls[req.Method]++
			c.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (c *leaseCalls) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int{}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// A simulated kubelet renews its lease as a kubelet does: an update of the lease it last wrote, with no
// read and no patch (the bench should put a real cluster's requests on the API server); it reads the
// lease again only when someone else wrote it, and creates it again when it is gone.
func TestLeaseRenewedLikeAKubelet(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := sharedWorld(t)
	ctx := t.Context()
	calls := &leaseCalls{calls: map[string]int{}}
	cfg := rest.CopyConfig(w.RESTConfig())
	cfg.Wrap(calls.wrap)
	cs, err := nodesim.NewClient(cfg, "renewals")
	g.Expect(err).NotTo(HaveOccurred())
	sim := nodesim.New(cs, nodesim.Options{Name: "renewals", LeaseInterval: leaseInterval})
	g.Expect(sim.Start(ctx)).To(Succeed())
	t.Cleanup(func() { _ = sim.RemoveAll(context.WithoutCancel(ctx)) })
	g.Expect(sim.AddNodes(ctx, nodesim.Nodes("renewals", 2, nil)...)).To(Succeed())

	admin, err := kubernetes.NewForConfig(w.RESTConfig())
	g.Expect(err).NotTo(HaveOccurred())
	leases := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renewedAfter := func(name string, after time.Time) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(l.Spec.RenewTime.Time).To(BeTemporally(">", after))
		}).WithTimeout(4 * leaseInterval).WithPolling(100 * time.Millisecond).Should(Succeed())
	}

	// Registration creates each lease; every renewal after it is one update.
	renewedAfter("renewals-1", time.Now())
	renewedAfter("renewals-2", time.Now())
	got := calls.take()
	g.Expect(got).To(HaveKeyWithValue(http.MethodPost, 2))
	g.Expect(got[http.MethodPut]).To(BeNumerically(">=", 2))
	g.Expect(got).NotTo(HaveKey(http.MethodPatch))
	g.Expect(got).NotTo(HaveKey(http.MethodGet))

	// Someone else writes a lease: the next renewal conflicts, reads it once and keeps what they wrote.
	var l *coordinationv1.Lease
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err = leases.Get(ctx, "renewals-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Labels["written-by"] = "someone-else"
		l, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})).To(Succeed())
	calls.take()
	renewedAfter("renewals-1", l.Spec.RenewTime.Time)
	l, err = leases.Get(ctx, "renewals-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Labels).To(HaveKeyWithValue("written-by", "someone-else"))
	g.Expect(*l.Spec.HolderIdentity).To(Equal("renewals-1"))
	got = calls.take()
	g.Expect(got).To(HaveKeyWithValue(http.MethodGet, 1))
	g.Expect(got).NotTo(HaveKey(http.MethodPatch))

	// A lease that is gone is created again, owned by its node.
	g.Expect(leases.Delete(ctx, "renewals-2", metav1.DeleteOptions{})).To(Succeed())
	renewedAfter("renewals-2", time.Time{})
	l, err = leases.Get(ctx, "renewals-2", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.OwnerReferences).To(ConsistOf(HaveField("Name", "renewals-2")))
	g.Expect(calls.take()).To(HaveKeyWithValue(http.MethodPost, 1))
	g.Expect(sim.Stats().Errors).To(BeZero(), "a conflict or a missing lease is the kubelet's daily work, not an error")
}
