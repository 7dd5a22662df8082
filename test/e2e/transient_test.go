//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

var _ = Describe("A node whose kubelet hangs", func() {
	It("is power-cycled back to Ready; its stateful pod is force-deleted by PodGC only after the host was confirmed off and fenced", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		nodes := pool.take(ctx, "transient", 2)
		broken, bystander := nodes[0], nodes[1]
		reportOnFailure(start, nodes...)
		ns := namespace(ctx, "e2e-transient")
		// The host comes back slowly (below), so give the node time to be Ready after power-on.
		remediateGroup(ctx, "transient", 1, remediation(func(s *v1alpha1.PowerCycleRemediationSpec) { s.PowerOnTimeoutSeconds = 120 }))

		By("a stateful pod runs on the node")
		pod, err := h.Sim.RunPod(ctx, nodesim.NewPod(ns, "db-0", broken, nodesim.WithClaim("data")))
		Expect(err).NotTo(HaveOccurred())
		Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		podObj := podKey(pod)

		By("its kubelet hangs; once powered off, the host is slow to come back (so that only Kubernetes can remove the pod meanwhile)")
		onPower(broken, func(to redfishmock.PowerState) {
			if to == redfishmock.PowerOff {
				_ = h.Sim.InjectFault(broken, nodesim.FaultPersistent) // a hook: no assertions here
			}
		})
		Expect(h.Sim.InjectFault(broken, nodesim.FaultTransient)).To(Succeed())

		By("the remediation powers the host off, confirms it and fences the node")
		pcr := pcrKey(broken)
		waitPhase(ctx, pcr, v1alpha1.PhaseWaitingForNode, detectWait)
		Expect(resets(broken)).To(Equal(powerCycledOnce))
		request, err := getPCR(ctx, pcr)
		Expect(err).NotTo(HaveOccurred())
		Expect(request).NotTo(BeNil())

		By("Kubernetes force-deletes the pod: taint eviction, then PodGC, while the node is down")
		Eventually(func() bool { return tl.has(podObj, "deleted", start) }).
			WithContext(ctx).WithTimeout(60 * time.Second).WithPolling(poll).Should(BeTrue())
		kcmLog, err := os.ReadFile(filepath.Join(h.World.LogDir(), "kube-controller-manager.log"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(kcmLog)).To(MatchRegexp(`PodGC is force deleting Pod.*pod="%s/db-0"`, ns))

		By("the host finishes booting: the node is Ready, the remediation succeeds and is deleted")
		Expect(h.Sim.ClearFault(broken)).To(Succeed())
		waitGone(ctx, pcr, remedyWait)
		// The suite's own watch may hear of the deletion a moment after the API server has it.
		pcrObj := "pcr/" + pcr.Namespace + "/" + pcr.Name
		Eventually(func() bool { return tl.has(pcrObj, "deleted", start) }).
			WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(BeTrue())

		By("in this order: request, remediation taint, host off, out-of-service taint, pod evicted, pod gone, node Ready, taints removed, request deleted; and the request saw the host off")
		nodeObj := "node/" + broken
		offAt := tl.at("power/"+broken, "Off", start)
		// The request records PoweredOff, then the remediator taints the node: a few milliseconds apart, and
		// the suite's Node and request watches may deliver the two in either order. So the phase is only
		// checked to come after the power-off; the unit tests pin the phase (which also records the taint)
		// before the taint.
		tl.at(pcrObj, "phase="+string(v1alpha1.PhasePoweredOff), offAt)
		order := []struct{ object, what string }{
			{pcrObj, "created"},
			{nodeObj, "taint+" + v1alpha1.TaintRemediation},
			{"power/" + broken, "Off"},
			{nodeObj, "taint+" + v1alpha1.TaintOutOfService},
			{podObj, "deleting"},
			{podObj, "deleted"},
			{nodeObj, "Ready=True"},
			{nodeObj, "taint-" + v1alpha1.TaintOutOfService},
			// The request is deleted by its check once the node is Ready: whether it recorded Succeeded
			// first is a race the check may win, and either way is right.
			{pcrObj, "deleted"},
		}
		at := start
		for _, step := range order {
			t, ok := tl.first(step.object, step.what, at)
			Expect(ok).To(BeTrue(), "%s %s did not happen after %s:\n%s", step.object, step.what, at.Format("15:04:05.000"), tl.dump(start, broken, "db-0"))
			at = t
		}

		By("the host's BMC keeps the record of the remediation its request no longer shows")
		expectRecorded(ctx, broken, request, v1alpha1.RemediationSucceeded)

		By("nothing is left behind; the bystander was never touched")
		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, "transient")
		Expect(resets(broken)).To(Equal(powerCycledOnce))
		Expect(resets(bystander)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))
})
