package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
)

func floorObject(name string) client.Object {
	return &v1alpha1.PowerCycleRemediationTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: harness.Namespace}}
}

// A round creates every object, times each answer, leaves the caller's objects as they were (the next
// round creates them again) and deletes them all; a create the API server refuses is the round's error.
func TestFloorRound(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(harness.Scheme()).Build()
	objs := []client.Object{floorObject("floor-a"), floorObject("floor-b"), floorObject("floor-c")}

	for round := range 2 {
		took, err := createAtOnce(ctx, c, objs)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(took) != len(objs) {
			t.Fatalf("round %d: %d times for %d objects", round, len(took), len(objs))
		}
		for i, ms := range took {
			if ms < 0 {
				t.Errorf("round %d: object %d took %v ms", round, i, ms)
			}
		}
		var list v1alpha1.PowerCycleRemediationTemplateList
		if err := c.List(ctx, &list); err != nil || len(list.Items) != len(objs) {
			t.Fatalf("round %d: %d objects stored (%v), want %d", round, len(list.Items), err, len(objs))
		}
		for _, o := range objs {
			if o.GetResourceVersion() != "" || o.GetUID() != "" {
				t.Fatalf("round %d: the caller's %s was filled in by the create", round, o.GetName())
			}
		}
		if err := deleteAll(ctx, c, objs); err != nil {
			t.Fatalf("round %d: deleting: %v", round, err)
		}
		if err := c.List(ctx, &list); err != nil || len(list.Items) != 0 {
			t.Fatalf("round %d: %d objects left after deleting (%v)", round, len(list.Items), err)
		}
	}

	if err := c.Create(ctx, floorObject("floor-b")); err != nil {
		t.Fatal(err)
	}
	if _, err := createAtOnce(ctx, c, objs); err == nil || !strings.Contains(err.Error(), "floor-b") {
		t.Fatalf("a refused create is the round's error: got %v", err)
	}
}

// The targets are judged in the world they are for: detection latency at 1,000 nodes (the spread by
// when its requests were stored, the burst by when its last create arrived, beside the floor and the
// last stored), cost and the wave guard at 5,000; a figure of another world is reported, not judged.
// The report prints the floor, so that a reader can tell the API server's part of a burst from the
// controller's.
func TestTargetsInTheirWorlds(t *testing.T) {
	report := func(nodes int) *Report {
		r := &Report{
			Config: ConfigInfo{Nodes: nodes},
			Detection: []Detection{
				{Phase: "spread", Failures: 2, Detected: 2, Stats: stats([]float64{10, 30}),
					CreateSent: stats([]float64{5, 12}), Created: stats([]float64{8, 21.5})},
				{Phase: "burst", Failures: 2, Detected: 2, Stats: stats([]float64{90, 120}),
					CreateSent: stats([]float64{14, 31}), Created: stats([]float64{60, 110})},
			},
			Floor:       &Floor{Kind: "PowerCycleRemediationTemplate", Objects: 2, Rounds: 2, StoredMs: stats([]float64{40, 61.4, 55, 72.6}), LastMs: []float64{61.4, 72.6}},
			Phases:      []*Phase{{Name: "steady", Seconds: 120, Costs: map[string]Cost{controllerMeter: {CPUSeconds: 1.8, CPUPercent: 1.5, PeakRSSMiB: 140}}}},
			PowerCycles: &PowerCycles{Single: &CycleRun{Count: 1, Succeeded: 1, MakespanSeconds: 18}, Concurrent: &CycleRun{Count: 500, Succeeded: 500, MakespanSeconds: 45}, Ratio: 2.5},
		}
		r.finish()
		return r
	}
	judged := func(r *Report) map[string]string {
		out := map[string]string{}
		for _, tg := range r.Targets {
			status := "reported"
			if tg.Met != nil {
				status = map[bool]string{true: "met", false: "missed"}[*tg.Met]
			}
			out[strings.SplitN(tg.Name, " (at ", 2)[0]] = status + ": " + tg.Value
		}
		return out
	}

	for nodes, want := range map[int]map[string]string{
		1000: {
			"detection p99, spread: request stored - expiry": "met: 21.5 ms (p50 8.0 ms; sent p99 12.0 ms)",
			"burst: the last create arrives - expiry":        "missed: 31.0 ms (the last stored at 110.0 ms; floor: the API server stored the bench's own 2 creates within 61, 73 ms)",
			"controller peak RSS":                            "reported: 140 MiB",
			"500 concurrent power cycles":                    "reported: 45.0s vs 18.0s alone = 2.50x",
		},
		5000: {
			"detection p99, spread: request stored - expiry": "reported: 21.5 ms (p50 8.0 ms; sent p99 12.0 ms)",
			"controller peak RSS":                            "met: 140 MiB",
			"controller steady-state CPU":                    "met: 1.50% (1.8 CPU-s in 120s)",
			"LIST requests after start-up":                   "met: 0",
			"500 concurrent power cycles":                    "met: 45.0s vs 18.0s alone = 2.50x",
		},
	} {
		got := judged(report(nodes))
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%d nodes, %s: %q, want %q", nodes, name, got[name], w)
			}
		}
	}

	var out bytes.Buffer
	report(1000).print(&out)
	if want := "the last of each round at 61, 73 ms"; !strings.Contains(out.String(), want) {
		t.Errorf("the printed report lacks %q:\n%s", want, out.String())
	}
}
