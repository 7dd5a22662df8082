package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

// The failed Nodes are spread round-robin over the clusters, each cluster's last Nodes first; the spread
// takes the first k, the burst the next k, and no Node fails twice.
func TestFleetFailures(t *testing.T) {
	a, b := fleetNodeNames(1, 3), fleetNodeNames(2, 3)
	tests := []struct {
		name          string
		clusters      [][]string
		k             int
		spread, burst []string
	}{
		{name: "two clusters, two each", clusters: [][]string{a, b}, k: 2,
			spread: []string{"c1-worker-003", "c2-worker-003"}, burst: []string{"c1-worker-002", "c2-worker-002"}},
		{name: "an odd count crosses clusters", clusters: [][]string{a, b}, k: 3,
			spread: []string{"c1-worker-003", "c2-worker-003", "c1-worker-002"}, burst: []string{"c2-worker-002", "c1-worker-001", "c2-worker-001"}},
		{name: "one cluster", clusters: [][]string{a}, k: 1,
			spread: []string{"c1-worker-003"}, burst: []string{"c1-worker-002"}},
		{name: "none", clusters: [][]string{a, b}, k: 0},
		{name: "too few Nodes: the spread first", clusters: [][]string{a[:1]}, k: 1,
			spread: []string{"c1-worker-001"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spread, burst := fleetFailures(tt.clusters, tt.k)
			if !slices.Equal(spread, tt.spread) || !slices.Equal(burst, tt.burst) {
				t.Errorf("got spread %v burst %v, want %v and %v", spread, burst, tt.spread, tt.burst)
			}
		})
	}
}

func TestFleetNodeNamesAreUniqueAcrossClusters(t *testing.T) {
	seen := map[string]bool{}
	for c := 1; c <= 3; c++ {
		for _, n := range fleetNodeNames(c, 20) {
			if seen[n] {
				t.Fatalf("%s repeats", n)
			}
			seen[n] = true
		}
	}
}

// The per-cluster increment is (all connected - one connected) / (clusters - 1), read from the rest
// phases' controller costs; detection is the audit log's expiry → stored of each detection phase.
func TestSummarizeFleet(t *testing.T) {
	rest := func(name string, rss, cpu float64) *Phase {
		return &Phase{Name: name, Costs: map[string]Cost{controllerMeter: {PeakRSSMiB: rss, CPUPercent: cpu}, "kube-apiserver": {PeakRSSMiB: 999}}}
	}
	spread, burst := &Stats{N: 8, P50: 4, P99: 9}, &Stats{N: 8, P50: 12, P99: 30}
	ds := []Detection{{Phase: "spread", Created: spread}, {Phase: "burst", Created: burst}}

	tests := []struct {
		name     string
		clusters int
		phases   []*Phase
		perRSS   float64 // NaN: not reported
		perCPU   float64
	}{
		{name: "four clusters", clusters: 4, phases: []*Phase{rest("startup", 500, 90), rest("rest-1-clusters", 40, 1), rest("connect", 60, 50), rest("rest-4-clusters", 70, 2.5)},
			perRSS: 10, perCPU: 0.5},
		{name: "one cluster: no increment", clusters: 1, phases: []*Phase{rest("rest-1-clusters", 40, 1)}, perRSS: math.NaN()},
		{name: "the run stopped before all were connected", clusters: 4, phases: []*Phase{rest("rest-1-clusters", 40, 1)}, perRSS: math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := summarizeFleet(tt.clusters, 50, tt.phases, ds)
			if s.One == nil || s.One.PeakRSSMiB != 40 {
				t.Errorf("one connected: %+v", s.One)
			}
			if math.IsNaN(tt.perRSS) {
				if s.PerClusterRSSMiB != nil {
					t.Errorf("per cluster reported: %v", *s.PerClusterRSSMiB)
				}
			} else if s.PerClusterRSSMiB == nil || *s.PerClusterRSSMiB != tt.perRSS || *s.PerClusterCPUPercent != tt.perCPU {
				t.Errorf("per cluster: %v %v, want %v MiB %v%%", s.PerClusterRSSMiB, s.PerClusterCPUPercent, tt.perRSS, tt.perCPU)
			}
			if s.Spread != spread || s.Burst != burst {
				t.Errorf("detection: %+v %+v", s.Spread, s.Burst)
			}
		})
	}
}

// The printed table is one header, one separator and one row, as BENCHMARKS.md shows it.
func TestFleetSummaryPrint(t *testing.T) {
	s := summarizeFleet(4, 50, []*Phase{
		{Name: "rest-1-clusters", Costs: map[string]Cost{controllerMeter: {PeakRSSMiB: 40, CPUPercent: 1}}},
		{Name: "rest-4-clusters", Costs: map[string]Cost{controllerMeter: {PeakRSSMiB: 70, CPUPercent: 2.5}}},
	}, []Detection{{Phase: "spread", Created: &Stats{P50: 4, P99: 9}}})
	var out bytes.Buffer
	s.print(&out, 40, 50)
	var rows []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "|") {
			rows = append(rows, l)
		}
	}
	want := "| 40 MiB, 1.00% | 70 MiB, 2.50% | +10.0 MiB, +0.50% | 4.0 / 9.0 ms | – |"
	if len(rows) != 3 || rows[2] != want {
		t.Errorf("table:\n%s\nwant its row %q", out.String(), want)
	}
}

// --world=fleet sizes the world from its clusters, measures metalheal's manager only, and leaves out the
// single world's floor and power-cycle phases.
func TestParseFlagsFleet(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		nodes   int
		wantErr string
	}{
		{name: "defaults", args: []string{"--world=fleet"}, nodes: 200},
		{name: "sized", args: []string{"--world=fleet", "--clusters=2", "--nodes-per-cluster=30", "--failures=10"}, nodes: 60},
		{name: "the single world is unchanged", args: []string{"--nodes=100", "--failures=10"}, nodes: 100},
		{name: "no --nodes in a fleet", args: []string{"--world=fleet", "--nodes=100"}, wantErr: "--world=fleet"},
		{name: "no peer in a fleet", args: []string{"--world=fleet", "--checker=capi-mhc"}, wantErr: "--world=fleet"},
		{name: "at least one cluster", args: []string{"--world=fleet", "--clusters=0"}, wantErr: "--clusters"},
		{name: "failures fit the fleet", args: []string{"--world=fleet", "--clusters=1", "--nodes-per-cluster=10"}, wantErr: "--failures"},
		{name: "unknown world", args: []string{"--world=moon"}, wantErr: `--world "moon"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.nodes != tt.nodes {
				t.Errorf("nodes %d, want %d", c.nodes, tt.nodes)
			}
			if c.fleet() && (c.cycles != 0 || c.floorRounds != 0) {
				t.Errorf("a fleet with %d cycles and %d floor rounds", c.cycles, c.floorRounds)
			}
		})
	}
}
