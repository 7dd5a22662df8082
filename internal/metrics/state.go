package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// The state gauges say what is true now (a storm holds remediation back, a check is disabled), so an alert
// can fire on it. They are not kept up to date on every transition: a collector lists the checks from the
// manager's cache at scrape time, so the numbers are right after a restart, a lost leadership or a deleted
// check without any bookkeeping of our own. Only the elected manager reports them (a standby's cache does
// not watch the checks, and two replicas reporting would double the sums).

// Collectors list with client.UnsafeDisableDeepCopy: they only read, and a scrape should not copy every
// BMC or request in a 5,000-node cluster every 30 seconds.

// ListTimeout bounds a scrape's read of the cache; a cache that is not synced by then reports nothing
// rather than stall the scrape.
const ListTimeout = 5 * time.Second

// CheckState is what a health check's status says now, as the state gauges report it.
type CheckState struct {
	// Name is the check's namespace/name (its name alone for the cluster-scoped NodeHealthCheck).
	Name string
	// Targets and Healthy are the Nodes (Machines) the check selects and those of them healthy; nil when
	// the check has not reported them yet.
	Targets, Healthy *int32
	// RemediationAllowed is false while the unhealthy budget short-circuits remediation.
	RemediationAllowed bool
	// Disabled is true while the check cannot work (its template or kinds are missing).
	Disabled bool
	// InFlight is the number of remediation requests the check has open (not timed out).
	InFlight int
	// WouldRemediate is the number of targets a check in dry run would remediate now (skipReason DryRun).
	WouldRemediate int
	// Storm is the check's storm state (see StormOf).
	Storm *StormState
}

// StormState is a check's storm: Active while it holds remediation back (its cooldown included), ActiveFor
// since when, and the check's configured Cooldown.
type StormState struct {
	Active    bool
	ActiveFor time.Duration
	Cooldown  time.Duration
}

// FromConditions is the part of a check's state its conditions and stormCooldownDuration say at now:
// whether remediation is allowed (RemediationAllowed not False), whether it is disabled, and its storm
// (StormActive True since its last transition). The checker fills in the name and the counts.
func FromConditions(conds []metav1.Condition, cooldown *metav1.Duration, now time.Time) CheckState {
	storm := &StormState{}
	if cooldown != nil {
		storm.Cooldown = cooldown.Duration
	}
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionStormActive); c != nil && c.Status == metav1.ConditionTrue {
		storm.Active = true
		storm.ActiveFor = max(now.Sub(c.LastTransitionTime.Time), 0)
	}
	return CheckState{
		// A storm's cooldown holds remediation back after the budget is met again: allowed is 0 then too.
		RemediationAllowed: !meta.IsStatusConditionFalse(conds, v1alpha1.ConditionRemediationAllowed) && !storm.Active,
		Disabled:           meta.IsStatusConditionTrue(conds, v1alpha1.ConditionDisabled),
		Storm:              storm,
	}
}

// Count adds what one target's status entry says, the same for both kinds: its requests open (not timed
// out), and whether a dry run would remediate it (skipReason DryRun).
func (s *CheckState) Count(p v1alpha1.RemediationProgress) {
	for _, r := range p.Remediations {
		if r.TimedOut == nil {
			s.InFlight++
		}
	}
	if p.SkipReason == v1alpha1.SkipDryRun {
		s.WouldRemediate++
	}
}

// skipDryRun is the skip reason of a target a check in dry run would remediate (engine.SkipDryRun).
const skipDryRun = "DryRun"

// CheckLister lists the checks of one checker from the cache.
type CheckLister func(ctx context.Context) ([]CheckState, error)

var (
	checkLabels       = []string{"checker", "healthcheck"}
	descCheckTargets  = prometheus.NewDesc("metalheal_healthcheck_targets", "Targets (Nodes, or Machines for the machinehealthcheck checker) a health check selects.", checkLabels, nil)
	descCheckHealthy  = prometheus.NewDesc("metalheal_healthcheck_healthy_targets", "Targets a health check sees healthy.", checkLabels, nil)
	descCheckAllowed  = prometheus.NewDesc("metalheal_healthcheck_remediation_allowed", "1 while a health check may start remediations, 0 while its unhealthy budget (maxUnhealthy/minHealthy) or a storm holds them back.", checkLabels, nil)
	descCheckDisabled = prometheus.NewDesc("metalheal_healthcheck_disabled", "1 while a health check cannot work (missing template, a kind it cannot watch).", checkLabels, nil)
	descCheckInFlight = prometheus.NewDesc("metalheal_healthcheck_remediations_in_flight", "Remediation requests a health check has open.", checkLabels, nil)
	descCheckWould    = prometheus.NewDesc("metalheal_healthcheck_would_remediate", "Targets a health check in dry run (spec.dryRun) would remediate now: it starts nothing.", checkLabels, nil)
	descStormActive   = prometheus.NewDesc("metalheal_healthcheck_storm_active", "1 while a remediation storm holds a health check's remediations back, its cooldown included.", checkLabels, nil)
	descStormFor      = prometheus.NewDesc("metalheal_healthcheck_storm_active_seconds", "How long the current storm of a health check has been active (0 without a storm).", checkLabels, nil)
	descStormCooldown = prometheus.NewDesc("metalheal_healthcheck_storm_cooldown_seconds", "A health check's stormCooldownDuration.", checkLabels, nil)
	descCollectErrors = prometheus.NewDesc("metalheal_state_collect_errors", "1 when a state collector could not read the cache at this scrape (its gauges are missing from it).", []string{"collector"}, nil)
)

// healthChecks is the collector of every checker's state gauges. One collector for all checkers, because
// the gauges share names (a checker label tells them apart) and a registry refuses two collectors
// describing the same metric.
type healthChecks struct {
	mu      sync.Mutex
	sources map[string]source // by checker
}

type source struct {
	list    CheckLister
	elected <-chan struct{}
}

var checks = &healthChecks{sources: map[string]source{}}

func init() {
	ctrlmetrics.Registry.MustRegister(checks)
}

// AddCheckKind reports every check of one kind under checker, once elected is closed: at scrape time its
// list L is read from reader (the manager's cache), and each of its items (items) becomes its state at the
// clock's now (state). Both health checks register this way; only their status shapes differ.
func AddCheckKind[L any, P interface {
	*L
	client.ObjectList
}, T any](checker string, reader client.Reader, clk clock.PassiveClock, elected <-chan struct{},
	items func(*L) []T, state func(*T, time.Time) CheckState) {
	AddHealthChecks(checker, elected, func(ctx context.Context) ([]CheckState, error) {
		list := P(new(L))
		if err := reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		now := clk.Now()
		all := items(list)
		out := make([]CheckState, 0, len(all))
		for i := range all {
			out = append(out, state(&all[i], now))
		}
		return out, nil
	})
}

// AddHealthChecks reports the checks list returns under checker, once elected is closed (the manager's
// Elected channel).
func AddHealthChecks(checker string, elected <-chan struct{}, list CheckLister) {
	checks.mu.Lock()
	defer checks.mu.Unlock()
	checks.sources[checker] = source{list: list, elected: elected}
}

func (c *healthChecks) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCheckTargets, descCheckHealthy, descCheckAllowed, descCheckDisabled,
		descCheckInFlight, descCheckWould, descStormActive, descStormFor, descStormCooldown, descCollectErrors} {
		ch <- d
	}
}

func (c *healthChecks) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := make(map[string]source, len(c.sources))
	for k, v := range c.sources {
		sources[k] = v
	}
	c.mu.Unlock()
	for checker, s := range sources {
		if !Elected(s.elected) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), ListTimeout)
		states, err := s.list(ctx)
		cancel()
		ch <- prometheus.MustNewConstMetric(descCollectErrors, prometheus.GaugeValue, boolValue(err != nil), checker)
		if err != nil {
			ctrl.Log.WithName("metrics").Error(err, "Listing health checks for their state gauges", "checker", checker)
			continue
		}
		for _, st := range states {
			gauge := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, checker, st.Name)
			}
			if st.Targets != nil {
				gauge(descCheckTargets, float64(*st.Targets))
			}
			if st.Healthy != nil {
				gauge(descCheckHealthy, float64(*st.Healthy))
			}
			gauge(descCheckAllowed, boolValue(st.RemediationAllowed))
			gauge(descCheckDisabled, boolValue(st.Disabled))
			gauge(descCheckInFlight, float64(st.InFlight))
			gauge(descCheckWould, float64(st.WouldRemediate))
			if st.Storm != nil {
				gauge(descStormActive, boolValue(st.Storm.Active))
				gauge(descStormFor, st.Storm.ActiveFor.Seconds())
				gauge(descStormCooldown, st.Storm.Cooldown.Seconds())
			}
		}
	}
}

// Elected says whether elected (a manager's Elected channel) is closed. A nil channel counts as elected.
func Elected(elected <-chan struct{}) bool {
	if elected == nil {
		return true
	}
	select {
	case <-elected:
		return true
	default:
		return false
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// BoolValue is 1 for true, 0 for false: how the state gauges say yes and no.
func BoolValue(b bool) float64 { return boolValue(b) }
