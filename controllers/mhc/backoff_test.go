package mhc

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
)

var _ = Describe("Repeat-remediation back-off", func() {
	// remediationBackoff after 1, initial 10m, max 40m: the second request waits 10m after the first, the
	// third 20m after the second, the fourth 40m after the third. Each hold is in the status with its end,
	// in one Normal event and in the metric, and the check looks again exactly at its end.
	It("spaces the requests of a Machine that fails again each time it comes back at the configured growing intervals", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot"))
			mhc.Spec.RemediationBackoff = &v1alpha1.RemediationBackoff{After: ptr.To[int32](1),
				Window: &metav1.Duration{Duration: 24 * time.Hour}, Initial: &metav1.Duration{Duration: 10 * time.Minute},
				Max: &metav1.Duration{Duration: 40 * time.Minute}}
		})
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionTrue, time.Hour)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		holdsBefore := testutil.ToFloat64(backoff.MHCMetrics.Holds)
		held := backoff.MHCMetrics.Held.WithLabelValues(w.ns + "/workers")
		holdEvents := func() int {
			n := 0
			for _, e := range w.rec.all() {
				if e.Reason == EventRemediationBackingOff {
					Expect(e.Type).To(Equal(corev1.EventTypeNormal))
					Expect(e.Kind).To(Equal("Machine"))
					n++
				}
			}
			return n
		}

		var created []time.Time
		for round := range 4 {
			w.setReady(ctx, k8s, node, corev1.ConditionFalse, 0)
			w.clock.Step(5 * time.Minute) // Ready=False for its timeout
			res := w.reconcile(ctx, "workers")
			if round > 0 {
				By("failing again a minute after it came back: held back until the back-off's end")
				Expect(w.powerCycleRemediations(ctx)).To(BeEmpty(), "round %d", round)
				until := created[round-1].Add(10 * time.Minute << (round - 1))
				Expect(w.check(ctx, "workers").Status.RecentRemediations).To(ConsistOf(And(
					HaveField("Name", "m"), HaveField("Starts", HaveLen(round)),
					HaveField("BackoffUntil", HaveField("Time", BeTemporally("==", until))))))
				Expect(w.check(ctx, "workers").Status.UnhealthyMachines).To(ConsistOf(And(HaveField("Name", "m"),
					HaveField("SkipReason", "BackingOff"), HaveField("SkipMessage", ContainSubstring(until.UTC().Format(time.RFC3339))))),
					"the Machine's status says it is held back, and until when")
				Expect(res.RequeueAfter).To(Equal(until.Sub(w.clock.Now())), "the check looks again when the hold ends")
				Expect(testutil.ToFloat64(held)).To(Equal(1.0))

				w.clock.SetTime(until.Add(-time.Second))
				w.reconcile(ctx, "workers")
				Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
				Expect(holdEvents()).To(Equal(round), "one event per hold")
				w.clock.SetTime(until)
				w.reconcile(ctx, "workers")
			}
			Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1), "round %d", round)
			st := w.check(ctx, "workers").Status
			Expect(st.UnhealthyMachines).To(HaveLen(1))
			created = append(created, st.UnhealthyMachines[0].Remediations[0].Started.Time)
			Expect(created[round]).To(BeTemporally("==", w.clock.Now()))
			Expect(testutil.ToFloat64(held)).To(Equal(0.0))

			By("power-cycled, Ready again a minute later: the request goes")
			w.clock.Step(time.Minute)
			w.setReady(ctx, k8s, node, corev1.ConditionTrue, 0)
			w.reconcile(ctx, "workers")
			Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
			Expect(w.check(ctx, "workers").Status.RecentRemediations).To(HaveLen(1), "remembered while the Machine is healthy")
			w.clock.Step(time.Minute)
		}

		starts := w.check(ctx, "workers").Status.RecentRemediations[0].Starts
		Expect(starts).To(HaveLen(4))
		var gaps []time.Duration
		for i := 1; i < len(starts); i++ {
			gaps = append(gaps, starts[i].Sub(starts[i-1].Time))
			Expect(starts[i].Time).To(BeTemporally("==", created[i]))
		}
		Expect(gaps).To(Equal([]time.Duration{10 * time.Minute, 20 * time.Minute, 40 * time.Minute}))
		Expect(holdEvents()).To(Equal(3))
		Expect(testutil.ToFloat64(backoff.MHCMetrics.Holds) - holdsBefore).To(Equal(3.0))
	})
})
