package leases

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/internal/testenv"
)

// These tests run against a real kube-apiserver and etcd (internal/testenv). Each test uses its own
// Node, so they are independent.

var k8s client.Client

// restCfg reaches the test API server (for clients of their own).
var restCfg *rest.Config

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

const (
	otherHolder     = "node-maintenance"
	customNamespace = "custom-leases"
)

func TestMain(m *testing.M) {
	os.Exit(runWithAPIServer(m))
}

func runWithAPIServer(m *testing.M) int {
	env, cfg, err := testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	restCfg = cfg
	k8s, err = client.New(cfg, client.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, name := range []string{DefaultNamespace, customNamespace} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := k8s.Create(context.Background(), ns); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

func newNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	g := NewWithT(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	g.Expect(k8s.Create(t.Context(), node)).To(Succeed())
	g.Expect(node.UID).NotTo(BeEmpty())
	t.Cleanup(func() {
		// envtest runs no garbage collector: remove the node's leases ourselves so that -count=N works.
		for _, ns := range []string{DefaultNamespace, customNamespace} {
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-" + name}}
			_ = k8s.Delete(context.Background(), lease)
		}
		_ = k8s.Delete(context.Background(), node)
	})
	return node
}

func newManager(t *testing.T, holder string, clk *clocktesting.FakeClock, opts ...Option) *Manager {
	t.Helper()
	m, err := NewManager(k8s, holder, clk, opts...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return m
}

// leaseState is what the tests assert on a lease.
type leaseState struct {
	holder      string
	acquire     time.Time
	renew       time.Time
	seconds     int32
	transitions int32
}

func getLease(g Gomega, node *corev1.Node) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{}
	g.ExpectWithOffset(1, k8s.Get(context.Background(), client.ObjectKey{Namespace: DefaultNamespace, Name: "node-" + node.Name}, lease)).To(Succeed())
	return lease
}

func expectLease(g Gomega, node *corev1.Node, want leaseState) *coordinationv1.Lease {
	lease := getLease(g, node)
	g.ExpectWithOffset(1, lease.Spec.HolderIdentity).To(HaveValue(Equal(want.holder)))
	g.ExpectWithOffset(1, lease.Spec.AcquireTime).NotTo(BeNil())
	g.ExpectWithOffset(1, lease.Spec.AcquireTime.Time.Equal(want.acquire)).To(BeTrue(), "acquireTime %v, want %v", lease.Spec.AcquireTime, want.acquire)
	g.ExpectWithOffset(1, lease.Spec.RenewTime).NotTo(BeNil())
	g.ExpectWithOffset(1, lease.Spec.RenewTime.Time.Equal(want.renew)).To(BeTrue(), "renewTime %v, want %v", lease.Spec.RenewTime, want.renew)
	g.ExpectWithOffset(1, lease.Spec.LeaseDurationSeconds).To(HaveValue(Equal(want.seconds)))
	g.ExpectWithOffset(1, lease.Spec.LeaseTransitions).To(HaveValue(Equal(want.transitions)))
	return lease
}

func expectOwnedByNode(g Gomega, lease *coordinationv1.Lease, node *corev1.Node) {
	g.ExpectWithOffset(1, lease.OwnerReferences).To(Equal([]metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
	}}))
}

func expectHeldBy(g Gomega, err error, holder string, until time.Time) {
	var held *AlreadyHeldError
	g.ExpectWithOffset(1, errors.As(err, &held)).To(BeTrue(), "want *AlreadyHeldError, got %v", err)
	g.ExpectWithOffset(1, held.Holder).To(Equal(holder))
	g.ExpectWithOffset(1, held.Until.Equal(until)).To(BeTrue(), "until %v, want %v", held.Until, until)
	g.ExpectWithOffset(1, err.Error()).To(ContainSubstring(holder))
}

// TestLifecycle walks one node's lease through acquire, renew, a blocked request, takeover after expiry
// and release, stepping a fake clock.
func TestLifecycle(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	clk := clocktesting.NewFakeClock(t0)
	node := newNode(t, "lifecycle")
	ours := newManager(t, HolderIdentity("PowerCycleRemediation", node.Name), clk)
	other := newManager(t, otherHolder, clk)

	// Acquire: a new lease, owned by the Node.
	g.Expect(ours.RequestLease(ctx, node, time.Minute)).To(Succeed())
	lease := expectLease(g, node, leaseState{holder: "PowerCycleRemediation-lifecycle", acquire: t0, renew: t0, seconds: 60})
	expectOwnedByNode(g, lease, node)
	g.Expect(lease.Namespace).To(Equal("medik8s-leases"))
	g.Expect(lease.Name).To(Equal("node-lifecycle"))

	// Renew: the renew time moves, the acquire time stays.
	clk.Step(30 * time.Second)
	g.Expect(ours.RequestLease(ctx, node, time.Minute)).To(Succeed())
	expectLease(g, node, leaseState{holder: "PowerCycleRemediation-lifecycle", acquire: t0, renew: t0.Add(30 * time.Second), seconds: 60})

	// Another holder is blocked and told who holds the node until when; the lease is untouched.
	until := t0.Add(90 * time.Second)
	expectHeldBy(g, other.RequestLease(ctx, node, time.Hour), "PowerCycleRemediation-lifecycle", until)
	holder, valid, gotUntil, err := other.HolderOf(ctx, node.Name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(holder).To(Equal(Holder{Identity: "PowerCycleRemediation-lifecycle"}))
	g.Expect(valid).To(BeTrue())
	g.Expect(gotUntil.Equal(until)).To(BeTrue())

	// Still held at the very instant it expires.
	clk.SetTime(until)
	expectHeldBy(g, other.RequestLease(ctx, node, time.Hour), "PowerCycleRemediation-lifecycle", until)

	// Expired: the other holder takes it over.
	clk.Step(time.Second)
	_, valid, _, err = other.HolderOf(ctx, node.Name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(valid).To(BeFalse())
	takeover := until.Add(time.Second)
	g.Expect(other.RequestLease(ctx, node, time.Hour)).To(Succeed())
	lease = expectLease(g, node, leaseState{holder: otherHolder, acquire: takeover, renew: takeover, seconds: 3600, transitions: 1})
	expectOwnedByNode(g, lease, node)
	expectHeldBy(g, ours.RequestLease(ctx, node, time.Minute), otherHolder, takeover.Add(time.Hour))

	// We release only our own: someone else's lease survives our InvalidateLease.
	g.Expect(ours.InvalidateLease(ctx, node.Name)).To(Succeed())
	expectLease(g, node, leaseState{holder: otherHolder, acquire: takeover, renew: takeover, seconds: 3600, transitions: 1})

	// Its holder releases it; releasing again, or a lease that never existed, is fine.
	g.Expect(other.InvalidateLease(ctx, node.Name)).To(Succeed())
	_, err = other.GetLease(ctx, node.Name)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "want NotFound, got %v", err)
	g.Expect(other.InvalidateLease(ctx, node.Name)).To(Succeed())
	g.Expect(ours.InvalidateLease(ctx, "no-such-node")).To(Succeed())
	holder, valid, gotUntil, err = ours.HolderOf(ctx, node.Name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(holder).To(BeZero())
	g.Expect(valid).To(BeFalse())
	g.Expect(gotUntil.IsZero()).To(BeTrue())

	// Free again: we can acquire it anew.
	g.Expect(ours.RequestLease(ctx, node, 90500*time.Millisecond)).To(Succeed())
	expectLease(g, node, leaseState{holder: "PowerCycleRemediation-lifecycle", acquire: takeover, renew: takeover, seconds: 91})
}

// TestRequestLeaseOverExistingLease starts from leases as other medik8s components leave them.
func TestRequestLeaseOverExistingLease(t *testing.T) {
	mt := func(d time.Duration) *metav1.MicroTime { v := metav1.NewMicroTime(t0.Add(d)); return &v }
	const us = "PowerCycleRemediation-n"
	tests := []struct {
		name         string
		existing     coordinationv1.LeaseSpec
		foreignOwner bool
		from         []string      // holders acting for us (RequestLeaseFrom)
		wantHolder   string        // when the request is refused: who holds it
		wantUntil    time.Duration // and until when, relative to t0
		want         leaseState    // otherwise: the lease afterwards
	}{
		{
			name:     "our valid lease is renewed, acquire time and transitions kept",
			existing: coordinationv1.LeaseSpec{HolderIdentity: new(us), AcquireTime: mt(-100 * time.Second), RenewTime: mt(-10 * time.Second), LeaseDurationSeconds: new(int32(30)), LeaseTransitions: new(int32(2))},
			want:     leaseState{holder: us, acquire: t0.Add(-100 * time.Second), renew: t0, seconds: 60, transitions: 2},
		},
		{
			name:     "our expired lease is reacquired",
			existing: coordinationv1.LeaseSpec{HolderIdentity: new(us), AcquireTime: mt(-time.Hour), RenewTime: mt(-31 * time.Second), LeaseDurationSeconds: new(int32(30)), LeaseTransitions: new(int32(2))},
			want:     leaseState{holder: us, acquire: t0, renew: t0, seconds: 60, transitions: 2},
		},
		{
			name:       "someone else's valid lease is refused",
			existing:   coordinationv1.LeaseSpec{HolderIdentity: new(otherHolder), AcquireTime: mt(-time.Hour), RenewTime: mt(-10 * time.Second), LeaseDurationSeconds: new(int32(30))},
			wantHolder: otherHolder, wantUntil: 20 * time.Second,
		},
		{
			name:       "someone else's lease that was never renewed counts from its acquire time",
			existing:   coordinationv1.LeaseSpec{HolderIdentity: new(otherHolder), AcquireTime: mt(-10 * time.Second), LeaseDurationSeconds: new(int32(3600))},
			wantHolder: otherHolder, wantUntil: 3590 * time.Second,
		},
		{
			name:       "a valid lease of a holder not acting for us is refused",
			existing:   coordinationv1.LeaseSpec{HolderIdentity: new(otherHolder), AcquireTime: mt(-time.Hour), RenewTime: mt(-10 * time.Second), LeaseDurationSeconds: new(int32(30))},
			from:       []string{"PowerCycleRemediation-m"},
			wantHolder: otherHolder, wantUntil: 20 * time.Second,
		},
		{
			name:     "a valid lease of a holder acting for us is taken over, counting a transition",
			existing: coordinationv1.LeaseSpec{HolderIdentity: new(otherHolder), AcquireTime: mt(-time.Hour), RenewTime: mt(-10 * time.Second), LeaseDurationSeconds: new(int32(30)), LeaseTransitions: new(int32(1))},
			from:     []string{"PowerCycleRemediation-m", otherHolder},
			want:     leaseState{holder: us, acquire: t0, renew: t0, seconds: 60, transitions: 2},
		},
		{
			name:     "someone else's expired lease is taken over",
			existing: coordinationv1.LeaseSpec{HolderIdentity: new(otherHolder), AcquireTime: mt(-time.Hour), RenewTime: mt(-31 * time.Second), LeaseDurationSeconds: new(int32(30)), LeaseTransitions: new(int32(3))},
			want:     leaseState{holder: us, acquire: t0, renew: t0, seconds: 60, transitions: 4},
		},
		{
			name:     "someone else's lease without a duration is invalid and taken over",
			existing: coordinationv1.LeaseSpec{HolderIdentity: new(otherHolder), RenewTime: mt(0)},
			want:     leaseState{holder: us, acquire: t0, renew: t0, seconds: 60, transitions: 1},
		},
		{
			name:     "a lease without a holder is free",
			existing: coordinationv1.LeaseSpec{RenewTime: mt(0), LeaseDurationSeconds: new(int32(3600))},
			want:     leaseState{holder: us, acquire: t0, renew: t0, seconds: 60, transitions: 1},
		},
		{
			name:         "a lease owned by something else is re-owned by the node",
			existing:     coordinationv1.LeaseSpec{HolderIdentity: new(otherHolder), RenewTime: mt(-time.Hour), LeaseDurationSeconds: new(int32(30))},
			foreignOwner: true,
			want:         leaseState{holder: us, acquire: t0, renew: t0, seconds: 60, transitions: 1},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := t.Context()
			node := newNode(t, fmt.Sprintf("existing-%d", i))
			owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
			if tt.foreignOwner {
				owner = metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "pod-uid"}
			}
			existing := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "node-" + node.Name, Namespace: DefaultNamespace, OwnerReferences: []metav1.OwnerReference{owner}},
				Spec:       tt.existing,
			}
			g.Expect(k8s.Create(ctx, existing)).To(Succeed())
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), existing) })

			// The holder identity is that of a PowerCycleRemediation named "n", whatever the node.
			m := newManager(t, us, clocktesting.NewFakeClock(t0))
			err := m.RequestLeaseFrom(ctx, node, time.Minute, tt.from...)
			if tt.wantHolder != "" {
				expectHeldBy(g, err, tt.wantHolder, t0.Add(tt.wantUntil))
				after := getLease(g, node)
				g.Expect(after.ResourceVersion).To(Equal(existing.ResourceVersion), "a refused request must not write")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			expectOwnedByNode(g, expectLease(g, node, tt.want), node)
		})
	}
}

// TestConcurrentRequests races two holders for a fresh node: exactly one wins, the other is told who.
func TestConcurrentRequests(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	clk := clocktesting.NewFakeClock(t0)
	node := newNode(t, "race")
	holders := []string{"PowerCycleRemediation-race", otherHolder}
	errs := make([]error, len(holders))
	var wg sync.WaitGroup
	for i, h := range holders {
		m := newManager(t, h, clk)
		wg.Go(func() { errs[i] = m.RequestLease(ctx, node, time.Minute) })
	}
	wg.Wait()

	lease := getLease(g, node)
	winner := *lease.Spec.HolderIdentity
	for i, h := range holders {
		if h == winner {
			g.Expect(errs[i]).NotTo(HaveOccurred())
		} else {
			expectHeldBy(g, errs[i], winner, t0.Add(time.Minute))
		}
	}
}

func TestInvalidateOurExpiredLease(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	clk := clocktesting.NewFakeClock(t0)
	node := newNode(t, "expired-release")
	ours := newManager(t, HolderIdentity("PowerCycleRemediation", node.Name), clk)
	g.Expect(ours.RequestLease(ctx, node, time.Minute)).To(Succeed())
	clk.Step(time.Hour)
	g.Expect(ours.InvalidateLease(ctx, node.Name)).To(Succeed())
	_, err := ours.GetLease(ctx, node.Name)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "want NotFound, got %v", err)
}

func TestMissingNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	node := newNode(t, "no-namespace")
	m := newManager(t, "PowerCycleRemediation-x", clocktesting.NewFakeClock(t0), WithNamespace("no-such-namespace"))
	g.Expect(m.Namespace()).To(Equal("no-such-namespace"))
	err := m.RequestLease(ctx, node, time.Minute)
	var nsErr *NamespaceNotFoundError
	g.Expect(errors.As(err, &nsErr)).To(BeTrue(), "want *NamespaceNotFoundError, got %v", err)
	g.Expect(nsErr.Namespace).To(Equal("no-such-namespace"))
	g.Expect(err.Error()).To(ContainSubstring(`lease namespace "no-such-namespace" does not exist`))
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
}

func TestCustomNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	node := newNode(t, "custom-ns")
	m := newManager(t, "PowerCycleRemediation-custom-ns", clocktesting.NewFakeClock(t0), WithNamespace(customNamespace))
	g.Expect(m.RequestLease(ctx, node, time.Minute)).To(Succeed())
	lease, err := m.GetLease(ctx, node.Name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lease.Namespace).To(Equal(customNamespace))
	// Nothing landed in the default namespace.
	err = k8s.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: "node-custom-ns"}, &coordinationv1.Lease{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
}

func TestRequestLeaseRejectsBadInput(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid"}}
	tests := []struct {
		name     string
		node     *corev1.Node
		duration time.Duration
		want     string
	}{
		{name: "nil node", node: nil, duration: time.Minute, want: "name and a uid"},
		{name: "node without uid", node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, duration: time.Minute, want: "name and a uid"},
		{name: "sub-second duration", node: node, duration: 500 * time.Millisecond, want: "shorter than one second"},
		{name: "negative duration", node: node, duration: -time.Minute, want: "shorter than one second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m := newManager(t, "h", clocktesting.NewFakeClock(t0))
			g.Expect(m.RequestLease(t.Context(), tt.node, tt.duration)).To(MatchError(ContainSubstring(tt.want)))
			err := k8s.Get(t.Context(), client.ObjectKey{Namespace: DefaultNamespace, Name: "node-n"}, &coordinationv1.Lease{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		})
	}
}

// staleCache is a client whose reads come from a cache that has not seen node's lease yet (or has seen
// only the version given): what a manager's cache shows right after a lease is written.
func staleCache(t *testing.T, seen *coordinationv1.Lease, creates *atomic.Int32) client.Client {
	t.Helper()
	direct, err := client.NewWithWatch(restCfg, client.Options{Scheme: k8s.Scheme(), Mapper: k8s.RESTMapper()})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			lease, ok := obj.(*coordinationv1.Lease)
			if !ok {
				return c.Get(ctx, key, obj, opts...)
			}
			if seen == nil {
				return apierrors.NewNotFound(coordinationv1.Resource("leases"), key.Name)
			}
			seen.DeepCopyInto(lease)
			return nil
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates.Add(1)
			return c.Create(ctx, obj, opts...)
		},
	})
}

// A lease we hold but the cache does not show yet, or shows in an older version, is renewed after one
// lost race: the next attempt reads it from the API server instead of the same stale cache.
func TestRequestLeaseReadsLiveAfterALostRace(t *testing.T) {
	const holder = "NodeHealthCheck-live"
	for _, tc := range []struct {
		name  string
		cache func(before *coordinationv1.Lease) *coordinationv1.Lease
	}{
		{"not in the cache yet", func(*coordinationv1.Lease) *coordinationv1.Lease { return nil }},
		{"an older version in the cache", func(before *coordinationv1.Lease) *coordinationv1.Lease { return before }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := t.Context()
			clk := clocktesting.NewFakeClock(t0)
			node := newNode(t, "live-"+strings.ReplaceAll(tc.name, " ", "-"))
			g.Expect(newManager(t, holder, clk).RequestLease(ctx, node, time.Minute)).To(Succeed())
			before := getLease(g, node)
			clk.Step(10 * time.Second)
			g.Expect(newManager(t, holder, clk).RequestLease(ctx, node, time.Minute)).To(Succeed()) // the cache missed this one

			var creates atomic.Int32
			stale := staleCache(t, tc.cache(before), &creates)
			m, err := NewManager(stale, holder, clk, WithLiveReader(k8s))
			g.Expect(err).NotTo(HaveOccurred())
			clk.Step(10 * time.Second)
			g.Expect(m.RequestLease(ctx, node, time.Minute)).To(Succeed())
			expectLease(g, node, leaseState{holder: holder, acquire: t0, renew: t0.Add(20 * time.Second), seconds: 60})
			g.Expect(creates.Load()).To(BeNumerically("<=", 1), "one lost race at most")
		})
	}
}

// TestExpiryIsALowerBound: a lease read back after RequestLease never expires before Expiry said it
// would, whatever the clock's nanoseconds and however the duration rounds; and no more than a
// microsecond after it.
func TestExpiryIsALowerBound(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	for i, c := range []struct {
		at       time.Time
		duration time.Duration
	}{
		{t0, time.Minute},
		{t0.Add(123456789 * time.Nanosecond), 1500 * time.Millisecond},
		{t0.Add(999999999 * time.Nanosecond), 10*time.Minute + time.Nanosecond},
	} {
		clk := clocktesting.NewFakeClock(c.at)
		node := newNode(t, fmt.Sprintf("expiry-%d", i))
		m := newManager(t, otherHolder, clk)
		g.Expect(m.RequestLease(ctx, node, c.duration)).To(Succeed())
		until, _ := ValidUntil(getLease(g, node), c.at)
		want := Expiry(c.at, c.duration)
		g.Expect(until).To(BeTemporally(">=", want), "case %d", i)
		g.Expect(until).To(BeTemporally("<", want.Add(time.Microsecond)), "case %d", i)
	}
}

// A Manager made WithNamespaceCreation creates a missing lease namespace, then the lease; one without it
// reports the namespace missing (TestMissingNamespace).
func TestNamespaceCreation(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	node := newNode(t, "makes-namespace")
	// envtest deletes no namespace for good (no namespace controller): one of its own per run.
	ns := "made-on-first-use-" + utilrand.String(5)
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	m := newManager(t, "MachineHealthCheck.remediation.metalheal.io-x", clocktesting.NewFakeClock(t0), WithNamespace(ns), WithNamespaceCreation())

	g.Expect(m.RequestLease(ctx, node, time.Minute)).To(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})).To(Succeed())
	holder, valid, _, err := m.HolderOf(ctx, node.Name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(valid).To(BeTrue())
	g.Expect(holder.Identity).To(Equal(m.HolderIdentity()))

	// A second Manager finds the namespace there, and the lease held.
	other := newManager(t, otherHolder, clocktesting.NewFakeClock(t0), WithNamespace(ns), WithNamespaceCreation())
	expectHeldBy(g, other.RequestLease(ctx, node, time.Minute), m.HolderIdentity(), t0.Add(time.Minute))
	g.Expect(m.InvalidateLease(ctx, node.Name)).To(Succeed())
}
