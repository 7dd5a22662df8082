//go:build e2e

package e2e

import (
	"context"
	"regexp"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/ipmisim"
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
		sim := ipmisim.Start(ginkgoTB{})
		power := newIPMIPower(ipmiNode, sim)
		Expect(power.PoweredOn(ipmiNode)).To(BeTrue())
		power.Subscribe(func(node string, on bool) { _ = h.Sim.SetPower(node, on) })
		ipmiHosts.Store(ipmiNode, power)
		DeferCleanup(func() { ipmiHosts.Delete(ipmiNode) })
		pollCtx, stopPolling := context.WithCancel(context.Background())
		go power.run(pollCtx)
		DeferCleanup(stopPolling)
		Expect(h.Sim.AddNodes(ctx, nodesim.NodeSpec{Name: ipmiNode, Labels: map[string]string{
			"node-role.kubernetes.io/worker": "", groupLabel: group}})).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(h.Sim.Remove(ctx, ipmiNode)).To(Succeed()) })
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: harness.Namespace, Name: "ipmi-credentials"},
			StringData: map[string]string{"username": ipmisim.Username, "password": ipmisim.Password},
		}
		Expect(k8s.Create(ctx, secret)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, secret)).To(Succeed()) })
		bmc := &v1alpha1.BMC{
			ObjectMeta: metav1.ObjectMeta{Namespace: harness.Namespace, Name: ipmiNode},
			Spec: v1alpha1.BMCSpec{
				NodeName:             ipmiNode,
				Address:              sim.Address,
				CredentialsSecretRef: v1alpha1.SecretReference{Name: secret.Name},
			},
		}
		Expect(k8s.Create(ctx, bmc)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, bmc)).To(Succeed()) })
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
