//go:build e2e

package e2e

import (
	"context"
	"net"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

var _ = Describe("Misbehaving BMCs among healthy ones", func() {
	It("remediate the hosts behind slow, failing and flaky BMCs; a dead BMC is reported and holds no one up", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "bmc-faults"
		nodes := pool.take(ctx, group, 5)
		slow, failing, flaky, dead, bystander := nodes[0], nodes[1], nodes[2], nodes[3], nodes[4]
		reportOnFailure(start, nodes...)
		remediateGroup(ctx, group, 4, remediation(func(s *v1alpha1.PowerCycleRemediationSpec) {
			s.PowerOffTimeoutSeconds = 15
			s.PowerOnTimeoutSeconds = 30
		}))

		By("one BMC answers slowly, one fails its next requests with 500, one drops its next connections, one is dead")
		faults := map[string]redfishmock.Faults{
			slow:    {Latency: time.Second},  // every request; a BMC call stays within --bmc-call-timeout=3s
			failing: {Status: 500, Count: 4}, // the next four requests to its system
			flaky:   {Drop: true, Count: 4},  // the next four connections closed unanswered
		}
		for node, f := range faults {
			Expect(h.Mock.SetFaults(harness.SystemID(node), f)).To(Succeed())
		}
		DeferCleanup(func() {
			for node := range faults {
				Expect(h.Mock.SetFaults(harness.SystemID(node), redfishmock.Faults{})).To(Succeed())
			}
		})
		hole := newBlackhole()
		DeferCleanup(hole.Close)
		restore := pointBMCAt(ctx, dead, "redfish+http://"+hole.Addr()+h.Mock.SystemPath(harness.SystemID(dead)))
		Eventually(func(g Gomega) {
			b := &v1alpha1.BMC{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: harness.Namespace, Name: dead}, b)).To(Succeed())
			g.Expect(meta.IsStatusConditionFalse(b.Status.Conditions, v1alpha1.ConditionReachable)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())

		By("four kubelets hang at once")
		for _, n := range []string{slow, failing, flaky, dead} {
			Expect(h.Sim.InjectFault(n, nodesim.FaultTransient)).To(Succeed())
		}

		By("the hosts behind the slow, failing and flaky BMCs are power-cycled back")
		for _, n := range []string{slow, failing, flaky} {
			waitRemediated(ctx, n, start)
		}

		By("meanwhile the dead BMC's remediation says so, and its host was never touched")
		p, err := getPCR(ctx, pcrKey(dead))
		Expect(err).NotTo(HaveOccurred())
		Expect(p).NotTo(BeNil(), "the dead BMC's node is still unhealthy: its request stays")
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady)).To(And(
			HaveField("Status", BeEquivalentTo("False")),
			HaveField("Reason", BeElementOf(v1alpha1.ReasonBMCTimeout, v1alpha1.ReasonBMCUnreachable))))
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady).Message).NotTo(ContainSubstring(harness.BMCPassword))
		Expect(resets(dead)).To(BeEmpty())
		Expect(hostPower(dead)).To(Equal(string(redfishmock.PowerOn)))
		Expect(tl.has("node/"+dead, "taint+"+v1alpha1.TaintOutOfService, start)).To(BeFalse(), "a host never confirmed off is never fenced")

		By("the dead BMC comes back: its remediation completes too")
		restore()
		waitRemediated(ctx, dead, start)

		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
		for _, n := range []string{slow, failing, flaky, dead} {
			Expect(resets(n)).To(Equal(powerCycledOnce), "node %s", n)
		}
		Expect(resets(bystander)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))
})

// waitRemediated waits for a node's remediation request to appear (since start) and then to be gone.
func waitRemediated(ctx context.Context, node string, start time.Time) {
	GinkgoHelper()
	key := pcrKey(node)
	Eventually(func() bool { return tl.has("pcr/"+key.Namespace+"/"+key.Name, "created", start) }).
		WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(BeTrue(), "no remediation request for %s", node)
	waitGone(ctx, key, remedyWait)
}

// pointBMCAt changes the address of a node's BMC object and returns what puts it back.
func pointBMCAt(ctx context.Context, node, address string) (restore func()) {
	GinkgoHelper()
	key := client.ObjectKey{Namespace: harness.Namespace, Name: node}
	set := func(addr string) string {
		GinkgoHelper()
		b := &v1alpha1.BMC{}
		Expect(k8s.Get(ctx, key, b)).To(Succeed())
		old := b.Spec.Address
		patch := client.MergeFrom(b.DeepCopy())
		b.Spec.Address = addr
		Expect(k8s.Patch(ctx, b, patch)).To(Succeed())
		return old
	}
	old := set(address)
	var once sync.Once
	restore = func() { once.Do(func() { set(old) }) }
	DeferCleanup(restore)
	return restore
}

// blackhole is a dead BMC: it accepts TCP connections and never answers.
type blackhole struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newBlackhole() *blackhole {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	b := &blackhole{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *blackhole) Addr() string { return strings.TrimPrefix(b.l.Addr().String(), "tcp://") }

func (b *blackhole) Close() {
	_ = b.l.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
}
