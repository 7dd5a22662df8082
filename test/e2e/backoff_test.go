//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
)

// The back-off of the scenario: every remediation after the first within 10m waits, 30s after the previous
// one, then 60s. A power cycle and the next failure's detection take ~20s in this world, so without it the
// requests would come ~20s apart.
const (
	backoffInitial = 30 * time.Second
	backoffMax     = 60 * time.Second
)

var _ = Describe("A node that fails again each time it is power-cycled back", func() {
	It("gets its remediation requests at the back-off's growing intervals, not back to back", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "backoff"
		nodes := pool.take(ctx, group, 2)
		flaky, bystander := nodes[0], nodes[1]
		reportOnFailure(start, nodes...)
		createTemplate(ctx, harness.Namespace, group, remediation())
		createNodeHealthCheck(ctx, group, maxUnhealthy(intstr.FromInt32(1)), func(n *v1alpha1.NodeHealthCheck) {
			n.Spec.RemediationBackoff = &v1alpha1.RemediationBackoff{After: ptr.To[int32](1),
				Window: &metav1.Duration{Duration: 10 * time.Minute}, Initial: &metav1.Duration{Duration: backoffInitial},
				Max: &metav1.Duration{Duration: backoffMax}}
		})
		pcrObj := "pcr/" + harness.Namespace + "/" + flaky

		var created []time.Time
		for round := range 3 {
			since := time.Now()
			By(fmt.Sprintf("failure %d: the kubelet hangs", round+1))
			Expect(h.Sim.InjectFault(flaky, nodesim.FaultTransient)).To(Succeed())
			wait := time.Duration(0)
			if round > 0 {
				wait = backoffInitial << (round - 1)
				By(fmt.Sprintf("the check holds the next request back for %s after the last, and says until when", wait))
				var until time.Time
				Eventually(func(g Gomega) {
					nhc := &v1alpha1.NodeHealthCheck{}
					g.Expect(k8s.Get(ctx, client.ObjectKey{Name: group}, nhc)).To(Succeed())
					i := slices.IndexFunc(nhc.Status.UnhealthyNodes, func(u v1alpha1.UnhealthyNode) bool { return u.Name == flaky })
					g.Expect(i).To(BeNumerically(">=", 0))
					g.Expect(nhc.Status.UnhealthyNodes[i].SkipReason).To(Equal("BackingOff"))
					j := slices.IndexFunc(nhc.Status.RecentRemediations, func(r v1alpha1.RecentRemediation) bool { return r.Name == flaky })
					g.Expect(j).To(BeNumerically(">=", 0))
					g.Expect(nhc.Status.RecentRemediations[j].BackoffUntil).NotTo(BeNil())
					until = nhc.Status.RecentRemediations[j].BackoffUntil.Time
				}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
				// Status times are to the second.
				Expect(until).To(BeTemporally("~", created[round-1].Add(wait), time.Second))
				Expect(tl.has(pcrObj, "created", since)).To(BeFalse(), "a request during the hold")
			}
			Eventually(func() bool { return tl.has(pcrObj, "created", since) }).
				WithContext(ctx).WithTimeout(detectWait+wait).WithPolling(poll).Should(BeTrue(), "no remediation request for %s", flaky)
			created = append(created, tl.at(pcrObj, "created", since))
			By(fmt.Sprintf("power-cycled back to Ready (request %d)", round+1))
			waitGone(ctx, pcrKey(flaky), remedyWait)
		}

		By("the requests came at the configured growing intervals, each as soon as its hold ended")
		AddReportEntry("request gaps", fmt.Sprintf("%s, %s", created[1].Sub(created[0]), created[2].Sub(created[1])))
		for i, wait := range []time.Duration{backoffInitial, backoffMax} {
			gap := created[i+1].Sub(created[i])
			// The start is remembered to the second; the hold ends at it plus the wait and is acted on at once.
			Expect(gap).To(BeNumerically(">=", wait-time.Second), "request %d came %s after the one before", i+2, gap)
			Expect(gap).To(BeNumerically("<", wait+5*time.Second), "request %d came %s after the one before", i+2, gap)
		}
		Expect(resets(flaky)).To(Equal(slices.Concat(powerCycledOnce, powerCycledOnce, powerCycledOnce)))
		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
		Expect(resets(bystander)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))
})
