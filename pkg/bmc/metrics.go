package bmc

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// Operation names, as they appear in errors and in the operation metric label.
const (
	OperationPowerState = "PowerState"
	OperationPowerOn    = "PowerOn"
	OperationPowerOff   = "PowerOff"
	OperationDiagnose   = "Diagnose"
	OperationWatchPower = "WatchPower"
	OperationClose      = "Close"
)

// Metrics counts and times BMC requests. Labels are low-cardinality: the driver, the operation and the
// result, never the host.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	clock    clock.PassiveClock
}

// MetricsOption configures Metrics.
type MetricsOption func(*Metrics)

// WithMetricsClock sets the clock request durations are measured with (tests pass a fake one).
func WithMetricsClock(c clock.PassiveClock) MetricsOption {
	return func(m *Metrics) { m.clock = c }
}

// NewMetrics creates the BMC metrics and registers them with reg (when reg is not nil). It panics if
// they are already registered there, as prometheus.MustRegister does: that is a wiring bug in main.
func NewMetrics(reg prometheus.Registerer, opts ...MetricsOption) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metalheal_bmc_requests_total",
			Help: "BMC requests by driver, operation and result (success, or the error kind: unreachable, authentication, timeout, unsupported, error).",
		}, []string{"driver", "operation", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "metalheal_bmc_request_duration_seconds",
			Help:    "Duration of BMC requests by driver and operation, failures included.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12), // 50ms .. ~100s
		}, []string{"driver", "operation"}),
		clock: clock.RealClock{},
	}
	for _, o := range opts {
		o(m)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration)
	}
	return m
}

// Result is the result label for err: "success", or the lowercase error kind.
func Result(err error) string {
	switch {
	case err == nil:
		return "success"
	case errors.Is(err, ErrAuthentication):
		return "authentication"
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrUnsupported):
		return "unsupported"
	case errors.Is(err, ErrUnreachable):
		return "unreachable"
	default:
		return "error"
	}
}

// Instrument wraps d so that every call is counted and timed in m under driverName. With a nil m it
// returns d unchanged.
func Instrument(d Driver, driverName string, m *Metrics) Driver {
	if m == nil {
		return d
	}
	return &instrumented{next: d, name: driverName, m: m}
}

type instrumented struct {
	next Driver
	name string
	m    *Metrics
}

func (i *instrumented) observe(operation string, call func() error) error {
	start := i.m.clock.Now()
	err := call()
	i.m.duration.WithLabelValues(i.name, operation).Observe(i.m.clock.Since(start).Seconds())
	i.m.requests.WithLabelValues(i.name, operation, Result(err)).Inc()
	return err
}

func (i *instrumented) PowerState(ctx context.Context) (PowerState, error) {
	var state PowerState
	err := i.observe(OperationPowerState, func() (err error) {
		state, err = i.next.PowerState(ctx)
		return err
	})
	return state, err
}

func (i *instrumented) PowerOn(ctx context.Context) error {
	return i.observe(OperationPowerOn, func() error { return i.next.PowerOn(ctx) })
}

func (i *instrumented) PowerOff(ctx context.Context, force bool) error {
	return i.observe(OperationPowerOff, func() error { return i.next.PowerOff(ctx, force) })
}

// Diagnose passes the diagnostic interrupt on (see Diagnose): a driver that cannot send one is counted
// as unsupported, as a BMC that refuses it is.
func (i *instrumented) Diagnose(ctx context.Context) error {
	return i.observe(OperationDiagnose, func() error { return Diagnose(ctx, i.next) })
}

// WatchPower passes the event stream on (see WatchPower) untimed: a stream lasts as long as it stays open,
// which says nothing of the BMC's answers; the PowerState reads it prompts are counted as any other.
func (i *instrumented) WatchPower(ctx context.Context, changed func()) error {
	return WatchPower(ctx, i.next, changed)
}

func (i *instrumented) Close(ctx context.Context) error {
	return i.observe(OperationClose, func() error { return i.next.Close(ctx) })
}
