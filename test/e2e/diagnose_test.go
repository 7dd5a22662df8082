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

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/ipmisim"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The waits of the scenarios below, as short as the API allows.
const (
	diagnosticWait = 10 * time.Second // diagnosticInterrupt.timeoutSeconds: its minimum
	gracefulWait   = 5 * time.Second  // gracefulShutdown.timeoutSeconds: its minimum
)

// diagnoseThenShutDown asks for a diagnostic interrupt, then a graceful shutdown, before the power-off.
func diagnoseThenShutDown(s *v1alpha1.PowerCycleRemediationSpec) {
	s.DiagnosticInterrupt = &v1alpha1.DiagnosticInterrupt{TimeoutSeconds: int32(diagnosticWait / time.Second)}
	s.GracefulShutdown = &v1alpha1.GracefulShutdown{TimeoutSeconds: int32(gracefulWait / time.Second)}
}

var _ = Describe("Hosts asked for a kernel dump and a graceful shutdown before their power-off", func() {
	It("lets a host that dumps and powers off do so, and forces off a hung one at the bounds (Redfish)", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "diagnose"
		nodes := pool.take(ctx, group, 3)
		dumping, hung, bystander := nodes[0], nodes[1], nodes[2]
		reportOnFailure(start, nodes...)
		remediateGroup(ctx, group, 2, remediation(diagnoseThenShutDown))

		By("one host writes a kernel dump for 3s after an NMI and powers off; the other is hung: it ignores the NMI and the graceful shutdown")
		hosts := map[string]redfishmock.Host{
			dumping: {PowerOffAfterNMI: 3 * time.Second},
			hung:    {IgnoreGracefulShutdown: true},
		}
		for node, host := range hosts {
			Expect(h.Mock.SetHost(harness.SystemID(node), host)).To(Succeed())
		}
		DeferCleanup(func() {
			for node := range hosts {
				Expect(h.Mock.SetHost(harness.SystemID(node), redfishmock.Host{})).To(Succeed())
			}
		})

		By("both kubelets hang")
		Expect(h.Sim.InjectFault(dumping, nodesim.FaultTransient)).To(Succeed())
		Expect(h.Sim.InjectFault(hung, nodesim.FaultTransient)).To(Succeed())

		By("each request records how its waits ended, while it lives")
		dumped := attemptOnceEnded(ctx, dumping, func(a v1alpha1.PowerCycleAttempt) bool { return a.PoweredOff != nil })
		forced := attemptOnceEnded(ctx, hung, func(a v1alpha1.PowerCycleAttempt) bool { return a.PoweredOff != nil })
		waitRemediated(ctx, dumping, start)
		waitRemediated(ctx, hung, start)

		By("the dumping host got the NMI and nothing more until the power-on: the wait ended when it powered itself off")
		Expect(resets(dumping)).To(Equal([]string{"Nmi", "On"}))
		d := dumped.Status.Attempts[0]
		Expect(d.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestPoweredOff))
		Expect(d.DiagnosticInterrupt.Ended.Sub(d.DiagnosticInterrupt.Requested.Time)).To(BeNumerically("<", diagnosticWait), "ended early")
		Expect(d.GracefulShutdown).To(BeNil(), "a host that is off is asked nothing more")
		Expect(reasons(ctx, dumped)).To(ContainElements(EventDiagnosing, EventDiagnosticInterruptEnded+" PoweredOff"))

		By("the hung host got the NMI, the graceful shutdown, then the forced power-off, each wait at its bound")
		Expect(resets(hung)).To(Equal([]string{"Nmi", "GracefulShutdown", "ForceOff", "On"}))
		f := forced.Status.Attempts[0]
		Expect(f.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestTimedOut))
		Expect(f.DiagnosticInterrupt.Ended.Sub(f.DiagnosticInterrupt.Requested.Time)).To(BeNumerically(">=", diagnosticWait))
		Expect(f.GracefulShutdown.Result).To(Equal(v1alpha1.HostRequestTimedOut))
		Expect(f.GracefulShutdown.Ended.Sub(f.GracefulShutdown.Requested.Time)).To(BeNumerically(">=", gracefulWait))
		Expect(reasons(ctx, forced)).To(ContainElements(EventDiagnosing, EventDiagnosticInterruptEnded+" TimedOut",
			EventShuttingDown, EventGracefulShutdownEnded+" TimedOut", EventPoweringOff))
		shutDownAsked := tl.at("pcr/"+harness.Namespace+"/"+hung, "phase="+string(v1alpha1.PhaseShuttingDown), start)
		Expect(tl.at("power/"+hung, string(redfishmock.PowerOff), start).Sub(shutDownAsked)).To(BeNumerically(">=", gracefulWait-time.Second),
			"the power went only once the graceful shutdown's wait was over")
		Expect(tl.has("node/"+hung, "taint+"+v1alpha1.TaintOutOfService, start)).To(BeTrue())

		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
		Expect(resets(bystander)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))

	It("records the NMI ipmi_sim refuses as NotSupported, and forces off a host that ignores the soft power off (IPMI)", func(ctx SpecContext) {
		m := mgrs.ensure(ctx)
		start := time.Now()
		const group = "diagnose-ipmi"
		const node = "ipmi-diag-1"
		reportOnFailure(start, node)

		By("ipmi_sim powers the host of one more node; the host, on ipmi_sim's system interface, is hung: it ignores a soft power off")
		sim := startIPMIHost(ctx, node, group, ipmisim.ACPI(true))
		remediateGroup(ctx, group, 1, remediation(diagnoseThenShutDown))
		unsupported, err := ipmiDiagnoseCalls(ctx, m, "unsupported")
		Expect(err).NotTo(HaveOccurred())

		By("the kubelet hangs")
		Expect(h.Sim.InjectFault(node, nodesim.FaultTransient)).To(Succeed())
		pcr := attemptOnceEnded(ctx, node, func(a v1alpha1.PowerCycleAttempt) bool { return a.PoweredOff != nil })
		waitRemediated(ctx, node, start)

		By("the NMI reached ipmi_sim, which refused it: NotSupported, and the soft power off went out at once")
		a := pcr.Status.Attempts[0]
		Expect(a.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestNotSupported))
		Expect(a.DiagnosticInterrupt.Message).To(ContainSubstring("Set Chassis Power Control to Diag failed: Invalid data field in request"))
		Expect(pcr.Status.RetryCount).To(BeZero(), "not a failed attempt")
		Expect(ipmiDiagnoseCalls(ctx, m, "unsupported")).To(BeNumerically(">", unsupported), "the manager's own count of refused NMIs")

		By("the host was passed the soft power off, ignored it, and lost power at the bound")
		Expect(a.GracefulShutdown.Result).To(Equal(v1alpha1.HostRequestTimedOut))
		Expect(a.GracefulShutdown.Ended.Sub(a.GracefulShutdown.Requested.Time)).To(BeNumerically(">=", gracefulWait))
		Expect(sim.HostCommands()).To(Equal([]string{"graceful-shutdown", "power-off"}), "what ipmi_sim passed on to the host")
		Expect(tl.all("power/"+node, start)).To(HaveExactElements(HaveField("What", "Off"), HaveField("What", "On")), "the host lost power once and got it back")
		Expect(reasons(ctx, pcr)).To(ContainElements(EventDiagnosticInterruptEnded+" NotSupported", EventGracefulShutdownEnded+" TimedOut"))

		expectSettled(ctx, node)
		expectCheckSettled(ctx, group)
	}, SpecTimeout(scenarioMax))
})

// Event reasons of the remediator, as events.go names them (the suite does not import the controller).
const (
	EventDiagnosing               = "Diagnosing"
	EventDiagnosticInterruptEnded = "DiagnosticInterruptEnded"
	EventShuttingDown             = "ShuttingDown"
	EventGracefulShutdownEnded    = "GracefulShutdownEnded"
	EventPoweringOff              = "PoweringOff"
)

// attemptOnceEnded waits for a node's remediation request to show its first attempt as done says, and
// returns the request as it was then: the health check deletes it once the node is Ready again.
func attemptOnceEnded(ctx context.Context, node string, done func(v1alpha1.PowerCycleAttempt) bool) *v1alpha1.PowerCycleRemediation {
	GinkgoHelper()
	var pcr *v1alpha1.PowerCycleRemediation
	Eventually(func(g Gomega) {
		var err error
		pcr, err = getPCR(ctx, pcrKey(node))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pcr).NotTo(BeNil(), "no remediation request for %s yet", node)
		g.Expect(pcr.Status.Attempts).NotTo(BeEmpty())
		g.Expect(done(pcr.Status.Attempts[0])).To(BeTrue(), "attempt 1 of %s: %+v", node, pcr.Status.Attempts[0])
	}).WithContext(ctx).WithTimeout(detectWait + remedyWait).WithPolling(poll).Should(Succeed())
	return pcr
}

// reasons lists the events recorded about a request, as "<reason>" and, for the end of a wait,
// "<reason> <result>" too. Events outlive the request.
func reasons(ctx context.Context, pcr *v1alpha1.PowerCycleRemediation) []string {
	GinkgoHelper()
	var out []string
	Eventually(func(g Gomega) {
		out = nil
		for _, e := range eventsOn(ctx, g, pcr) {
			out = append(out, e.Reason)
			if e.Type == corev1.EventTypeNormal && (e.Reason == EventDiagnosticInterruptEnded || e.Reason == EventGracefulShutdownEnded) {
				out = append(out, e.Reason+" "+firstWord(e.Message))
			}
		}
		g.Expect(out).To(ContainElement(EventPoweringOff))
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	return out
}

// firstWord is what a message says before its first colon or space.
func firstWord(s string) string {
	return regexp.MustCompile(`^[A-Za-z]+`).FindString(s)
}

// ipmiDiagnoseCalls reads a manager's count of IPMI diagnostic interrupts with a result.
func ipmiDiagnoseCalls(ctx context.Context, m *harness.Manager, result string) (float64, error) {
	body, err := m.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	series := regexp.MustCompile(`metalheal_bmc_requests_total\{driver="ipmi",operation="Diagnose",result="` + result + `"\} ([0-9.e+]+)`)
	match := series.FindStringSubmatch(string(body))
	if match == nil {
		return 0, nil
	}
	return strconv.ParseFloat(match[1], 64)
}
