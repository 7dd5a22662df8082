package bmc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/fake"
)

// slowDriver takes `took` of the fake clock's time for every call.
type slowDriver struct {
	bmc.Driver
	clock *clocktesting.FakePassiveClock
	took  time.Duration
}

func (s *slowDriver) PowerOn(ctx context.Context) error {
	s.clock.SetTime(s.clock.Now().Add(s.took))
	return s.Driver.PowerOn(ctx)
}

func TestInstrumentCountsRequestsByResult(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	m := bmc.NewMetrics(reg)
	host := fake.New(bmc.PowerStateOn)
	d := bmc.Instrument(host, "redfish", m)

	host.FailNext(bmc.OperationPowerState,
		&bmc.Error{Driver: "redfish", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable},
		&bmc.Error{Driver: "redfish", Operation: bmc.OperationPowerState, Kind: bmc.ErrAuthentication},
		bmc.ErrTimeout, context.DeadlineExceeded, bmc.ErrUnsupported, errCustom)
	for range 7 {
		_, _ = d.PowerState(ctx)
	}
	g.Expect(d.PowerOff(ctx, true)).To(Succeed())
	g.Expect(d.Close(ctx)).To(Succeed())
	g.Expect(host.PowerState(ctx)).To(Equal(bmc.PowerStateOff), "the wrapper must call through")

	want := `
# HELP metalheal_bmc_requests_total BMC requests by driver, operation and result (success, or the error kind: unreachable, authentication, timeout, unsupported, error).
# TYPE metalheal_bmc_requests_total counter
metalheal_bmc_requests_total{driver="redfish",operation="Close",result="success"} 1
metalheal_bmc_requests_total{driver="redfish",operation="PowerOff",result="success"} 1
metalheal_bmc_requests_total{driver="redfish",operation="PowerState",result="authentication"} 1
metalheal_bmc_requests_total{driver="redfish",operation="PowerState",result="error"} 1
metalheal_bmc_requests_total{driver="redfish",operation="PowerState",result="success"} 1
metalheal_bmc_requests_total{driver="redfish",operation="PowerState",result="timeout"} 2
metalheal_bmc_requests_total{driver="redfish",operation="PowerState",result="unreachable"} 1
metalheal_bmc_requests_total{driver="redfish",operation="PowerState",result="unsupported"} 1
`
	g.Expect(testutil.GatherAndCompare(reg, strings.NewReader(want), "metalheal_bmc_requests_total")).To(Succeed())
	g.Expect(testutil.CollectAndCount(reg, "metalheal_bmc_request_duration_seconds")).To(Equal(3))
	problems, err := testutil.GatherAndLint(reg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(problems).To(BeEmpty())
}

var errCustom = customError{}

type customError struct{}

func (customError) Error() string { return "something else" }

// A diagnostic interrupt is counted as Diagnose: sent, refused by the BMC, or impossible for a driver
// that cannot send one, which is unsupported as a BMC's refusal is.
func TestInstrumentCountsDiagnosticInterrupts(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	m := bmc.NewMetrics(reg)
	host := fake.New(bmc.PowerStateOn)
	host.FailNext(bmc.OperationDiagnose, &bmc.Error{Driver: "ipmi", Operation: bmc.OperationDiagnose, Kind: bmc.ErrUnsupported})
	d := bmc.Instrument(host, "ipmi", m)
	g.Expect(bmc.Diagnose(ctx, d)).To(MatchError(bmc.ErrUnsupported))
	g.Expect(bmc.Diagnose(ctx, d)).To(Succeed())
	g.Expect(host.CallCount(bmc.OperationDiagnose)).To(Equal(2), "the wrapper must call through")

	noNMI := bmc.Instrument(powerOnly{host}, "ipmi", m)
	err := bmc.Diagnose(ctx, noNMI)
	g.Expect(err).To(MatchError(bmc.ErrUnsupported))
	g.Expect(err).To(MatchError(ContainSubstring("cannot send a diagnostic interrupt")))
	g.Expect(host.CallCount(bmc.OperationDiagnose)).To(Equal(2))

	want := `
# HELP metalheal_bmc_requests_total BMC requests by driver, operation and result (success, or the error kind: unreachable, authentication, timeout, unsupported, error).
# TYPE metalheal_bmc_requests_total counter
metalheal_bmc_requests_total{driver="ipmi",operation="Diagnose",result="success"} 1
metalheal_bmc_requests_total{driver="ipmi",operation="Diagnose",result="unsupported"} 2
`
	g.Expect(testutil.GatherAndCompare(reg, strings.NewReader(want), "metalheal_bmc_requests_total")).To(Succeed())
}

// powerOnly hides every method of a driver but bmc.Driver's.
type powerOnly struct{ bmc.Driver }

func TestInstrumentTimesRequests(t *testing.T) {
	g := NewWithT(t)
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reg := prometheus.NewPedanticRegistry()
	m := bmc.NewMetrics(reg, bmc.WithMetricsClock(clock))
	d := bmc.Instrument(&slowDriver{Driver: fake.New(bmc.PowerStateOff), clock: clock, took: 3 * time.Second}, "ipmi", m)

	g.Expect(d.PowerOn(context.Background())).To(Succeed())
	g.Expect(d.PowerOn(context.Background())).To(Succeed())

	// Two observations of exactly 3s each: in the 3.2s bucket and above, not in the 1.6s one.
	want := `
# HELP metalheal_bmc_request_duration_seconds Duration of BMC requests by driver and operation, failures included.
# TYPE metalheal_bmc_request_duration_seconds histogram
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="0.05"} 0
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="0.1"} 0
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="0.2"} 0
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="0.4"} 0
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="0.8"} 0
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="1.6"} 0
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="3.2"} 2
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="6.4"} 2
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="12.8"} 2
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="25.6"} 2
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="51.2"} 2
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="102.4"} 2
metalheal_bmc_request_duration_seconds_bucket{driver="ipmi",operation="PowerOn",le="+Inf"} 2
metalheal_bmc_request_duration_seconds_sum{driver="ipmi",operation="PowerOn"} 6
metalheal_bmc_request_duration_seconds_count{driver="ipmi",operation="PowerOn"} 2
`
	g.Expect(testutil.GatherAndCompare(reg, strings.NewReader(want), "metalheal_bmc_request_duration_seconds")).To(Succeed())
}

func TestRegistryInstrumentsWhenGivenMetrics(t *testing.T) {
	for _, tc := range []struct {
		name        string
		withMetrics bool
		want        int
	}{
		{name: "with metrics", withMetrics: true, want: 1},
		{name: "without metrics", withMetrics: false, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			reg := prometheus.NewPedanticRegistry()
			m := bmc.NewMetrics(reg)
			var opts []bmc.RegistryOption
			if tc.withMetrics {
				opts = append(opts, bmc.WithMetrics(m))
			}
			r := bmc.NewRegistry(opts...)
			g.Expect(r.Register(bmc.DriverIPMI, fake.NewFactory(bmc.PowerStateOn).New)).To(Succeed())
			d, err := r.New("ipmi://10.0.0.1", bmc.Credentials{}, bmc.Options{})
			g.Expect(err).NotTo(HaveOccurred())
			_, err = d.PowerState(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(testutil.CollectAndCount(reg, "metalheal_bmc_requests_total")).To(Equal(tc.want))
		})
	}
}
