//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
)

var _ = Describe("A check in dry run", func() {
	It("over a failing pool creates no request, powers nothing, and reports each node it would remediate; then acts once told to", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "dryrun"
		nodes := pool.take(ctx, group, 3)
		failing := nodes[:2]
		reportOnFailure(start, nodes...)
		createTemplate(ctx, harness.Namespace, group, remediation())
		createNodeHealthCheck(ctx, group, func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.DryRun = true
			c.Spec.MaxUnhealthy = ptr.To(intstr.FromString("100%")) // two of three: within the budget
		})

		By("two of three nodes fail")
		for _, n := range failing {
			Expect(h.Sim.InjectFault(n, nodesim.FaultTransient)).To(Succeed())
		}

		By("the check says, for each, what it would create")
		nhc := &v1alpha1.NodeHealthCheck{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: group}, nhc)).To(Succeed())
			for _, n := range failing {
				var e *v1alpha1.UnhealthyNode
				for i := range nhc.Status.UnhealthyNodes {
					if nhc.Status.UnhealthyNodes[i].Name == n {
						e = &nhc.Status.UnhealthyNodes[i]
					}
				}
				g.Expect(e).NotTo(BeNil(), "node %s", n)
				g.Expect(e.SkipReason).To(Equal(engine.SkipDryRun))
				g.Expect(e.SkipMessage).To(ContainSubstring("would create PowerCycleRemediation " + harness.Namespace + "/" + n))
			}
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())

		By("and starts nothing: no request, no lease, no power change, while it stays in dry run")
		Consistently(func(g Gomega) {
			for _, n := range nodes {
				g.Expect(remediationsOf(ctx, n)).To(BeEmpty(), "node %s", n)
				g.Expect(nodeLease(ctx, n)).To(BeNil(), "node %s", n)
			}
		}).WithContext(ctx).WithTimeout(3 * conditionDuration).WithPolling(poll).Should(Succeed())
		for _, n := range nodes {
			Expect(resets(n)).To(BeEmpty(), "node %s", n)
		}
		Eventually(func(g Gomega) {
			var would []string
			for _, e := range eventsOn(ctx, g, nhc) {
				if e.Reason == engine.EventWouldRemediate {
					would = append(would, e.Message)
				}
			}
			g.Expect(would).To(HaveLen(len(failing)), "one WouldRemediate event per node")
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())

		By("dry run off: the failing nodes are power-cycled")
		acting := time.Now()
		Expect(k8s.Get(ctx, client.ObjectKey{Name: group}, nhc)).To(Succeed())
		nhc.Spec.DryRun = false
		Expect(k8s.Update(ctx, nhc)).To(Succeed())
		for _, n := range failing {
			waitRemediated(ctx, n, acting)
			Expect(h.Sim.ClearFault(n)).To(Succeed())
		}
		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
	}, SpecTimeout(scenarioMax))
})
