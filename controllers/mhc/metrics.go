package mhc

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/internal/metrics"
)

// The checker metrics are shared with the NodeHealthCheck controller (internal/metrics), labelled
// checker="machinehealthcheck".

// recordCheckMetrics sets the number of unhealthy Machines the check sees.
func recordCheckMetrics(check types.NamespacedName, p plan) {
	metrics.UnhealthyTargets.WithLabelValues(metrics.CheckerMHC, check.String()).Set(float64(p.Unhealthy))
	recordBackoffMetrics(check.String(), p)
}

// forgetCheckMetrics deletes a deleted check's series.
func forgetCheckMetrics(check types.NamespacedName) {
	metrics.UnhealthyTargets.DeleteLabelValues(metrics.CheckerMHC, check.String())
	forgetBackoffMetrics(check.String())
}

// countCreated counts a remediation request created, by kind.
func countCreated(kind string) {
	metrics.RemediationsCreated.WithLabelValues(metrics.CheckerMHC, kind).Inc()
}

// countSkipped counts an unhealthy Machine that is not remediated, by why.
func countSkipped(b blocker) {
	metrics.RemediationsSkipped.WithLabelValues(metrics.CheckerMHC, string(b)).Inc()
}

// observeDetection records the time from a criterion's expiry to the remediation being asked for.
// Criteria without an expiry instant (an annotation, a terminal failure, a deleted Node) are not
// recorded.
func observeDetection(expiredAt, now time.Time) {
	if expiredAt.IsZero() {
		return
	}
	metrics.DetectionDelay.WithLabelValues(metrics.CheckerMHC).Observe(max(now.Sub(expiredAt), 0).Seconds())
}
