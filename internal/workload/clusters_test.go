package workload

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/pkg/leases"
)

// These tests reach one real API server, the workload cluster, through kubeconfig Secrets that a fake
// management cluster holds.

var (
	env   *envtest.Environment
	admin client.Client
)

func TestMain(m *testing.M) {
	os.Exit(runWithAPIServer(m))
}

func runWithAPIServer(m *testing.M) int {
	e, cfg, err := testenv.Start(testenv.Options{SkipCRDs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = e.Stop() }()
	env = e
	if admin, err = client.New(cfg, client.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// secrets is a management cluster holding the kubeconfig Secret of Cluster key.
func secrets(key types.NamespacedName, kubeconfig []byte) client.Reader {
	return fake.NewClientBuilder().WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name + KubeconfigSecretSuffix},
		Data:       map[string][]byte{KubeconfigSecretKey: kubeconfig},
	}).Build()
}

// The connection caches the node leases of the lease namespace only, slimmed: a lease is read for its
// holder and its times, and the kubelets' heartbeats elsewhere are not the manager's to hold.
func TestLeaseCache(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	leaseNS, otherNS := "leases-"+utilrand.String(5), "elsewhere-"+utilrand.String(5)
	for _, ns := range []string{leaseNS, otherNS} {
		g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	lease := func(ns string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leases.LeaseName("worker-1"),
				Labels:      map[string]string{"bulk": "x"},
				Annotations: map[string]string{"bulk": "y", leases.AnnotationHolderNamespace: "fleet"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-maintenance"), LeaseDurationSeconds: ptr.To[int32](60),
				RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}
	}
	g.Expect(admin.Create(ctx, lease(leaseNS))).To(Succeed())
	g.Expect(admin.Create(ctx, lease(otherNS))).To(Succeed())

	key := types.NamespacedName{Namespace: "fleet", Name: "edge-a"}
	clusters := New(Options{Clock: clocktesting.NewFakeClock(time.Now()), LeaseNamespace: leaseNS})
	t.Cleanup(clusters.StopAll)
	g.Expect(clusters.LeaseNamespace()).To(Equal(leaseNS))
	c, remote, err := clusters.Get(ctx, secrets(key, env.KubeConfig), key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote).To(BeTrue())
	g.Expect(c.LeaseNamespace()).To(Equal(leaseNS))

	var list coordinationv1.LeaseList
	g.Expect(c.Leases().List(ctx, &list)).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1), "only the lease namespace is cached")
	got := list.Items[0]
	g.Expect(got.Namespace).To(Equal(leaseNS))
	g.Expect(got.Spec.HolderIdentity).To(HaveValue(Equal("node-maintenance")))
	g.Expect(got.Spec.RenewTime).NotTo(BeNil())
	g.Expect(got.Labels).To(BeEmpty())
	g.Expect(got.Annotations).To(Equal(map[string]string{leases.AnnotationHolderNamespace: "fleet"}))
	g.Expect(got.ManagedFields).To(BeEmpty())

	// A lease taken later shows in the cache.
	later := lease(leaseNS)
	later.Name = leases.LeaseName("worker-2")
	g.Expect(admin.Create(ctx, later)).To(Succeed())
	g.Eventually(func() error {
		return c.Leases().Get(ctx, client.ObjectKeyFromObject(later), &coordinationv1.Lease{})
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// A connection paces its requests as the manager paces its own (--kube-api-qps -1: no client-side limit),
// not at client-go's default of 5 a second, which held a burst of 50 failing Machines' lease and request
// writes in a workload cluster for up to 18 s: 60 calls in a row here would take 10 s at that pace.
func TestConnectionPacedAsTheManager(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	key := types.NamespacedName{Namespace: "fleet", Name: "edge-burst"}
	clusters := New(Options{Clock: clocktesting.NewFakeClock(time.Now()), QPS: -1, Burst: 100})
	t.Cleanup(clusters.StopAll)
	c, _, err := clusters.Get(ctx, secrets(key, env.KubeConfig), key)
	g.Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	for range 60 {
		g.Expect(c.Client().Get(ctx, types.NamespacedName{Name: "default"}, &corev1.Namespace{})).To(Succeed())
	}
	g.Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second), "60 calls paced at 5 a second take 10 s")
}

// A workload cluster that stops answering (its connections held open, nothing answered) fails each call
// of the connection's client within the call timeout, not at the caller's deadline, and drops the
// connection: the next Get connects again once it answers.
func TestHungClusterFailsCallsWithinTheBound(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	proxy, err := testenv.NewProxy(env.KubeConfig)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(proxy.Close)
	kubeconfig, err := proxy.Kubeconfig(env.KubeConfig)
	g.Expect(err).NotTo(HaveOccurred())

	key := types.NamespacedName{Namespace: "fleet", Name: "hung"}
	const bound = time.Second
	clusters := New(Options{Clock: clocktesting.NewFakeClock(time.Now()), CallTimeout: bound})
	t.Cleanup(clusters.StopAll)
	mgmt := secrets(key, kubeconfig)
	c, _, err := clusters.Get(ctx, mgmt, key)
	g.Expect(err).NotTo(HaveOccurred())

	// The client's first call is made while the cluster does not answer: nothing of it (a discovery of the
	// kinds, say) escapes the bound.
	proxy.Stall()
	start := time.Now()
	err = c.Client().Get(ctx, client.ObjectKey{Namespace: leases.DefaultNamespace, Name: leases.LeaseName("worker-1")}, &coordinationv1.Lease{})
	took := time.Since(start)
	var wc *Error
	g.Expect(errors.As(err, &wc)).To(BeTrue(), "want a *workload.Error, got %v", err)
	g.Expect(wc.Cluster).To(Equal(key))
	g.Expect(took).To(And(BeNumerically(">=", bound), BeNumerically("<", 5*bound)), "failed within the call's bound")
	g.Expect(c.Broken()).To(BeClosed(), "the connection says it is broken, for its checks to look again")
	g.Expect(c.Done()).NotTo(BeClosed())

	proxy.Resume()
	again, _, err := clusters.Get(ctx, mgmt, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).NotTo(BeIdenticalTo(c), "the connection that did not answer was dropped")
	g.Expect(c.Done()).To(BeClosed(), "and stopped")
	g.Expect(again.Broken()).NotTo(BeClosed())
	g.Expect(again.Client().List(ctx, &corev1.NodeList{})).To(Succeed())
}

// A kubeconfig that may read Nodes but not the node leases gets no connection: a health check must not
// decide without the leases. The error says why (forbidden), not only that the lists timed out.
func TestKubeconfigWithoutLeaseRights(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	name := "nodes-only-" + utilrand.String(5)
	user, err := env.AddUser(envtest.User{Name: name}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}}
	g.Expect(admin.Create(ctx, role)).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}})).To(Succeed())
	kubeconfig, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())

	key := types.NamespacedName{Namespace: "fleet", Name: "nodes-only"}
	clusters := New(Options{Clock: clocktesting.NewFakeClock(time.Now()), SyncTimeout: 3 * time.Second})
	t.Cleanup(clusters.StopAll)
	_, _, err = clusters.Get(ctx, secrets(key, kubeconfig), key)
	var wc *Error
	g.Expect(errors.As(err, &wc)).To(BeTrue(), "want a *workload.Error, got %v", err)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the cause is kept: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("leases"))
	g.Expect(clusters.Connected(key)).To(BeFalse())
}
