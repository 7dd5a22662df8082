//go:build e2e

package e2e

import (
	"cmp"
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
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// killRow is a phase of the power cycle to kill the manager in, and how to know that the phase's work is
// done: the manager is killed after doing it and before recording that it moved on.
type killRow struct {
	phase v1alpha1.PowerCyclePhase
	// work says what the manager has done in the phase when it is killed.
	work string
	// done reports whether that work is visible in the world.
	done func(ctx context.Context, g Gomega, node string)
	// slowBoot: instead of the phase gate, the host is slow to boot, so that the remediation waits in the
	// phase (WaitingForNode: were it held there by the gate, the Node would be Ready and its check would
	// delete the request before the kill).
	slowBoot bool
	// bootHeld: besides the phase gate, the host does not finish booting before the kill (PoweringOn: its
	// BMC reads On, and a host that booted meanwhile would be Ready, its request deleted by its check, the
	// phase gone before the kill).
	bootHeld bool
}

var killTable = []killRow{
	{
		// A request that is ready records its acceptance with the power-off request, in the write that
		// enters PoweringOff; held before it, nothing is on record and nothing is done to the node.
		phase: "",
		work:  "the node lease is settled and the power state read; the write recording the acceptance, the remediation taint and the power-off request is refused, so neither is done",
		done: func(ctx context.Context, g Gomega, node string) {
			g.Expect(hasTaint(ctx, node, v1alpha1.TaintRemediation)).To(BeFalse())
			g.Expect(resets(node)).To(BeEmpty())
		},
	},
	{
		phase: v1alpha1.PhasePoweringOff,
		work:  "the power-off was recorded, sent, and the BMC reads Off",
		done: func(ctx context.Context, g Gomega, node string) {
			g.Expect(hostPower(node)).To(Equal(string(redfishmock.PowerOff)))
		},
	},
	{
		phase: v1alpha1.PhasePoweredOff,
		work:  "the host is confirmed off and the node fenced with the out-of-service taint",
		done: func(ctx context.Context, g Gomega, node string) {
			g.Expect(hasTaint(ctx, node, v1alpha1.TaintOutOfService)).To(BeTrue())
		},
	},
	{
		phase:    v1alpha1.PhasePoweringOn,
		work:     "the power-on was recorded, sent, and the BMC reads On",
		bootHeld: true,
		done: func(ctx context.Context, g Gomega, node string) {
			g.Expect(resets(node)).To(Equal(powerCycledOnce))
			g.Expect(hostPower(node)).To(Equal(string(redfishmock.PowerOn)))
		},
	},
	{
		phase:    v1alpha1.PhaseWaitingForNode,
		work:     "the BMC confirmed the power-on; the host is still booting",
		slowBoot: true,
		done: func(ctx context.Context, g Gomega, node string) {
			g.Expect(resets(node)).To(Equal(powerCycledOnce))
		},
	},
}

var _ = Describe("The manager killed mid-remediation", func() {
	It("is SIGKILLed in each phase of the power cycle and restarted: every remediation resumes from its status and completes, no host is powered off twice, nothing leaks", func(ctx SpecContext) {
		m := mgrs.ensure(ctx)
		start := time.Now()
		const group = "kill"
		nodes := pool.take(ctx, group, len(killTable)+1)
		bystander := nodes[len(killTable)]
		reportOnFailure(start, nodes...)
		remediateGroup(ctx, group, len(killTable), remediation(func(s *v1alpha1.PowerCycleRemediationSpec) { s.PowerOnTimeoutSeconds = 60 }))

		By("each node's remediation will be held in a phase of its own")
		var held []string
		for i, row := range killTable {
			node := nodes[i]
			if row.slowBoot || row.bootHeld {
				onPower(node, func(to redfishmock.PowerState) {
					if to == redfishmock.PowerOff {
						_ = h.Sim.InjectFault(node, nodesim.FaultPersistent) // a hook: no assertions here
					}
				})
			}
			if row.slowBoot {
				continue
			}
			gate.hold(ctx, pcrKey(node).Name, row.phase) // "": before its first phase
			held = append(held, pcrKey(node).Name)
		}

		By("their kubelets hang at once")
		for _, node := range nodes[:len(killTable)] {
			Expect(h.Sim.InjectFault(node, nodesim.FaultTransient)).To(Succeed())
		}

		for i, row := range killTable {
			By("the " + cmp.Or(string(row.phase), "new") + " remediation: " + row.work)
			node := nodes[i]
			Eventually(func(g Gomega) {
				p, err := getPCR(ctx, pcrKey(node))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(p).NotTo(BeNil())
				g.Expect(p.Status.Phase).To(Equal(row.phase))
				row.done(ctx, g, node)
			}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
		}

		By("the held remediations' managers did their phase's work and were refused moving on")
		for _, name := range held {
			Eventually(func() ([]string, error) { return refusals(m, name) }).
				WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).ShouldNot(BeEmpty(), "remediation %s", name)
		}

		By("the manager is SIGKILLed with every remediation in a different phase")
		m.Kill()
		for i, row := range killTable {
			p, err := getPCR(ctx, pcrKey(nodes[i]))
			Expect(err).NotTo(HaveOccurred())
			Expect(p).NotTo(BeNil(), "the remediation of %s is still there", nodes[i])
			Expect(p.Status.Phase).To(Equal(row.phase), "what the next manager finds for %s", nodes[i])
		}

		By("a new manager starts (the dead leader's election lease forgotten); nothing holds the remediations any more")
		gate.release(ctx, held...)
		forgetLeader(ctx)
		next := mgrs.start(ctx)
		mgrs.setShared(next)
		for i, row := range killTable {
			if row.slowBoot || row.bootHeld {
				Expect(h.Sim.ClearFault(nodes[i])).To(Succeed()) // the host finishes booting
			}
		}

		By("every remediation completes, each host power-cycled exactly once, in one attempt")
		for _, node := range nodes[:len(killTable)] {
			waitGone(ctx, pcrKey(node), remedyWait)
		}
		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
		for _, node := range nodes[:len(killTable)] {
			Expect(resets(node)).To(Equal(powerCycledOnce), "node %s", node)
			Expect(tl.has("pcr/"+pcrKey(node).Namespace+"/"+node, "attempt=2", start)).To(BeFalse(), "node %s", node)
		}
		Expect(resets(bystander)).To(BeEmpty())
		logs, err := os.ReadFile(next.LogPath)
		Expect(err).NotTo(HaveOccurred())
		for _, node := range nodes[:len(killTable)] {
			Expect(actedOn(string(logs), node)).NotTo(BeEmpty(), "the new manager took %s's remediation on (%s)", node, next.LogPath)
		}
	}, SpecTimeout(scenarioMax))

})

// refusals returns the lines of a manager's log where the phase gate refused to let a remediation move on.
func refusals(m *harness.Manager, name string) ([]string, error) {
	logs, err := os.ReadFile(m.LogPath)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(logs), "\n") {
		if strings.Contains(line, phaseGateName) && strings.Contains(line, fmt.Sprintf(`"PowerCycleRemediation":{"name":%q`, name)) {
			out = append(out, line)
		}
	}
	return out, nil
}
