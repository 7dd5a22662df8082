package powerwatch

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the power watch: low-cardinality, no BMC or node names.
var (
	// Readings counts the power readings of watched hosts, by what prompted them (stream: an event of
	// the BMC's stream; poll: the poll while no stream is open) and result (On, Off, Unknown, error).
	Readings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalheal_power_watch_readings_total",
		Help: "Power readings of watched hosts, by trigger (stream, poll) and result (On, Off, Unknown, error).",
	}, []string{"trigger", "result"})
	// Decisions counts what Off and On readings led to: PoweredOff (the condition set True), PoweredOn
	// (set False), Contradicted (the kubelet answered), Unverifiable (no kubelet endpoint), Remediating
	// (a remediation at work on the host).
	Decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalheal_power_watch_decisions_total",
		Help: "What power readings led to: PoweredOff, PoweredOn, Contradicted, Unverifiable, Remediating.",
	}, []string{"decision"})
	// Streams is the number of BMC event streams open now.
	Streams = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "metalheal_power_watch_streams",
		Help: "BMC event streams the power watch holds open.",
	})
	// Watches is the number of hosts whose power is watched now.
	Watches = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "metalheal_power_watch_hosts",
		Help: "Hosts whose power the power watch follows (BMCs with spec.powerWatch).",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Readings, Decisions, Streams, Watches)
}
