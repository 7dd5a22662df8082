package powercycle

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// PhaseTransitions counts the phase transitions of PowerCycleRemediations, by the phase left ("None"
	// for a new request) and the phase entered.
	PhaseTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalheal_powercycle_phase_transitions_total",
		Help: "Phase transitions of PowerCycleRemediations, by phase left (None for a new request) and phase entered.",
	}, []string{"from", "to"})

	// RemediationDuration is the time from a remediation's acceptance to its end (Succeeded or Failed), by
	// strategy and by the reason it ended with (NodeReady, Fenced, MachineDeleted, RetriesExhausted,
	// TimedOut, NodeExcluded).
	RemediationDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "metalheal_remediation_duration_seconds",
		Help:    "Time from a PowerCycleRemediation's acceptance to its end, by strategy and the reason it ended with.",
		Buckets: []float64{5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200},
	}, []string{"strategy", "result"})

	// HostRequests counts the requests answered by the host itself sent before its forced power-off (a
	// diagnostic interrupt, a graceful shutdown), by request and by how the wait after it ended.
	HostRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalheal_powercycle_host_requests_total",
		Help: "Requests answered by the host itself before its forced power-off (DiagnosticInterrupt, GracefulShutdown), by how the wait after them ended (PoweredOff, Rebooted, TimedOut, NotSupported).",
	}, []string{"request", "result"})

	// CacheWaits counts the reconciles that found the cached PowerCycleRemediation older than the latest
	// write the remediator knows of (someone else's, after a conflict), and so waited for the cache rather
	// than act on a stale copy.
	CacheWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "metalheal_powercycle_cache_waits_total",
		Help: "Reconciles of a PowerCycleRemediation that found the cache older than the latest write the remediator knows of, and waited for it.",
	})

	// CacheSkips counts the reconciles that found the cached PowerCycleRemediation older than the
	// remediator's own last write of it, and went on from the object that write left. Steadily rising,
	// with CacheWaits, it says the manager's watch of the API server falls behind.
	CacheSkips = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "metalheal_powercycle_cache_skips_total",
		Help: "Reconciles of a PowerCycleRemediation that found the cache older than the remediator's own last write, and went on from the object that write left.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(PhaseTransitions, RemediationDuration, HostRequests, CacheWaits, CacheSkips)
}
