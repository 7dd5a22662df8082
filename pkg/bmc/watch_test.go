package bmc_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/fake"
)

// watcher is a driver with an event stream that tells of one change, then drops.
type watcher struct {
	bmc.Driver
}

// plain is a driver without an event stream: only the Driver methods of the one it wraps (the fake has a
// stream of its own).
type plain struct {
	bmc.Driver
}

var errDropped = errors.New("stream dropped")

func (w watcher) WatchPower(_ context.Context, changed func()) error {
	changed()
	return errDropped
}

// WatchPower reaches a driver's stream through the metrics wrapper, and a driver without one is
// unsupported, wrapped or not; the stream is not counted as a request.
func TestWatchPower(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := bmc.NewMetrics(reg)
	tests := map[string]struct {
		driver      bmc.Driver
		wantChanges int
		want        error
	}{
		"a watcher":                {driver: watcher{fake.New(bmc.PowerStateOn)}, wantChanges: 1, want: errDropped},
		"a watcher, instrumented":  {driver: bmc.Instrument(watcher{fake.New(bmc.PowerStateOn)}, "redfish", m), wantChanges: 1, want: errDropped},
		"no watcher":               {driver: plain{fake.New(bmc.PowerStateOn)}, want: bmc.ErrUnsupported},
		"no watcher, instrumented": {driver: bmc.Instrument(plain{fake.New(bmc.PowerStateOn)}, "ipmi", m), want: bmc.ErrUnsupported},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			changes := 0
			err := bmc.WatchPower(context.Background(), tc.driver, func() { changes++ })
			g.Expect(err).To(MatchError(tc.want))
			g.Expect(changes).To(Equal(tc.wantChanges))
			if errors.Is(err, bmc.ErrUnsupported) {
				var e *bmc.Error
				g.Expect(errors.As(err, &e)).To(BeTrue())
				g.Expect(e.Operation).To(Equal(bmc.OperationWatchPower))
			}
		})
	}
	n, err := testutil.GatherAndCount(reg)
	NewWithT(t).Expect(n, err).To(BeZero(), "no request counted")
}
