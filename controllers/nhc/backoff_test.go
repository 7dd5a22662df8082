package nhc

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
)

// A Node that fails again each time it comes back gets its requests at the configured growing intervals
// (remediationBackoff after 1, initial 10m, max 40m): 10m, 20m, then 40m after the previous one. Each hold
// is in the Node's status with its end, in one Normal event, in the metric, and the check looks again
// exactly at its end. The memory is the status: a restarted reconciler keeps it.
var _ = Describe("Back-off", func() {
	It("spaces the requests of a Node that fails again and again at growing intervals, remembered in the status", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &ref, func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.RemediationBackoff = &v1alpha1.RemediationBackoff{After: ptr.To[int32](1),
				Window: &metav1.Duration{Duration: 24 * time.Hour}, Initial: &metav1.Duration{Duration: 10 * time.Minute},
				Max: &metav1.Duration{Duration: 40 * time.Minute}}
		})
		sick := w.node(ctx, "w1", corev1.ConditionTrue, t0)
		holdsBefore := testutil.ToFloat64(backoff.NHCMetrics.Holds)

		var created []time.Time
		fail := t0
		for round := range 4 {
			w.setReady(ctx, sick, corev1.ConditionFalse, fail)
			w.clk.SetTime(fail.Add(5 * time.Minute)) // the condition expires
			res := w.reconcile(ctx, check)
			if round > 0 {
				// Failed again a minute after it recovered: held back, the status says until when.
				Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty(), "round %d", round)
				e := entry(check, sick)
				Expect(e).NotTo(BeNil())
				Expect(e.SkipReason).To(Equal(SkipBackingOff))
				until := created[round-1].Add(10 * time.Minute << (round - 1))
				Expect(check.Status.RecentRemediations).To(HaveLen(1))
				Expect(check.Status.RecentRemediations[0].Name).To(Equal(sick.Name))
				Expect(check.Status.RecentRemediations[0].Starts).To(HaveLen(round))
				Expect(check.Status.RecentRemediations[0].BackoffUntil.Time).To(BeTemporally("==", until))
				Expect(res.RequeueAfter).To(Equal(until.Sub(w.clk.Now())), "the check looks again when the hold ends")
				Expect(testutil.ToFloat64(backoff.NHCMetrics.Held.WithLabelValues(check.Name))).To(Equal(1.0))

				// Reconciling again during the hold says nothing new.
				if round == 2 {
					w.restart() // the memory is the status
				}
				w.clk.SetTime(until.Add(-time.Second))
				w.reconcile(ctx, check)
				Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
				Expect(w.rec.With(EventRemediationBackingOff)).To(HaveLen(round), "one event per hold")
				w.clk.SetTime(until)
				w.reconcile(ctx, check)
			}
			emrs := w.remediations(ctx, pcRemediation, check)
			Expect(emrs).To(HaveLen(1), "round %d", round)
			Expect(entry(check, sick).Remediations).To(HaveLen(1))
			created = append(created, entry(check, sick).Remediations[0].Started.Time)
			Expect(created[round]).To(BeTemporally("==", w.clk.Now()))
			Expect(entry(check, sick).SkipReason).To(BeEmpty())
			Expect(testutil.ToFloat64(backoff.NHCMetrics.Held.WithLabelValues(check.Name))).To(Equal(0.0))

			// Power-cycled; Ready again a minute later: the request goes. It fails again a minute after.
			recovered := w.clk.Now().Add(time.Minute)
			w.setReady(ctx, sick, corev1.ConditionTrue, recovered)
			w.clk.SetTime(recovered)
			w.reconcile(ctx, check)
			Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
			w.reconcile(ctx, check) // the request is gone: the Node is forgotten
			Expect(entry(check, sick)).To(BeNil())
			Expect(check.Status.RecentRemediations).To(HaveLen(1), "remembered while the Node is healthy")
			fail = recovered.Add(time.Minute)
		}

		// The status's memory holds the four starts (the fake clock's times).
		starts := check.Status.RecentRemediations[0].Starts
		Expect(starts).To(HaveLen(4))
		var gaps []time.Duration
		for i := 1; i < len(starts); i++ {
			gaps = append(gaps, starts[i].Sub(starts[i-1].Time))
		}
		Expect(gaps).To(Equal([]time.Duration{10 * time.Minute, 20 * time.Minute, 40 * time.Minute}))
		for i := range starts {
			Expect(starts[i].Time).To(BeTemporally("==", created[i]))
		}
		Expect(w.rec.With(EventRemediationBackingOff)).To(HaveLen(3))
		for _, ev := range w.rec.With(EventRemediationBackingOff) {
			Expect(ev.Type).To(Equal(corev1.EventTypeNormal))
			Expect(ev.Related).To(Equal(sick.Name))
		}
		Expect(testutil.ToFloat64(backoff.NHCMetrics.Holds) - holdsBefore).To(Equal(3.0))
	})
})
