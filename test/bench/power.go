package main

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// powerLabel marks the PowerCycleRemediations the bench creates itself.
const powerLabel = "bench.metalheal.io/power-cycles"

// CycleRun is one batch of power cycles started at once.
type CycleRun struct {
	Count      int `json:"count"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	Unfinished int `json:"unfinished"`
	// CreateSeconds is how long creating every request took.
	CreateSeconds float64 `json:"createSeconds"`
	// MakespanSeconds runs from the first create to the last request seen Succeeded or Failed.
	MakespanSeconds float64 `json:"makespanSeconds"`
	// StoredMakespanSeconds runs from the first create to the last Succeeded status the API server
	// stored (audit log): the makespan without the bench's watch, which a loaded API server serves late.
	// Zero when some request's last status write could not be told apart.
	StoredMakespanSeconds float64 `json:"storedMakespanSeconds,omitempty"`
	// Seconds are the remediations' own durations, from their create to their end.
	Seconds *Stats `json:"seconds,omitempty"`
	// WritesPerRemediation is the remediator's API writes in the phase (clean-up included) per request.
	WritesPerRemediation float64 `json:"writesPerRemediation"`
	// Steps time each remediation's first attempt, step by step, from the stamps its status keeps (whole
	// seconds): where a batch spends its time.
	Steps []CycleStep `json:"steps,omitempty"`
	// BMCSteps time the same cycles as their BMCs saw them, to the millisecond (see bmcStepNames), and
	// BMCRequestsPerRemediation counts the Redfish requests of the batch (periodic checks included) per
	// remediation.
	BMCSteps                  []CycleStep `json:"bmcSteps,omitempty"`
	BMCRequestsPerRemediation float64     `json:"bmcRequestsPerRemediation,omitempty"`
	// QueueWait is how long the remediator's reconciles waited in its queue for a worker, over the batch
	// (controller-runtime's workqueue_queue_duration_seconds; metalheal's manager only).
	QueueWait *QueueWait `json:"queueWait,omitempty"`
}

// QueueWait summarises a controller queue's waits: the mean, and the histogram buckets that hold the
// median and the 95th percentile.
type QueueWait struct {
	Items  float64 `json:"items"`
	MeanMs float64 `json:"meanMs"`
	P50    string  `json:"p50Bound"`
	P95    string  `json:"p95Bound"`
	// CacheWaits counts the reconciles that waited for the cache to show the latest write the remediator
	// knew of, someone else's after a conflict (metalheal_powercycle_cache_waits_total).
	CacheWaits float64 `json:"cacheWaits"`
	// CacheSkips counts the reconciles that found the cache behind the remediator's own last write and
	// went on from the object that write left (metalheal_powercycle_cache_skips_total).
	CacheSkips float64 `json:"cacheSkips"`
}

// queueWait is the change of the remediator's queue waits from before to after.
func queueWait(before, after series) *QueueWait {
	const metric, label = "workqueue_queue_duration_seconds", `name="powercycleremediation"`
	h := after.histogram(metric, label).minus(before.histogram(metric, label))
	if h.Count == 0 {
		return nil
	}
	return &QueueWait{Items: h.Count, MeanMs: 1000 * h.SumSecs / h.Count, P50: h.quantileBound(0.5), P95: h.quantileBound(0.95),
		CacheWaits: after.sum("metalheal_powercycle_cache_waits_total") - before.sum("metalheal_powercycle_cache_waits_total"),
		CacheSkips: after.sum("metalheal_powercycle_cache_skips_total") - before.sum("metalheal_powercycle_cache_skips_total")}
}

// CycleStep is one step of the remediations' first attempts, over the batch.
type CycleStep struct {
	Name    string `json:"name"`
	Seconds *Stats `json:"seconds"`
}

// cycleStepNames name the steps cycleSteps times, in order.
var cycleStepNames = []string{
	"created -> power-off recorded",   // acceptance, lease, remediation taint, power read, power-off record
	"power-off recorded -> confirmed", // the power-off request, the host's power change, polls
	"confirmed -> power-on recorded",  // the out-of-service taint, the power-on record
	"power-on recorded -> confirmed",  // the power-on request, the host's power change, polls
	"confirmed on -> succeeded",       // the boot, the node's Ready, the taints and the lease let go
}

// PowerCycles is the outcome of the concurrency phases.
type PowerCycles struct {
	BMCLatencyMs      float64   `json:"bmcLatencyMs"`
	PowerDelaySeconds float64   `json:"powerDelaySeconds"`
	BootDelaySeconds  float64   `json:"bootDelaySeconds"`
	Single            *CycleRun `json:"single,omitempty"`
	Concurrent        *CycleRun `json:"concurrent,omitempty"`
	// Ratio is the concurrent makespan over the single cycle's.
	Ratio float64 `json:"ratio"`
}

// powerCycles pauses the health check, slows every Redfish request down, and times one power cycle alone,
// then --cycles at once. The bench creates the requests itself, as a health check would.
func (b *bench) powerCycles(ctx context.Context) error {
	pc := &PowerCycles{
		BMCLatencyMs:      float64(b.cfg.bmcLatency.Milliseconds()),
		PowerDelaySeconds: b.cfg.powerDelay.Seconds(),
		BootDelaySeconds:  b.cfg.bootDelay.Seconds(),
	}
	b.report.PowerCycles = pc
	// The hosts go silent while off: the node lifecycle controller may mark them Unknown, and the health
	// check must not step in.
	pause := []byte(`{"spec":{"pauseRequests":["bench: power cycles started by the bench"]}}`)
	check := &v1alpha1.NodeHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: checkName}}
	if err := b.h.Client.Patch(ctx, check, client.RawPatch(types.MergePatchType, pause)); err != nil {
		return fmt.Errorf("pausing the NodeHealthCheck: %w", err)
	}
	if err := b.h.Mock.SetGlobalFaults(redfishmock.Faults{Latency: b.cfg.bmcLatency}); err != nil {
		return err
	}
	defer func() { _ = b.h.Mock.SetGlobalFaults(redfishmock.Faults{}) }()

	single := harness.NodeName(b.cfg.cycles + 1)
	if b.cfg.cycles+1 > b.cfg.nodes-2*b.cfg.failures {
		single = harness.NodeName(1) // no spare node: the batch reuses it after the clean-up
	}
	var err error
	if pc.Single, err = b.cycleBatch(ctx, "power-single", []string{single}); err != nil {
		return err
	}
	batch := make([]string, b.cfg.cycles)
	for i := range batch {
		batch[i] = harness.NodeName(i + 1)
	}
	// The batch's figures stand even if its clean-up fails.
	pc.Concurrent, err = b.cycleBatch(ctx, "power-concurrent", batch)
	if pc.Single.MakespanSeconds > 0 && pc.Concurrent.MakespanSeconds > 0 {
		pc.Ratio = pc.Concurrent.MakespanSeconds / pc.Single.MakespanSeconds
	}
	return err
}

// cycleBatch creates one PowerCycleRemediation per node at once, waits for each to end, deletes them and
// waits for the nodes to be Ready again.
func (b *bench) cycleBatch(ctx context.Context, name string, nodes []string) (*CycleRun, error) {
	p := b.track.begin(name)
	run := &CycleRun{Count: len(nodes)}
	logf("%s: %d power cycles at once (%s per Redfish request, %s power change, %s boot)",
		name, len(nodes), b.cfg.bmcLatency, b.cfg.powerDelay, b.cfg.bootDelay)
	created := make([]time.Time, len(nodes))
	b.h.Mock.ResetRequests()
	b.powerLog.reset()
	before := b.managerMetrics(ctx)
	start := time.Now()
	if len(nodes) > 1 {
		// The batch's busiest part: its first 30 s (with --pprof-dir).
		b.profile(ctx, name, 30*time.Second)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(64)
	for i, n := range nodes {
		g.Go(func() error {
			pcr := &v1alpha1.PowerCycleRemediation{
				ObjectMeta: metav1.ObjectMeta{
					Name: n, Namespace: harness.Namespace,
					Labels:      map[string]string{powerLabel: "true"},
					Annotations: map[string]string{template.AnnotationNodeName: n},
				},
				Spec: pcrSpec(),
			}
			created[i] = time.Now()
			if err := b.h.Client.Create(gctx, pcr); err != nil {
				return fmt.Errorf("creating PowerCycleRemediation %s: %w", n, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return run, err
	}
	run.CreateSeconds = time.Since(start).Seconds()

	deadline := time.Now().Add(b.cfg.powerTimeout)
	for {
		seen := b.emrs.since(start)
		done := 0
		for _, n := range nodes {
			if s, ok := seen[n]; ok && !s.Terminal.IsZero() {
				done++
			}
		}
		if done == len(nodes) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	seen := b.emrs.since(start)
	var durations []float64
	var last time.Time
	terminal := map[string]time.Time{}
	for i, n := range nodes {
		s, ok := seen[n]
		if ok && !s.Terminal.IsZero() {
			terminal[n] = s.Terminal
		}
		switch {
		case !ok || s.Terminal.IsZero():
			run.Unfinished++
			continue
		case s.Phase == string(v1alpha1.PhaseSucceeded):
			run.Succeeded++
		default:
			run.Failed++
		}
		durations = append(durations, s.Terminal.Sub(created[i]).Seconds())
		if s.Terminal.After(last) {
			last = s.Terminal
		}
	}
	if !last.IsZero() {
		run.MakespanSeconds = last.Sub(start).Seconds()
	}
	run.Seconds = stats(durations)
	if after := b.managerMetrics(ctx); before != nil && after != nil {
		run.QueueWait = queueWait(before, after)
	}
	run.Steps = b.cycleSteps(ctx)
	run.BMCSteps, run.BMCRequestsPerRemediation = b.bmcSteps(nodes, created, terminal, b.h.Mock.Requests())
	b.keepEnds(run, start, nodes, terminal)
	logf("%s: makespan %.1fs; %d succeeded, %d failed, %d unfinished", name, run.MakespanSeconds, run.Succeeded, run.Failed, run.Unfinished)
	p.Notes = append(p.Notes, fmt.Sprintf("%d power cycles: makespan %.1fs (then clean-up)", len(nodes), run.MakespanSeconds))

	// Clean up: the requests go (the remediator's finalizer runs), the nodes come back.
	if err := b.deletePowerCycles(ctx); err != nil {
		return run, err
	}
	recovered, err := b.waitRecovered(ctx, nodes, b.cfg.recoverTimeout)
	if err != nil {
		return run, err
	}
	if !recovered {
		p.Notes = append(p.Notes, "nodes not back within --recover-timeout: healed by the bench")
		b.forceHeal(nodes)
	}
	return run, nil
}

// deletePowerCycles deletes the bench's power cycles. On a loaded API server one deletion of 500
// requests can outlast the server's request timeout, having deleted some of them: it is asked again, a
// few times, for the rest.
func (b *bench) deletePowerCycles(ctx context.Context) error {
	const attempts = 5
	var err error
	for i := range attempts {
		if err = b.h.Client.DeleteAllOf(ctx, &v1alpha1.PowerCycleRemediation{}, client.InNamespace(harness.Namespace),
			client.MatchingLabels{powerLabel: "true"}); err == nil || ctx.Err() != nil {
			break
		}
		logf("deleting the power cycles (attempt %d of %d): %v", i+1, attempts, err)
	}
	if err != nil {
		return fmt.Errorf("deleting the power cycles: %w", err)
	}
	return nil
}

// cycleSteps times the steps of the first attempt of each request of the batch (see cycleStepNames).
func (b *bench) cycleSteps(ctx context.Context) []CycleStep {
	var list v1alpha1.PowerCycleRemediationList
	if err := b.h.Client.List(ctx, &list, client.InNamespace(harness.Namespace), client.MatchingLabels{powerLabel: "true"}); err != nil {
		logf("reading the power cycles' steps: %v", err)
		return nil
	}
	samples := make([][]float64, len(cycleStepNames))
	for _, p := range list.Items {
		if len(p.Status.Attempts) == 0 {
			continue
		}
		a := p.Status.Attempts[0]
		stamps := []*metav1.Time{&p.CreationTimestamp, &a.Started, a.PoweredOff, a.PowerOnRequested, a.PoweredOn, a.Finished}
		for i := range cycleStepNames {
			if from, to := stamps[i], stamps[i+1]; from != nil && to != nil {
				samples[i] = append(samples[i], to.Sub(from.Time).Seconds())
			}
		}
	}
	var steps []CycleStep
	for i, name := range cycleStepNames {
		if s := stats(samples[i]); s != nil {
			steps = append(steps, CycleStep{Name: name, Seconds: s})
		}
	}
	return steps
}
