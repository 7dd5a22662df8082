//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// fenceWithin is how soon after a power cut the out-of-service taint must be on when the BMC's event
// stream tells of it (issue 34); a poll adds its interval.
const fenceWithin = 5 * time.Second

// powerWatchPoll is the power watch's poll interval in these scenarios: the API's least.
const powerWatchPoll = 5 * time.Second

// fenceOnTheBMCsWord is a NodeHealthCheck mutation: a node is also unhealthy as soon as the power watch
// says its BMC reported it off (PoweredOff=True, duration 0s).
func fenceOnTheBMCsWord(n *v1alpha1.NodeHealthCheck) {
	n.Spec.UnhealthyConditions = append(n.Spec.UnhealthyConditions,
		v1alpha1.NodeUnhealthyCondition{Type: v1alpha1.NodeConditionPoweredOff, Status: "True", Duration: metav1.Duration{}})
}

// watchPower sets spec.powerWatch on the BMCs of nodes for the rest of the scenario.
func watchPower(ctx context.Context, watch *v1alpha1.PowerWatch, nodes ...string) {
	GinkgoHelper()
	for _, node := range nodes {
		b := &v1alpha1.BMC{}
		key := client.ObjectKey{Namespace: harness.Namespace, Name: node}
		Expect(k8s.Get(ctx, key, b)).To(Succeed())
		patch := client.MergeFrom(b.DeepCopy())
		b.Spec.PowerWatch = watch
		Expect(k8s.Patch(ctx, b, patch)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			b := &v1alpha1.BMC{}
			Expect(k8s.Get(ctx, key, b)).To(Succeed())
			patch := client.MergeFrom(b.DeepCopy())
			b.Spec.PowerWatch = nil
			Expect(k8s.Patch(ctx, b, patch)).To(Succeed())
		})
	}
}

// cutPower cuts a host's power through the Redfish mock's control API, as someone pulling its plugs: no
// BMC request, nothing metalheal asked for. It returns when the mock has it.
func cutPower(ctx context.Context, node string) time.Time {
	GinkgoHelper()
	mockControl(ctx, http.MethodPost, "/mock/systems/"+harness.SystemID(node)+"/power", `{"powerState":"Off"}`)
	at := time.Now()
	state, err := h.Mock.PowerState(harness.SystemID(node))
	Expect(err).NotTo(HaveOccurred())
	Expect(state).To(Equal(redfishmock.PowerOff))
	return at
}

// mockControl sends a request to the Redfish mock's control API (plain HTTP in the harness).
func mockControl(ctx context.Context, method, path, body string) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, method, h.Mock.URL()+path, bytes.NewBufferString(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	Expect(resp.StatusCode).To(BeNumerically("<", 300), "the mock's control API refused %s %s", method, path)
}

// managerGauge reads a gauge of a manager's metrics (0 when absent).
func managerGauge(ctx context.Context, m *harness.Manager, name string) (float64, error) {
	body, err := m.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	match := regexp.MustCompile(`(?m)^` + name + ` ([0-9.e+]+)$`).FindSubmatch(body)
	if match == nil {
		return 0, nil
	}
	return strconv.ParseFloat(string(match[1]), 64)
}

// streamsOpen waits until the manager holds at least n event streams open.
func streamsOpen(ctx context.Context, m *harness.Manager, n int) {
	GinkgoHelper()
	Eventually(func() (float64, error) { return managerGauge(ctx, m, "metalheal_power_watch_streams") }).
		WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(BeNumerically(">=", n))
}

// fencedOnTheBMCsWord cuts the power of node (cut, which returns when it did), whose BMC the manager
// watches, and checks that the node is fenced on the BMC's word: PoweredOff=True, a request, the
// out-of-service taint on within bound of the cut. It returns the time from the cut to the taint, and
// whether the Node was still Ready when the taint went on.
func fencedOnTheBMCsWord(ctx context.Context, node string, start time.Time, bound time.Duration, cut func() time.Time) (time.Duration, bool) {
	GinkgoHelper()
	nodeObj := "node/" + node
	n := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	Expect(nodeReady(n)).To(Equal(string(corev1.ConditionTrue)))

	cutAt := cut()
	Eventually(func() bool { return tl.has(nodeObj, "taint+"+v1alpha1.TaintOutOfService, cutAt) }).
		WithContext(ctx).WithTimeout(bound + 10*time.Second).WithPolling(50 * time.Millisecond).Should(BeTrue())
	taintAt := tl.at(nodeObj, "taint+"+v1alpha1.TaintOutOfService, cutAt)
	conditionAt := tl.at(nodeObj, v1alpha1.NodeConditionPoweredOff+"=True", cutAt)
	unknownAt, wentUnknown := tl.first(nodeObj, "Ready=Unknown", cutAt)
	stillReady := !wentUnknown || unknownAt.After(taintAt)
	took := taintAt.Sub(cutAt)
	AddReportEntry("cut → taint", fmt.Sprintf("%s: power cut → PoweredOff=True %s, → out-of-service taint %s (bound %s); Node still Ready then: %t",
		node, conditionAt.Sub(cutAt).Round(time.Millisecond), took.Round(time.Millisecond), bound, stillReady))
	fmt.Fprintf(GinkgoWriter, "%s: cut → PoweredOff=True %s, cut → out-of-service taint %s, still Ready: %t\n",
		node, conditionAt.Sub(cutAt).Round(time.Millisecond), took.Round(time.Millisecond), stillReady)
	Expect(took).To(BeNumerically("<=", bound), "the out-of-service taint came %s after the cut:\n%s", took, tl.dump(start, node))

	cond := nodeConditionOf(ctx, node, v1alpha1.NodeConditionPoweredOff)
	Expect(cond.Reason).To(Equal(v1alpha1.ReasonBMCReportedOff))
	Expect(cond.Message).To(ContainSubstring("did not answer"))
	return took, stillReady
}

// nodeConditionOf returns a Node's condition of this type, or an empty one.
func nodeConditionOf(ctx context.Context, node, condType string) corev1.NodeCondition {
	GinkgoHelper()
	n := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	for _, c := range n.Status.Conditions {
		if string(c.Type) == condType {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// expectBackOn waits for the remediation of node to be over: powered on, Ready, PoweredOff=False, the
// request gone, everything settled. The request ended Succeeded before its check deleted it: PoweredOff
// stayed True until the host was back (its kubelet's report), not while it booted behind a stale Ready.
func expectBackOn(ctx context.Context, node, group string, start time.Time) {
	GinkgoHelper()
	waitGone(ctx, pcrKey(node), remedyWait)
	pcrObj := "pcr/" + pcrKey(node).Namespace + "/" + pcrKey(node).Name
	Eventually(func() bool { return tl.has(pcrObj, "deleted", start) }).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(BeTrue())
	succeeded, ok := tl.first(pcrObj, "phase="+string(v1alpha1.PhaseSucceeded), start)
	Expect(ok).To(BeTrue(), "the request never reached Succeeded:\n%s", tl.dump(start, node))
	Expect(succeeded).To(BeTemporally("<=", tl.at(pcrObj, "deleted", start)))
	Eventually(func() string { return nodeConditionOf(ctx, node, v1alpha1.NodeConditionPoweredOff).Reason }).
		WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Equal(v1alpha1.ReasonBMCReportedOn))
	expectSettled(ctx, node)
	expectCheckSettled(ctx, group)
}

// cutRedfish is a cut of node's power through the Redfish mock's control API, for fencedOnTheBMCsWord.
func cutRedfish(ctx context.Context, node string) func() time.Time {
	return func() time.Time { return cutPower(ctx, node) }
}

var _ = Describe("Fence on the BMC's word", func() {
	It("fences a host whose power is cut while its Node is still Ready, and brings it back", func(ctx SpecContext) {
		m := mgrs.ensure(ctx)
		start := time.Now()
		nodes := pool.take(ctx, "powercut", 2)
		cut, bystander := nodes[0], nodes[1]
		reportOnFailure(start, nodes...)
		createTemplate(ctx, harness.Namespace, "powercut", remediation())
		createNodeHealthCheck(ctx, "powercut", maxUnhealthy(intstr.FromInt32(1)), fenceOnTheBMCsWord)

		By("the BMCs of the pool are watched: each one's event stream (the mock offers one), a poll every 5s while none is open")
		watchPower(ctx, &v1alpha1.PowerWatch{EventStream: v1alpha1.PowerWatchEventStreamAuto, PollIntervalSeconds: int32(powerWatchPoll / time.Second)}, nodes...)
		streamsOpen(ctx, m, len(nodes))

		By("the host's power is cut: the out-of-service taint is on within 5s, before the Node is even NotReady, with no power-off sent")
		_, stillReady := fencedOnTheBMCsWord(ctx, cut, start, fenceWithin, cutRedfish(ctx, cut))
		Expect(stillReady).To(BeTrue(), "fenced before the node lifecycle controller noticed the silence")
		Expect(nodeConditionOf(ctx, cut, v1alpha1.NodeConditionPoweredOff).Message).To(ContainSubstring("(its event stream)"))

		By("the remediation powers the host on; the BMC reads On, PoweredOff turns False and the request goes")
		expectBackOn(ctx, cut, "powercut", start)
		Expect(resets(cut)).To(Equal([]string{"On"}), "the BMC's reading was the confirmed power-off: the host was only powered on again")
		Expect(resets(bystander)).To(BeEmpty())
		expectSettled(ctx, bystander)
	}, SpecTimeout(scenarioMax))

	It("catches the cut with its poll when the stream is off, within the poll interval plus 5s", func(ctx SpecContext) {
		m := mgrs.ensure(ctx)
		start := time.Now()
		node := pool.take(ctx, "powercut-poll", 1)[0]
		reportOnFailure(start, node)
		createTemplate(ctx, harness.Namespace, "powercut-poll", remediation())
		createNodeHealthCheck(ctx, "powercut-poll", maxUnhealthy(intstr.FromInt32(1)), fenceOnTheBMCsWord)
		watchPower(ctx, &v1alpha1.PowerWatch{EventStream: v1alpha1.PowerWatchEventStreamDisabled, PollIntervalSeconds: int32(powerWatchPoll / time.Second)}, node)
		Eventually(func() (float64, error) { return managerGauge(ctx, m, "metalheal_power_watch_hosts") }).
			WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(BeNumerically(">=", 1))

		fencedOnTheBMCsWord(ctx, node, start, powerWatchPoll+fenceWithin, cutRedfish(ctx, node))
		Expect(nodeConditionOf(ctx, node, v1alpha1.NodeConditionPoweredOff).Message).To(ContainSubstring("(a poll)"))
		expectBackOn(ctx, node, "powercut-poll", start)
		Expect(resets(node)).To(Equal([]string{"On"}))
	}, SpecTimeout(scenarioMax))

	It("catches the cut with its poll when the BMC drops its event stream and stops offering it, within the poll interval plus 5s", func(ctx SpecContext) {
		m := mgrs.ensure(ctx)
		start := time.Now()
		node := pool.take(ctx, "powercut-dropped", 1)[0]
		reportOnFailure(start, node)
		createTemplate(ctx, harness.Namespace, "powercut-dropped", remediation())
		createNodeHealthCheck(ctx, "powercut-dropped", maxUnhealthy(intstr.FromInt32(1)), fenceOnTheBMCsWord)
		watchPower(ctx, &v1alpha1.PowerWatch{EventStream: v1alpha1.PowerWatchEventStreamAuto, PollIntervalSeconds: int32(powerWatchPoll / time.Second)}, node)
		streamsOpen(ctx, m, 1)

		By("the BMC's EventService is switched off: its stream drops, and opening it again finds none")
		mockControl(ctx, http.MethodPost, "/mock/eventservice", `{"state":"Disabled"}`)
		DeferCleanup(func(ctx SpecContext) { mockControl(ctx, http.MethodPost, "/mock/eventservice", `{"state":"Enabled"}`) })
		Eventually(func() (float64, error) { return managerGauge(ctx, m, "metalheal_power_watch_streams") }).
			WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(BeZero())

		fencedOnTheBMCsWord(ctx, node, start, powerWatchPoll+fenceWithin, cutRedfish(ctx, node))
		Expect(nodeConditionOf(ctx, node, v1alpha1.NodeConditionPoweredOff).Message).To(ContainSubstring("(a poll)"))
		expectBackOn(ctx, node, "powercut-dropped", start)
		Expect(resets(node)).To(Equal([]string{"On"}))
	}, SpecTimeout(scenarioMax))

	It("fences an IPMI host (ipmi_sim) whose power is cut, by its poll, with no power-off sent", func(ctx SpecContext) {
		m := mgrs.ensure(ctx)
		start := time.Now()
		const group, node = "powercut-ipmi", "ipmi-cut"
		reportOnFailure(start, node)
		sim := startIPMIHost(ctx, node, group)
		createTemplate(ctx, harness.Namespace, group, remediation())
		createNodeHealthCheck(ctx, group, maxUnhealthy(intstr.FromInt32(1)), fenceOnTheBMCsWord)
		// IPMI has no event stream: Auto polls.
		watchPower(ctx, &v1alpha1.PowerWatch{EventStream: v1alpha1.PowerWatchEventStreamAuto, PollIntervalSeconds: int32(powerWatchPoll / time.Second)}, node)
		Eventually(func() (float64, error) { return managerGauge(ctx, m, "metalheal_power_watch_hosts") }).
			WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(BeNumerically(">=", 1))
		powerOffs := func() float64 {
			calls, err := ipmiPowerCalls(ctx, m)
			Expect(err).NotTo(HaveOccurred())
			return calls["PowerOff"]
		}
		offsBefore := powerOffs()

		fencedOnTheBMCsWord(ctx, node, start, powerWatchPoll+fenceWithin, func() time.Time {
			Expect(sim.CutPower()).To(Succeed()) // the host process dies: ipmi_sim reports the power off
			return time.Now()
		})
		Expect(nodeConditionOf(ctx, node, v1alpha1.NodeConditionPoweredOff).Message).To(ContainSubstring("(a poll)"))
		expectBackOn(ctx, node, group, start)
		Expect(tl.all("power/"+node, start)).To(HaveExactElements(HaveField("What", "Off"), HaveField("What", "On")),
			"the host lost its power once and got it back")
		Expect(powerOffs()).To(Equal(offsBefore), "no power-off was sent: the BMC's reading was the confirmed power-off")
	}, SpecTimeout(scenarioMax))
})
