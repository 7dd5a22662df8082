package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Checker label values.
const (
	CheckerNHC = "nodehealthcheck"
	CheckerMHC = "machinehealthcheck"
)

var (
	// UnhealthyTargets is the number of unhealthy targets a health check currently sees.
	UnhealthyTargets = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "metalheal_nhc_unhealthy_nodes",
		Help: "Unhealthy Nodes a NodeHealthCheck currently sees.",
	}, []string{"checker", "healthcheck"})

	// RemediationsCreated counts remediation requests created.
	RemediationsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalheal_remediations_created_total",
		Help: "Remediation requests created by the health checks, by remediation kind.",
	}, []string{"checker", "kind"})

	// DetectionDelay is the time from the instant a target's unhealthy condition expired to the creation
	// of its remediation request: what the controller adds to the configured timeout.
	DetectionDelay = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "metalheal_detection_delay_seconds",
		Help:    "Delay from a target's unhealthy-condition expiry to its remediation request's creation.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"checker"})

	// RemediationsSkipped counts decisions not to remediate an unhealthy target, by reason
	// (ShortCircuit, Paused, Excluded, LeaseHeld, ControlPlaneBusy, OwnedByOtherCheck, ...).
	RemediationsSkipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalheal_remediations_skipped_total",
		Help: "Decisions not to remediate an unhealthy target, by reason.",
	}, []string{"checker", "reason"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(UnhealthyTargets, RemediationsCreated, DetectionDelay, RemediationsSkipped)
}
