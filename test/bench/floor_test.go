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

// The burst's target names the floor, and the report prints it, so that a reader can tell the API
// server's part of a burst from the controller's.
func TestFloorInReport(t *testing.T) {
	r := &Report{
		Config:    ConfigInfo{Nodes: 5000},
		Detection: []Detection{{Phase: "spread", Failures: 2, Detected: 2, Stats: stats([]float64{10, 20})}, {Phase: "burst", Failures: 2, Detected: 2, Stats: stats([]float64{90, 120})}},
		Floor:     &Floor{Kind: "PowerCycleRemediationTemplate", Objects: 2, Rounds: 2, StoredMs: stats([]float64{40, 61.4, 55, 72.6}), LastMs: []float64{61.4, 72.6}},
	}
	r.finish()
	var burst, spread Target
	for _, tg := range r.Targets {
		switch tg.Name {
		case "detection p99 (burst)":
			burst = tg
		case "detection p99 (spread)":
			spread = tg
		}
	}
	if want := "120.0 ms (2 of 2 detected); the API server alone answered the bench's 2 creates within 61, 73 ms"; burst.Value != want {
		t.Errorf("burst target: %q, want %q", burst.Value, want)
	}
	if strings.Contains(spread.Value, "API server") {
		t.Errorf("the spread's target does not compare with a burst's floor: %q", spread.Value)
	}
	var out bytes.Buffer
	r.print(&out)
	if want := "the last of each round at 61, 73 ms"; !strings.Contains(out.String(), want) {
		t.Errorf("the printed report lacks %q:\n%s", want, out.String())
	}
}
