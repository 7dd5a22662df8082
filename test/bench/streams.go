package main

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
)

// powerWatchPatch turns the power watch on for a BMC: its event stream followed (the mock offers one), the
// poll at its slowest, so that what is measured is the streams. A merge patch: the bench reads nothing
// else of the BMC.
const powerWatchPatch = `{"spec":{"powerWatch":{"eventStream":"Auto","pollIntervalSeconds":3600}}}`

// streamsOpenTimeout bounds the wait for the manager to hold every BMC's event stream open.
const streamsOpenTimeout = 5 * time.Minute

// powerWatchRest measures the manager at rest while it follows every host's power through its BMC's event
// stream (--power-watch): it turns spec.powerWatch on for every BMC, waits until the Redfish mock holds
// one stream open per BMC, and stays at rest for --steady, as the steady phase did without the streams.
// The two phases side by side are the cost of the streams.
func (b *bench) powerWatchRest(ctx context.Context) error {
	if !b.cfg.powerWatch || b.cfg.steady <= 0 || b.cfg.peer() || !b.cfg.bmcs {
		return nil
	}
	p := b.track.begin("streams-opening")
	p.Notes = append(p.Notes, "no failures: spec.powerWatch turned on for every BMC; waiting for every event stream to open")
	var list v1alpha1.BMCList
	if err := b.h.Client.List(ctx, &list, client.InNamespace(harness.Namespace)); err != nil {
		return fmt.Errorf("listing the BMCs: %w", err)
	}
	start := time.Now()
	for i := range list.Items {
		if err := b.h.Client.Patch(ctx, &list.Items[i], client.RawPatch("application/merge-patch+json", []byte(powerWatchPatch))); err != nil {
			return fmt.Errorf("turning the power watch on for BMC %s: %w", list.Items[i].Name, err)
		}
	}
	want := len(list.Items)
	logf("power watch on for %d BMCs in %s; waiting for their event streams", want, time.Since(start).Round(time.Millisecond))
	wait, cancel := context.WithTimeout(ctx, streamsOpenTimeout)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for b.h.Mock.OpenEventStreams() < want {
		select {
		case <-wait.Done():
			return fmt.Errorf("%d of %d event streams open after %s", b.h.Mock.OpenEventStreams(), want, streamsOpenTimeout)
		case <-tick.C:
		}
	}
	logf("%d event streams open %s after the first patch", want, time.Since(start).Round(time.Second))
	b.report.EventStreams = want
	p = b.track.begin("steady-streams")
	p.Notes = append(p.Notes, fmt.Sprintf("no failures: %d event streams open", want))
	b.profile(ctx, "steady-streams", b.cfg.steady)
	logf("at rest with the streams for %s", b.cfg.steady)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.cfg.steady):
	}
	b.heapProfile(ctx, "after-steady-streams")
	if open := b.h.Mock.OpenEventStreams(); open < want {
		p.Notes = append(p.Notes, fmt.Sprintf("%d of %d streams still open at its end", open, want))
	}
	return nil
}
