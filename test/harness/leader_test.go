package harness_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/test/harness"
)

// A leader stopped gracefully (SIGTERM: a rollout, a drain) hands its election lease back, so the standby
// leads within a few retry periods, not after the lease runs out. The lease here is 60s, so a leader
// that did not release it would keep the standby waiting about a minute.
func TestStandbyLeadsPromptlyWhenTheLeaderStopsGracefully(t *testing.T) {
	const (
		leaseDuration = 60 * time.Second
		// takeoverBound is well under the lease: the leader's shutdown (its controllers stop, then the
		// release) plus one retry period of the standby (2s, jittered), with room for a loaded machine.
		takeoverBound = 10 * time.Second
	)
	g := NewWithT(t)
	ctx := context.Background()
	h := startHarness(t, 1)

	args := []string{
		"--leader-elect-lease-duration=" + leaseDuration.String(),
		"--leader-elect-renew-deadline=40s",
		"--leader-elect-retry-period=2s",
	}
	first, err := h.StartManager(ctx, args...)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(first.Kill)
	second, err := h.StartManager(ctx, args...)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(second.Kill)

	var leader, standby *harness.Manager
	g.Eventually(func(g Gomega) {
		a, err := isLeader(ctx, first)
		g.Expect(err).NotTo(HaveOccurred())
		b, err := isLeader(ctx, second)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(a != b).To(BeTrue(), "exactly one leader (first: %v, second: %v)", a, b)
		leader, standby = first, second
		if b {
			leader, standby = second, first
		}
	}).WithTimeout(leaseDuration).WithPolling(250 * time.Millisecond).Should(Succeed())
	holder := leaseHolder(ctx, g, h)
	g.Expect(holder).NotTo(BeEmpty())

	stopped := time.Now()
	g.Expect(leader.Stop()).To(Succeed(), "the leader exits on SIGTERM (see %s)", leader.LogPath)
	g.Eventually(func() (bool, error) { return isLeader(ctx, standby) }).
		WithTimeout(takeoverBound).WithPolling(100*time.Millisecond).
		Should(BeTrue(), "the standby leads within %s of the leader's SIGTERM (see %s and %s)", takeoverBound, leader.LogPath, standby.LogPath)
	took := time.Since(stopped)
	g.Expect(leaseHolder(ctx, g, h)).NotTo(Equal(holder), "the election lease changed hands")
	t.Logf("the standby led %s after the leader's SIGTERM (lease duration %s)", took.Round(10*time.Millisecond), leaseDuration)
}

// isLeader reads a manager's leader election gauge from its metrics endpoint.
func isLeader(ctx context.Context, m *harness.Manager) (bool, error) {
	body, err := m.Metrics(ctx)
	if err != nil {
		return false, err
	}
	return strings.Contains(string(body), fmt.Sprintf("leader_election_master_status{name=%q} 1", "metalheal-harness")), nil
}

// leaseHolder returns the holder of the harness managers' election lease.
func leaseHolder(ctx context.Context, g Gomega, h *harness.Harness) string {
	var l coordinationv1.Lease
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: harness.Namespace, Name: "metalheal-harness"}, &l)).To(Succeed())
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
