package mhc

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/engine"
)

// The MachineHealthCheck's metrics carry names of their own (metalheal_mhc_*), so that a dashboard or an
// alert on Machines never mixes with the NodeHealthCheck's Nodes. docs/operations.md lists them all.
var (
	// unhealthyMachines is the number of unhealthy Machines a check currently sees.
	unhealthyMachines = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "metalheal_mhc_unhealthy_machines",
		Help: "Unhealthy Machines a MachineHealthCheck currently sees.",
	}, []string{"healthcheck"})

	// remediationsCreated counts remediation requests created, by kind.
	remediationsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalheal_mhc_remediations_created_total",
		Help: "Remediation requests created by MachineHealthChecks, by remediation kind.",
	}, []string{"kind"})

	// remediationsSkipped counts decisions not to remediate an unhealthy Machine, by reason.
	remediationsSkipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalheal_mhc_remediations_skipped_total",
		Help: "Decisions of MachineHealthChecks not to remediate an unhealthy Machine, by reason.",
	}, []string{"reason"})

	// detectionDelay is the time from a criterion's expiry to the remediation being asked for (a request
	// created, or OwnerRemediated set False): what the controller adds to the configured timeout.
	detectionDelay = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "metalheal_mhc_detection_delay_seconds",
		Help:    "Delay from a Machine's unhealthy-condition expiry to its remediation being asked for.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	}, nil)

	// clusterAPIVersion is 1 for the Cluster API version the controller reads Machines in, 0 for the
	// others; all 0 while Cluster API is not installed.
	clusterAPIVersion = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "metalheal_mhc_cluster_api_served",
		Help: "1 for the Cluster API version (v1beta2, v1beta1) MachineHealthChecks read Machines in; all 0 while Cluster API is not installed.",
	}, []string{"version"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(unhealthyMachines, remediationsCreated, remediationsSkipped, detectionDelay, clusterAPIVersion)
	// At zero from the start, so that dashboards find them before the first request.
	remediationsCreated.WithLabelValues("PowerCycleRemediation")
	detectionDelay.WithLabelValues()
}

// recordCheckMetrics sets the number of unhealthy Machines the check sees.
func recordCheckMetrics(check types.NamespacedName, p plan) {
	unhealthyMachines.WithLabelValues(check.String()).Set(float64(p.Unhealthy))
	engine.RecordBackoff(backoff.MHCMetrics, check.String(), p.Backoff, p.Holds)
}

// forgetCheckMetrics deletes a deleted check's series.
func forgetCheckMetrics(check types.NamespacedName) {
	unhealthyMachines.DeleteLabelValues(check.String())
	backoff.MHCMetrics.Held.DeleteLabelValues(check.String())
}

// countCreated counts a remediation request created, by kind.
func countCreated(kind string) {
	remediationsCreated.WithLabelValues(kind).Inc()
}

// countSkipped counts an unhealthy Machine that is not remediated, by why.
func countSkipped(b blocker) {
	remediationsSkipped.WithLabelValues(string(b)).Inc()
}

// observeDetection records the time from a criterion's expiry to the remediation being asked for.
// Criteria without an expiry instant (an annotation, a terminal failure, a deleted Node) are not
// recorded.
func observeDetection(expiredAt, now time.Time) {
	if expiredAt.IsZero() {
		return
	}
	detectionDelay.WithLabelValues().Observe(max(now.Sub(expiredAt), 0).Seconds())
}

// recordServedVersion sets metalheal_mhc_cluster_api_served.
func recordServedVersion(version string) {
	for _, v := range clusterAPIVersions {
		value := 0.0
		if v == version {
			value = 1
		}
		clusterAPIVersion.WithLabelValues(v).Set(value)
	}
}
