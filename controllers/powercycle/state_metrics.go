package powercycle

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/metrics"
)

// The state gauges of the remediator say what is true now (remediations by phase, the oldest one's age,
// those overdue), so an alert can fire on it. The collector lists the requests from the manager's cache at
// scrape time rather than keep gauges up to date on every transition: the numbers are right after a
// restart or a lost leadership without bookkeeping of our own. Only the elected manager reports them (a
// standby's cache does not watch these kinds; two replicas would double sums). The BMC inventory's are in
// bmcinventory.

// overdueGrace is how far past its own timeout a remediation step may run before it counts as overdue:
// a requeue and one bounded BMC call, with room to spare.
const overdueGrace = 2 * time.Minute

// remediationPhases are the phase label's values: every phase, and None for a request not yet accepted.
var remediationPhases = []v1alpha1.PowerCyclePhase{"", v1alpha1.PhasePending, v1alpha1.PhaseDiagnosing,
	v1alpha1.PhaseShuttingDown, v1alpha1.PhasePoweringOff,
	v1alpha1.PhasePoweredOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseRetrying,
	v1alpha1.PhaseEscalating, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed}

var (
	descRemediations = prometheus.NewDesc("metalheal_powercycle_remediations",
		"PowerCycleRemediations by phase (None: not yet accepted). Every phase is reported, 0 when empty.", []string{"phase"}, nil)
	descOldest = prometheus.NewDesc("metalheal_powercycle_oldest_remediation_age_seconds",
		"Age of the oldest PowerCycleRemediation still in flight (neither Succeeded nor Failed); 0 when none is.", nil, nil)
	descOverdue = prometheus.NewDesc("metalheal_powercycle_remediations_overdue",
		"PowerCycleRemediations whose current step has run more than 2 minutes past its own timeout (powerOffTimeoutSeconds, powerOnTimeoutSeconds, the diagnostic and graceful-shutdown waits, the retry time): the remediator is not enforcing its bounds.", nil, nil)
)

// Label combinations registered at start, so that dashboards and alerts find the histograms before the
// first remediation ends: each strategy with the result it ends with when it works.
func init() {
	RemediationDuration.WithLabelValues(string(v1alpha1.StrategyReboot), v1alpha1.ReasonNodeReady)
	RemediationDuration.WithLabelValues(string(v1alpha1.StrategyEscalate), v1alpha1.ReasonNodeReady)
	RemediationDuration.WithLabelValues(string(v1alpha1.StrategyPowerOff), v1alpha1.ReasonFenced)
}

// RemediationStateCollector reports the remediator's state gauges.
type RemediationStateCollector struct {
	reader  client.Reader
	clock   clock.PassiveClock
	elected <-chan struct{}
}

// NewRemediationStateCollector reads PowerCycleRemediations from reader (the manager's cache) at scrape
// time once elected (the manager's Elected channel) is closed. Register it with the metrics registry.
func NewRemediationStateCollector(reader client.Reader, clk clock.PassiveClock, elected <-chan struct{}) *RemediationStateCollector {
	return &RemediationStateCollector{reader: reader, clock: clk, elected: elected}
}

func (c *RemediationStateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRemediations
	ch <- descOldest
	ch <- descOverdue
}

func (c *RemediationStateCollector) Collect(ch chan<- prometheus.Metric) {
	if !metrics.Elected(c.elected) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), metrics.ListTimeout)
	defer cancel()
	var list v1alpha1.PowerCycleRemediationList
	if err := c.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.Log.WithName("metrics").Error(err, "Listing PowerCycleRemediations for their state gauges")
		return
	}
	st := remediationState(list.Items, c.clock.Now())
	for _, p := range remediationPhases {
		ch <- prometheus.MustNewConstMetric(descRemediations, prometheus.GaugeValue, float64(st.byPhase[p]), phaseLabel(p))
	}
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, st.oldest.Seconds())
	ch <- prometheus.MustNewConstMetric(descOverdue, prometheus.GaugeValue, float64(st.overdue))
}

// remediationsState is what the remediations' status says now.
type remediationsState struct {
	byPhase map[v1alpha1.PowerCyclePhase]int
	oldest  time.Duration
	overdue int
}

func remediationState(items []v1alpha1.PowerCycleRemediation, now time.Time) remediationsState {
	st := remediationsState{byPhase: map[v1alpha1.PowerCyclePhase]int{}}
	for i := range items {
		pcr := &items[i]
		st.byPhase[pcr.Status.Phase]++
		if terminal(pcr.Status.Phase) {
			continue
		}
		st.oldest = max(st.oldest, now.Sub(pcr.CreationTimestamp.Time))
		if deadline, ok := stepDeadline(pcr); ok && now.After(deadline.Add(overdueGrace)) {
			st.overdue++
		}
	}
	return st
}

// stepDeadline is when the remediation's current step should have ended by its own timeouts; false for a
// step without one (Pending waits for a lease holder or a hand-over, Escalating for a Machine's owner).
func stepDeadline(pcr *v1alpha1.PowerCycleRemediation) (time.Time, bool) {
	status := pcr.Status
	if status.LastTransitionTime == nil {
		return time.Time{}, false
	}
	spec := specOf(pcr)
	phaseStart := status.LastTransitionTime.Time
	switch status.Phase {
	case v1alpha1.PhaseDiagnosing:
		return phaseStart.Add(spec.diagnosticTimeout), true
	case v1alpha1.PhaseShuttingDown:
		return phaseStart.Add(spec.gracefulTimeout), true
	case v1alpha1.PhasePoweringOff:
		return phaseStart.Add(spec.powerOffTimeout), true
	case v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode:
		start := phaseStart
		if n := len(status.Attempts); n > 0 && status.Attempts[n-1].PowerOnRequested != nil {
			start = status.Attempts[n-1].PowerOnRequested.Time
		}
		return start.Add(spec.powerOnTimeout), true
	case v1alpha1.PhaseRetrying:
		if status.NextRetryTime != nil {
			return status.NextRetryTime.Time, true
		}
	}
	return time.Time{}, false
}
