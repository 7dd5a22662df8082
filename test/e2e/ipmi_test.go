//go:build e2e

package e2e

import (
	"context"
	"regexp"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
)

var _ = Describe("A host behind IPMI among Redfish hosts", func() {
	It("is power-cycled through ipmitool against a real IPMI BMC (ipmi_sim), next to a Redfish host", func(ctx SpecContext) {
		m := mgrs.ensure(ctx)
		start := time.Now()
		const group = "ipmi"
		const ipmiNode = "ipmi-1"
		nodes := pool.take(ctx, group, 2)
		redfishNode, bystander := nodes[0], nodes[1]
		reportOnFailure(start, ipmiNode, redfishNode, bystander)

		By("a real IPMI BMC (ipmi_sim) powers the host of one more node, registered by its simulated kubelet")
		startIPMIHost(ctx, ipmiNode, group)
		remediateGroup(ctx, group, 2, remediation())

		By("the IPMI host's kubelet and a Redfish host's hang at once")
		Expect(h.Sim.InjectFault(ipmiNode, nodesim.FaultTransient)).To(Succeed())
		Expect(h.Sim.InjectFault(redfishNode, nodesim.FaultTransient)).To(Succeed())

		By("both are power-cycled back, each through its own protocol")
		waitRemediated(ctx, ipmiNode, start)
		waitRemediated(ctx, redfishNode, start)
		Expect(tl.all("power/"+ipmiNode, start)).To(HaveExactElements(
			HaveField("What", "Off"), HaveField("What", "On")), "the IPMI host lost power once and got it back")
		Expect(resets(redfishNode)).To(Equal(powerCycledOnce))
		Expect(ipmiPowerCalls(ctx, m)).To(And(HaveKeyWithValue("PowerOff", BeNumerically(">=", 1)), HaveKeyWithValue("PowerOn", BeNumerically(">=", 1))),
			"the manager's own count of successful IPMI power calls")

		expectSettled(ctx, ipmiNode, redfishNode, bystander)
		expectCheckSettled(ctx, group)
		Expect(resets(bystander)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))
})

// bmcRequestSeries matches a successful IPMI call in metalheal_bmc_requests_total.
var bmcRequestSeries = regexp.MustCompile(`metalheal_bmc_requests_total\{driver="ipmi",operation="([A-Za-z]+)",result="success"\} ([0-9.e+]+)`)

// ipmiPowerCalls reads a manager's count of successful IPMI calls by operation.
func ipmiPowerCalls(ctx context.Context, m *harness.Manager) (map[string]float64, error) {
	body, err := m.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, match := range bmcRequestSeries.FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(match[2], 64)
		if err != nil {
			return nil, err
		}
		out[match[1]] = v
	}
	return out, nil
}
