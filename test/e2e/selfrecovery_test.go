//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

var _ = Describe("A node that recovers on its own mid-remediation", func() {
	It("has its remediation deleted, and is left powered on with no taint or lease", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "self-recovery"
		nodes := pool.take(ctx, group, 2)
		broken, bystander := nodes[0], nodes[1]
		reportOnFailure(start, nodes...)
		remediateGroup(ctx, group, 1, remediation(func(s *v1alpha1.PowerCycleRemediationSpec) { s.PowerOffTimeoutSeconds = 60 }))

		By("the node's BMC accepts power requests but is slow to act on them")
		system := harness.SystemID(broken)
		Expect(h.Mock.SetFaults(system, redfishmock.Faults{StuckPower: true})).To(Succeed())
		DeferCleanup(func() { Expect(h.Mock.SetFaults(system, redfishmock.Faults{})).To(Succeed()) })

		By("the kubelet hangs; the remediation asks for a power-off and waits for the BMC to confirm it")
		Expect(h.Sim.InjectFault(broken, nodesim.FaultTransient)).To(Succeed())
		pcr := pcrKey(broken)
		Eventually(func(g Gomega) {
			p, err := getPCR(ctx, pcr)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhasePoweringOff))
			g.Expect(p.Status.PowerRequest).To(HaveValue(HaveField("Target", v1alpha1.PowerOff)))
			g.Expect(resets(broken)).To(Equal([]string{"ForceOff"}))
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())

		By("the kubelet recovers before the host goes off: the check deletes the request; cleaning up, the remediator makes sure the host is on")
		Expect(h.Sim.ClearFault(broken)).To(Succeed())
		waitGone(ctx, pcr, remedyWait)
		// Cleanup asks for power-on since a power-off may be on its way; the Redfish driver sends no reset to a
		// system the BMC reads On, so the BMC's record shows the power-off alone.
		Expect(resets(broken)).To(Equal([]string{"ForceOff"}))
		Expect(tl.has("power/"+broken, string(redfishmock.PowerOff), start)).To(BeFalse(), "the host never lost power")
		Expect(tl.has("node/"+broken, "taint+"+v1alpha1.TaintOutOfService, start)).To(BeFalse(), "a host never confirmed off is never fenced")

		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
		Expect(resets(bystander)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))
})
