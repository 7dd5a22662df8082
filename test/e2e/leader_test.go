//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
)

// takeoverWait bounds a standby's takeover: the dead leader's election lease (15s) must expire first.
const takeoverWait = 45 * time.Second

var _ = Describe("Two managers with leader election", func() {
	It("let the standby finish the remediation the leader was doing when it was killed", func(ctx SpecContext) {
		leader := mgrs.ensure(ctx)
		standby := mgrs.start(ctx)
		start := time.Now()
		const group = "leader"
		nodes := pool.take(ctx, group, 2)
		broken, bystander := nodes[0], nodes[1]
		reportOnFailure(start, nodes...)
		remediateGroup(ctx, group, 1, remediation())

		By("one manager leads, the other stands by")
		Eventually(func() (bool, error) { return isLeader(ctx, leader) }).
			WithContext(ctx).WithTimeout(takeoverWait).WithPolling(poll).Should(BeTrue())
		Expect(isLeader(ctx, standby)).To(BeFalse())

		By("the leader powers the host off and fences the node")
		pcr := pcrKey(broken)
		gate.hold(ctx, pcr.Name, v1alpha1.PhasePoweredOff)
		Expect(h.Sim.InjectFault(broken, nodesim.FaultTransient)).To(Succeed())
		Eventually(func(g Gomega) {
			p, err := getPCR(ctx, pcr)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhasePoweredOff))
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintOutOfService)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())

		By("the leader is killed there, with the host powered off")
		leader.Kill()
		gate.release(ctx, pcr.Name)
		killed := time.Now()

		By("the standby takes over when the dead leader's lease expires, and finishes the remediation")
		Eventually(func() (bool, error) { return isLeader(ctx, standby) }).
			WithContext(ctx).WithTimeout(takeoverWait).WithPolling(poll).Should(BeTrue())
		mgrs.setShared(standby)
		waitGone(ctx, pcr, remedyWait)
		Expect(tl.at("power/"+broken, "On", killed)).NotTo(BeZero(), "powered back on after the leader died")
		logs, err := os.ReadFile(standby.LogPath)
		Expect(err).NotTo(HaveOccurred())
		Expect(actedOn(string(logs), broken)).NotTo(BeEmpty(), "the standby took the remediation on (%s)", standby.LogPath)

		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
		Expect(resets(broken)).To(Equal(powerCycledOnce))
		Expect(resets(bystander)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))
})

// isLeader reads a manager's leader election gauge from its metrics endpoint.
func isLeader(ctx context.Context, m *harness.Manager) (bool, error) {
	body, err := m.Metrics(ctx)
	if err != nil {
		return false, err
	}
	series := fmt.Sprintf("leader_election_master_status{name=%q} 1", leaderElectionLease.Name)
	return strings.Contains(string(body), series), nil
}

// actedOn returns the lines of a manager's log where it moved a node's remediation on (a phase change) or
// cleaned it up (its check deleted it first).
func actedOn(logs, node string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if (strings.Contains(line, `"msg":"Phase changed"`) || strings.Contains(line, `"msg":"Cleaned up"`)) &&
			strings.Contains(line, fmt.Sprintf(`"PowerCycleRemediation":{"name":%q`, node)) {
			out = append(out, line)
		}
	}
	return out
}
