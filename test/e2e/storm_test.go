//go:build e2e

package e2e

import (
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
)

// stormConditionDuration is how long a node of the storm scenario must be Unknown to be unhealthy.
const stormConditionDuration = 6 * time.Second

var _ = Describe("A remediation storm", func() {
	It("powers nothing off while 60% of the nodes are down, then remediates what is still broken once the budget allows again", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "storm"
		nodes := pool.take(ctx, group, 5)
		failing := nodes[:3]
		reportOnFailure(start, nodes...)
		// The default budget, maxUnhealthy 49%: two of five nodes may be remediated at once, not three. Nodes
		// that fail together turn Unknown up to ~3s apart (lease jitter, the node lifecycle controller's
		// period); the check's durations are longer than that, as in production (300s against tens of
		// seconds), so that all of them are failing when the first one's condition expires.
		createTemplate(ctx, harness.Namespace, group, remediation())
		createNodeHealthCheck(ctx, group, unhealthyFor(stormConditionDuration))

		By("three of five nodes fail at once")
		for _, n := range failing {
			Expect(h.Sim.InjectFault(n, nodesim.FaultTransient)).To(Succeed())
		}

		By("the check declares a storm")
		nhc := &v1alpha1.NodeHealthCheck{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: group}, nhc)).To(Succeed())
			g.Expect(meta.FindStatusCondition(nhc.Status.Conditions, v1alpha1.ConditionStormActive)).To(And(
				Not(BeNil()), HaveField("Status", BeEquivalentTo("True")), HaveField("Reason", v1alpha1.ReasonTooManyUnhealthy)))
			g.Expect(meta.IsStatusConditionFalse(nhc.Status.Conditions, v1alpha1.ConditionRemediationAllowed)).To(BeTrue())
			g.Expect(nhc.Status.HealthyNodes).To(HaveValue(BeEquivalentTo(2)))
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())

		By("and holds every remediation back while it lasts")
		Consistently(func(g Gomega) {
			var list v1alpha1.PowerCycleRemediationList
			g.Expect(k8s.List(ctx, &list)).To(Succeed())
			for _, p := range list.Items {
				g.Expect(nodes).NotTo(ContainElement(p.Name), "a remediation request during the storm")
			}
		}).WithContext(ctx).WithTimeout(2 * stormConditionDuration).WithPolling(poll).Should(Succeed())

		By("one of them recovers on its own: the storm ends, and the two still broken are power-cycled")
		healed := time.Now()
		Expect(h.Sim.ClearFault(failing[0])).To(Succeed())
		for _, n := range failing[1:] {
			waitRemediated(ctx, n, healed)
		}

		By("no host was powered off during the storm; after it, each still broken one was power-cycled once")
		for _, n := range nodes {
			for _, e := range tl.before("pcr/"+harness.Namespace+"/"+n, start, healed) {
				Fail("a remediation request during the storm: " + e.String())
			}
			if slices.Contains(failing[1:], n) {
				Expect(tl.at("power/"+n, "Off", start)).To(BeTemporally(">", healed), "node %s", n)
				Expect(resets(n)).To(Equal(powerCycledOnce), "node %s", n)
				continue
			}
			Expect(tl.has("power/"+n, "Off", start)).To(BeFalse(), "node %s", n)
			Expect(tl.has("pcr/"+harness.Namespace+"/"+n, "created", start)).To(BeFalse(), "node %s", n)
			Expect(resets(n)).To(BeEmpty(), "node %s", n)
		}
		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
	}, SpecTimeout(scenarioMax))
})
