package backoff

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics are one checker's back-off series, named metalheal_<checker>_remediation_backoff_*.
type Metrics struct {
	// Holds counts holds begun: a target's next remediation put off (once per hold, not per reconcile).
	Holds prometheus.Counter
	// Held is the number of targets a health check holds back now, by health check.
	Held *prometheus.GaugeVec
}

func newMetrics(checker, targets string) Metrics {
	return Metrics{
		Holds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metalheal_" + checker + "_remediation_backoff_holds_total",
			Help: "Remediations of " + targets + " put off by remediationBackoff (once per hold).",
		}),
		Held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "metalheal_" + checker + "_remediation_backoff_held_targets",
			Help: "Unhealthy " + targets + " whose next remediation remediationBackoff holds back now.",
		}, []string{"healthcheck"}),
	}
}

// NHCMetrics and MHCMetrics are the NodeHealthCheck's and the MachineHealthCheck's series.
var (
	NHCMetrics = newMetrics("nhc", "Nodes")
	MHCMetrics = newMetrics("mhc", "Machines")
)

func init() {
	ctrlmetrics.Registry.MustRegister(NHCMetrics.Holds, NHCMetrics.Held, MHCMetrics.Holds, MHCMetrics.Held)
}
