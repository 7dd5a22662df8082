package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/metalheal/metalheal/test/peers"
)

func TestMedian(t *testing.T) {
	for name, tc := range map[string]struct {
		in   []float64
		want float64
	}{
		"one":                  {[]float64{7}, 7},
		"odd, unsorted":        {[]float64{30, 10, 20}, 20},
		"even: mean of middle": {[]float64{4, 1, 3, 2}, 2.5},
		"a miss is the top":    {[]float64{math.Inf(1), 5, 6}, 6},
	} {
		t.Run(name, func(t *testing.T) {
			if got := median(tc.in); got != tc.want {
				t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
}

func TestSummaryCell(t *testing.T) {
	for name, tc := range map[string]struct {
		in   []figure
		want string
	}{
		"nothing measured":          {nil, "-"},
		"runs that did not measure": {[]figure{{}, {}}, "-"},
		"one run: its value alone":  {[]figure{value(12.34)}, "12.3 ms"},
		"three runs: median and range": {
			[]figure{value(15.3), value(61.5), value(20)}, "20.0 ms (15.3 ms–61.5 ms)"},
		"seconds from 10 s up": {[]figure{value(15000), value(9000), value(12000)}, "12.0 s (9000.0 ms–15.0 s)"},
		"one miss of three: the range says so": {
			[]figure{value(10), missedFigure, value(12)}, "12.0 ms (10.0 ms–missed)"},
		"misses the median: the bound": {
			[]figure{missedFigure, value(10), missedFigure}, "missed (> 10 min) (10.0 ms–missed)"},
		"a run that did not measure is not a run": {[]figure{value(3), {}}, "3.0 ms"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := summarize(tc.in).cell(msOrS, "10 min"); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	s := func(fs ...figure) summary { return summarize(fs) }
	for name, tc := range map[string]struct {
		peer, ours summary
		want       string
	}{
		"hundreds: whole":             {s(value(15000)), s(value(15)), "1000×"},
		"tens: one decimal":           {s(value(123)), s(value(10)), "12.3×"},
		"below ten: two decimals":     {s(value(300)), s(value(149)), "2.01×"},
		"the peer missed: its bound":  {s(missedFigure), s(value(20)), "> 30000×"},
		"ours missed: no ratio":       {s(value(5)), s(missedFigure), "-"},
		"ours zero: no ratio":         {s(value(5)), s(value(0)), "-"},
		"the peer did not measure it": {s(), s(value(1)), "-"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := ratio(tc.peer, tc.ours, 600000); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFiguresOf(t *testing.T) {
	phases := []*Phase{
		{Name: "startup", Lists: 40, Costs: map[string]Cost{controllerMeter: {PeakRSSMiB: 90, HWMMiB: 95}}, SimulatorLagMs: new(5000.0)},
		{Name: "steady", Lists: 1, Costs: map[string]Cost{controllerMeter: {CPUPercent: 1.5, PeakRSSMiB: 80, HWMMiB: 95}, "kube-apiserver": {CPUPercent: 30}}, SimulatorLagMs: new(12.0)},
		{Name: "spread", Lists: 2, Costs: map[string]Cost{controllerMeter: {PeakRSSMiB: 120, HWMMiB: 110}}, SimulatorLagMs: new(40.0)},
	}
	for name, tc := range map[string]struct {
		detection []Detection
		check     func(t *testing.T, f runFigures)
	}{
		"every request: the stored delays": {
			[]Detection{{Phase: "spread", Failures: 2, Detected: 2, Created: &Stats{P50: 8, P99: 15}}, {Phase: "burst", Failures: 2, Detected: 2, Created: &Stats{P50: 20, P99: 70}}},
			func(t *testing.T, f runFigures) {
				if f.spreadP99 != value(15) || f.burstP50 != value(20) || f.burstP99 != value(70) || f.missedSpread != 0 {
					t.Errorf("detection %+v", f)
				}
			},
		},
		"a missed failure: p99 missed, the median kept while half came": {
			[]Detection{{Phase: "spread", Failures: 4, Detected: 3, Created: &Stats{P50: 8, P99: 15}}},
			func(t *testing.T, f runFigures) {
				if f.missedSpread != 1 || f.spreadP99 != missedFigure || f.spreadP50 != value(8) {
					t.Errorf("spread %+v / %+v, missed %d", f.spreadP50, f.spreadP99, f.missedSpread)
				}
			},
		},
		"most missed: the median missed too": {
			[]Detection{{Phase: "burst", Failures: 4, Detected: 1, Created: &Stats{P50: 8, P99: 8}}},
			func(t *testing.T, f runFigures) {
				if f.missedBurst != 3 || f.burstP50 != missedFigure {
					t.Errorf("burst %+v, missed %d", f.burstP50, f.missedBurst)
				}
			},
		},
		"costs: peak over phases, CPU and API server at rest, LISTs and lag after start-up": {
			nil,
			func(t *testing.T, f runFigures) {
				if f.peakRSSMiB != value(120) || f.restCPU != value(1.5) || f.apiserverRest != value(30) || f.lists != value(3) || f.simLagMs != value(40) {
					t.Errorf("costs %+v", f)
				}
				if f.spreadP99.ok || f.floorMs != value(52) {
					t.Errorf("no detection, floor median of 44, 52, 54: %+v %+v", f.spreadP99, f.floorMs)
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Report{Detection: tc.detection, Phases: phases, Floor: &Floor{LastMs: []float64{54, 44, 52}}}
			tc.check(t, figuresOf(r))
		})
	}
}

func TestPeerTablePrint(t *testing.T) {
	run := func(p99 figure, rss, lag float64) runFigures {
		return runFigures{spreadP50: value(5), spreadP99: p99, burstP50: value(9), burstP99: p99, peakRSSMiB: value(rss),
			restCPU: value(1), lists: value(0), apiserverRest: value(30), simLagMs: value(lag), boundSeconds: 600}
	}
	missed := run(missedFigure, 300, 10)
	missed.missedSpread = 50
	tab := &peerTable{
		checkers: []checker{{name: "metalheal-nhc", kind: "NodeHealthCheck"}, {name: "medik8s-nhc", kind: "NodeHealthCheck", peer: &peers.Medik8s}},
		runs: map[string][]runFigures{
			"metalheal-nhc": {run(value(15), 100, 10), run(value(20), 110, 2500), run(value(30), 105, 10)},
			"medik8s-nhc":   {missed, run(value(400000), 320, 10), missed},
		},
	}
	var out bytes.Buffer
	tab.print(&out)
	got := out.String()
	for _, want := range []string{
		"20.0 ms (15.0 ms–30.0 ms)", // metalheal's spread p99: median and range
		"missed (> 10 min)",         // medik8s missed in two runs of three
		"> 30000×",                  // its bound over metalheal's median
		"2.86×",                     // peak RSS: medians 300 / 105
		"medik8s-nhc run 1: requests missing 600 s after the last expiry (the bound): 50 of the spread's failures",
		"metalheal-nhc run 2: the world was saturated",
		"1 of 3",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
}
