package gates

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/pkg/leases"
)

const leaseNS = "medik8s-leases"

// controlPlane are the control-plane Nodes of the claim tests' cluster; w-0 is a worker.
var controlPlane = map[string]bool{"cp-0": true, "cp-1": true, "cp-2": true}

// nodeLease is node's lease held by holder, renewed at renew for seconds.
func nodeLease(node, holder string, renew time.Time, seconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS, Name: leases.LeaseName(node)},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renew}, LeaseDurationSeconds: &seconds},
	}
	if holder != "" {
		l.Spec.HolderIdentity = &holder
	}
	return l
}

// claimCluster is the tests' cluster over c, on clk; lists counts the live reads.
func claimCluster(c client.Client, clk *clocktesting.FakeClock, lists *atomic.Int32) NodeCluster {
	reader := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists.Add(1)
			return c.List(ctx, list, opts...)
		},
	})
	return NodeCluster{Leases: reader, LeaseNamespace: leaseNS, Clock: clk,
		IsControlPlane: func(_ context.Context, node string) (bool, error) { return controlPlane[node], nil }}
}

// takeLeaseOf is a take that creates node's lease for holder, as the lease manager would.
func takeLeaseOf(c client.Client, node, holder string, now time.Time) func(context.Context) error {
	return func(ctx context.Context) error { return c.Create(ctx, nodeLease(node, holder, now, 600)) }
}

func TestControlPlaneClaimStart(t *testing.T) {
	const self = "NodeHealthCheck.remediation.metalheal.io-cp"
	cases := map[string]struct {
		existing    []*coordinationv1.Lease
		wantRefusal *ControlPlaneRefusal
	}{
		"no lease: the start goes ahead": {},
		"another control-plane Node held: refused, looks again soon": {
			existing:    []*coordinationv1.Lease{nodeLease("cp-1", "MachineHealthCheck.remediation.metalheal.io-cp", t0, 600)},
			wantRefusal: &ControlPlaneRefusal{Node: "cp-1", Holder: "MachineHealthCheck.remediation.metalheal.io-cp", RetryAt: t0.Add(ControlPlaneRecheck)},
		},
		"the first held by Node name is named": {
			existing: []*coordinationv1.Lease{nodeLease("cp-2", "node-maintenance", t0, 600),
				nodeLease("cp-1", "PowerCycleRemediation-cp-1", t0, 600)},
			wantRefusal: &ControlPlaneRefusal{Node: "cp-1", Holder: "PowerCycleRemediation-cp-1", RetryAt: t0.Add(ControlPlaneRecheck)},
		},
		"the check's own lease on another control-plane Node counts": {
			existing:    []*coordinationv1.Lease{nodeLease("cp-1", self, t0, 600)},
			wantRefusal: &ControlPlaneRefusal{Node: "cp-1", Holder: self, RetryAt: t0.Add(ControlPlaneRecheck)},
		},
		"an expired lease does not count": {
			existing: []*coordinationv1.Lease{nodeLease("cp-1", "node-maintenance", t0.Add(-time.Hour), 600)},
		},
		"a lease without a holder does not count": {
			existing: []*coordinationv1.Lease{nodeLease("cp-1", "", t0, 600)},
		},
		"a worker's lease does not count": {
			existing: []*coordinationv1.Lease{nodeLease("w-0", "node-maintenance", t0, 600)},
		},
		"the Node's own lease is the lease manager's to judge": {
			existing: []*coordinationv1.Lease{nodeLease("cp-0", "node-maintenance", t0, 600)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			b := fake.NewClientBuilder()
			for _, l := range tc.existing {
				b = b.WithObjects(l)
			}
			c := b.Build()
			var lists atomic.Int32
			taken := false
			refusal, err := (&ControlPlaneClaim{}).Start(t.Context(), claimCluster(c, clocktesting.NewFakeClock(t0), &lists), "", "cp-0",
				func(context.Context) error { taken = true; return nil })
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(refusal).To(Equal(tc.wantRefusal))
			g.Expect(taken).To(Equal(tc.wantRefusal == nil), "take runs exactly when nothing refuses")
			g.Expect(lists.Load()).To(BeEquivalentTo(1), "one live read")
		})
	}
}

func TestControlPlaneClaimErrors(t *testing.T) {
	g := NewWithT(t)
	broken := interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("apiserver down")
		},
	})
	cluster := NodeCluster{Leases: broken, LeaseNamespace: leaseNS, Clock: clocktesting.NewFakeClock(t0),
		IsControlPlane: func(context.Context, string) (bool, error) { return true, nil }}
	taken := false
	_, err := (&ControlPlaneClaim{}).Start(t.Context(), cluster, "", "cp-0", func(context.Context) error { taken = true; return nil })
	g.Expect(err).To(MatchError(ContainSubstring("apiserver down")))
	g.Expect(taken).To(BeFalse(), "no lease is taken without the live read")

	var lists atomic.Int32
	_, err = (&ControlPlaneClaim{}).Start(t.Context(), claimCluster(fake.NewClientBuilder().Build(), clocktesting.NewFakeClock(t0), &lists), "", "cp-0",
		func(context.Context) error { return errors.New("conflict") })
	g.Expect(err).To(MatchError("conflict"), "take's error is returned")
}

// Two checks start two control-plane Nodes at once: the second waits for the first's lease to be written,
// reads it, and is refused. Starts in two clusters do not wait for each other; a start whose context ends
// while it waits gives up.
func TestControlPlaneClaimSerialisesStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewWithT(t)
		c := fake.NewClientBuilder().Build()
		var lists atomic.Int32
		cluster := claimCluster(c, clocktesting.NewFakeClock(t0), &lists)
		claim := &ControlPlaneClaim{}

		writing := make(chan struct{})
		written := make(chan struct{})
		write := sync.OnceFunc(func() { close(written) })
		t.Cleanup(write) // a failed assertion leaves no goroutine waiting
		firstErr := make(chan error, 1)
		go func() {
			_, err := claim.Start(t.Context(), cluster, "", "cp-0", func(ctx context.Context) error {
				close(writing)
				<-written // the lease write is under way
				return takeLeaseOf(c, "cp-0", "NodeHealthCheck.remediation.metalheal.io-cp", t0)(ctx)
			})
			firstErr <- err
		}()
		<-writing

		var second *ControlPlaneRefusal
		var secondErr error
		secondTook := false
		done := make(chan struct{})
		go func() {
			defer close(done)
			second, secondErr = claim.Start(t.Context(), cluster, "", "cp-1", func(context.Context) error { secondTook = true; return nil })
		}()
		synctest.Wait()
		g.Expect(lists.Load()).To(BeEquivalentTo(1), "the second start waits for the first before it reads the leases")

		// A start in another cluster does not wait.
		other := cluster
		other.Key = "fleet/edge-a"
		otherTook := false
		_, err := claim.Start(t.Context(), other, "", "cp-1", func(context.Context) error { otherTook = true; return nil })
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(otherTook).To(BeTrue())

		// A start whose context ends while it waits gives up.
		ctx, cancel := context.WithCancel(t.Context())
		gaveUp := make(chan error)
		go func() {
			_, err := claim.Start(ctx, cluster, "", "cp-2", func(context.Context) error { return nil })
			gaveUp <- err
		}()
		synctest.Wait()
		cancel()
		g.Expect(<-gaveUp).To(MatchError(context.Canceled))

		write()
		<-done
		g.Expect(<-firstErr).NotTo(HaveOccurred())
		g.Expect(secondErr).NotTo(HaveOccurred())
		g.Expect(secondTook).To(BeFalse(), "two control-plane Nodes at once")
		g.Expect(second).To(Equal(&ControlPlaneRefusal{Node: "cp-0", Holder: "NodeHealthCheck.remediation.metalheal.io-cp",
			RetryAt: t0.Add(ControlPlaneRecheck)}))
	})
}

// TestControlPlaneClaimWarmUp: after a start, a control-plane start waits until every other check has
// looked once (the leases of their remediations may have run out while the manager was down), naming
// them, or until WarmUpBound has passed; the starting check never waits for itself, a check gone is not
// waited for, and once warm the claim lists no check again.
func TestControlPlaneClaimWarmUp(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	var lists atomic.Int32
	cluster := claimCluster(fake.NewClientBuilder().Build(), clk, &lists)
	checks := []string{"MachineHealthCheck ns/cp", "NodeHealthCheck cp", "NodeHealthCheck workers"}
	listed := 0
	claim := &ControlPlaneClaim{}
	claim.Expect(func(context.Context) ([]string, error) { listed++; return checks, nil })
	start := func(check string) (*ControlPlaneRefusal, bool) {
		taken := false
		refusal, err := claim.Start(t.Context(), cluster, check, "cp-0", func(context.Context) error { taken = true; return nil })
		g.Expect(err).NotTo(HaveOccurred())
		return refusal, taken
	}

	refusal, taken := start("NodeHealthCheck cp")
	g.Expect(taken).To(BeFalse())
	g.Expect(refusal.WaitingFor).To(Equal([]string{"MachineHealthCheck ns/cp", "NodeHealthCheck workers"}), "not itself")
	g.Expect(refusal.Message()).To(ContainSubstring("waiting for MachineHealthCheck ns/cp, NodeHealthCheck workers"))
	g.Expect(refusal.RetryAt).To(Equal(t0.Add(WarmUpRecheck)))

	claim.Looked("NodeHealthCheck workers", t0)
	checks = checks[:2] // NodeHealthCheck workers deleted meanwhile: nothing to wait for
	refusal, _ = start("NodeHealthCheck cp")
	g.Expect(refusal.WaitingFor).To(Equal([]string{"MachineHealthCheck ns/cp"}))

	claim.Looked("MachineHealthCheck ns/cp", t0)
	refusal, taken = start("NodeHealthCheck cp")
	g.Expect(refusal).To(BeNil())
	g.Expect(taken).To(BeTrue(), "every other check has looked")
	before := listed
	start("NodeHealthCheck cp")
	g.Expect(listed).To(Equal(before), "warm: the checks are not listed again")

	t.Run("bounded", func(t *testing.T) {
		g := NewWithT(t)
		claim := &ControlPlaneClaim{}
		claim.Expect(func(context.Context) ([]string, error) { return []string{"MachineHealthCheck ns/unreachable"}, nil })
		claim.Looked("NodeHealthCheck cp", clk.Now()) // the manager's first reconcile
		clk.Step(WarmUpBound - time.Second)
		refusal, err := claim.Start(t.Context(), cluster, "NodeHealthCheck cp", "cp-0", func(context.Context) error { return nil })
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(refusal).NotTo(BeNil(), "its reconcile keeps failing")
		clk.Step(time.Second)
		refusal, err = claim.Start(t.Context(), cluster, "NodeHealthCheck cp", "cp-0", func(context.Context) error { return nil })
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(refusal).To(BeNil(), "waited for no longer than WarmUpBound after the first reconcile")
	})
	t.Run("nothing expected: warm at once", func(t *testing.T) {
		refusal, err := (&ControlPlaneClaim{}).Start(t.Context(), cluster, "NodeHealthCheck cp", "cp-0", func(context.Context) error { return nil })
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		NewWithT(t).Expect(refusal).To(BeNil())
	})
}

// TestControlPlaneClaimChanging: a control-plane Machine that a check sees being deleted or without a Node
// is recorded by no lease; told to the claim, it holds every other check's control-plane start in its
// cluster of Nodes back, not the telling check's own, nor another cluster's, until the check clears it or
// is forgotten.
func TestControlPlaneClaimChanging(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	var lists atomic.Int32
	cluster := claimCluster(fake.NewClientBuilder().Build(), clk, &lists)
	claim := &ControlPlaneClaim{}
	start := func(cluster NodeCluster, check string) (*ControlPlaneRefusal, bool) {
		taken := false
		refusal, err := claim.Start(t.Context(), cluster, check, "cp-0", func(context.Context) error { taken = true; return nil })
		g.Expect(err).NotTo(HaveOccurred())
		return refusal, taken
	}

	claim.Changing("", "MachineHealthCheck ns/cp", []string{"Machine ns/cp-1-new"})
	refusal, taken := start(cluster, "NodeHealthCheck cp")
	g.Expect(taken).To(BeFalse())
	g.Expect(refusal).To(And(HaveField("Node", "Machine ns/cp-1-new"), HaveField("Holder", "MachineHealthCheck ns/cp"),
		HaveField("RetryAt", t0.Add(ControlPlaneRecheck))))
	g.Expect(refusal.Message()).To(ContainSubstring("Control-plane Machine ns/cp-1-new is being deleted or has no Node (MachineHealthCheck ns/cp sees it)"))

	_, taken = start(cluster, "MachineHealthCheck ns/cp")
	g.Expect(taken).To(BeTrue(), "its own rule's")
	other := cluster
	other.Key = "workload ns/c2"
	_, taken = start(other, "NodeHealthCheck cp")
	g.Expect(taken).To(BeTrue(), "another cluster's control plane")

	claim.Changing("", "MachineHealthCheck ns/cp", nil)
	_, taken = start(cluster, "NodeHealthCheck cp")
	g.Expect(taken).To(BeTrue(), "cleared")

	claim.Changing("", "MachineHealthCheck ns/cp", []string{"Machine ns/cp-1-new"})
	claim.Forget("MachineHealthCheck ns/cp")
	_, taken = start(cluster, "NodeHealthCheck cp")
	g.Expect(taken).To(BeTrue(), "forgotten")
}
