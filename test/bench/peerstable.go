package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The side-by-side table of `bench peers`: each checker's runs (one Report each) summed up as the median
// of the runs with their range, and each peer's medians as a ratio to metalheal's checker of the same
// kind. Everything here is a pure function of the reports.

// figure is one run's value of one figure; missed when the run did not get it within its bound (a
// detection phase with failures whose requests never came).
type figure struct {
	v      float64
	missed bool
	ok     bool // the run measured it at all
}

func value(v float64) figure { return figure{v: v, ok: true} }

var missedFigure = figure{missed: true, ok: true}

// runFigures are what the table reads from one run's report.
type runFigures struct {
	spreadP50, spreadP99, burstP50, burstP99 figure // request stored − expiry, ms (audit log)
	missedSpread, missedBurst                int    // failures whose request was not seen within the bound
	floorMs                                  figure // the API server's floor: the median of the run's rounds' last answers
	peakRSSMiB, restCPU                      figure // the controller's peak RSS; its CPU, % of a core, in the steady phase
	lists                                    figure // LIST requests after start-up
	apiserverRest, simLagMs                  figure // the world: the API server's CPU at rest, the kubelets' worst lag
	boundSeconds                             float64
	err                                      string
}

// figuresOf reads a run's report.
func figuresOf(r *Report) runFigures {
	f := runFigures{boundSeconds: r.Config.DetectTimeoutSeconds, err: r.Error}
	for _, d := range r.Detection {
		p50, p99, missed := &f.spreadP50, &f.spreadP99, &f.missedSpread
		if d.Phase == "burst" {
			p50, p99, missed = &f.burstP50, &f.burstP99, &f.missedBurst
		}
		*missed = d.Failures - d.Detected
		switch {
		case *missed > 0:
			*p50, *p99 = missedFigure, missedFigure
			if d.Detected*2 >= d.Failures && d.Created != nil {
				*p50 = value(d.Created.P50) // the median of the failures is known; their p99 is not
			}
		case d.Created != nil:
			*p50, *p99 = value(d.Created.P50), value(d.Created.P99)
		}
	}
	if fl := r.Floor; fl != nil && len(fl.LastMs) > 0 {
		f.floorMs = value(median(fl.LastMs))
	}
	var peak, lag float64
	lists, sawLag := 0, false
	for _, p := range r.Phases {
		if c, ok := p.Costs[controllerMeter]; ok {
			peak = max(peak, c.HWMMiB, c.PeakRSSMiB)
		}
		if p.Name != "startup" {
			lists += p.Lists
		}
		if p.SimulatorLagMs != nil && p.Name != "startup" {
			lag, sawLag = max(lag, *p.SimulatorLagMs), true
		}
		if p.Name == "steady" {
			f.restCPU = value(p.Costs[controllerMeter].CPUPercent)
			f.apiserverRest = value(p.Costs["kube-apiserver"].CPUPercent)
		}
	}
	if peak > 0 {
		f.peakRSSMiB = value(peak)
	}
	if len(r.Phases) > 1 {
		f.lists = value(float64(lists))
	}
	if sawLag {
		f.simLagMs = value(lag)
	}
	return f
}

// median of values (the mean of the middle two for an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// summary is a figure over a checker's runs: the median and the range, a miss counting as larger than
// any value.
type summary struct {
	runs, missed  int
	med, min, max float64 // +Inf where a miss decides
}

func summarize(fs []figure) summary {
	var vals []float64
	s := summary{}
	for _, f := range fs {
		if !f.ok {
			continue
		}
		s.runs++
		if f.missed {
			s.missed++
			vals = append(vals, math.Inf(1))
		} else {
			vals = append(vals, f.v)
		}
	}
	if s.runs == 0 {
		return s
	}
	sort.Float64s(vals)
	s.med, s.min, s.max = median(vals), vals[0], vals[len(vals)-1]
	return s
}

// cell prints a summary: "12.3 (10.1–15.0)", one run's value alone, "missed (> 10m)" where a miss is the
// median, "-" when nothing was measured.
func (s summary) cell(format func(float64) string, bound string) string {
	if s.runs == 0 {
		return "-"
	}
	f := func(v float64) string {
		if math.IsInf(v, 1) {
			return "missed"
		}
		return format(v)
	}
	var b strings.Builder
	if math.IsInf(s.med, 1) {
		fmt.Fprintf(&b, "missed (> %s)", bound)
	} else {
		b.WriteString(f(s.med))
	}
	if s.runs > 1 {
		fmt.Fprintf(&b, " (%s–%s)", f(s.min), f(s.max))
	}
	return b.String()
}

// ratio prints peer / ours of two medians: "1234×"; "> 1234×" when the peer missed (its bound over our
// median); "-" when either is unknown or ours is zero.
func ratio(peer, ours summary, boundMs float64) string {
	if peer.runs == 0 || ours.runs == 0 || math.IsInf(ours.med, 1) || ours.med <= 0 {
		return "-"
	}
	if math.IsInf(peer.med, 1) {
		return "> " + times(boundMs/ours.med)
	}
	return times(peer.med / ours.med)
}

func times(x float64) string {
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64) + "×"
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64) + "×"
	default:
		return strconv.FormatFloat(x, 'f', 2, 64) + "×"
	}
}

// msOrS prints milliseconds, as seconds from 10 s up.
func msOrS(v float64) string {
	if v >= 10000 {
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + " s"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
}

// Saturation thresholds: above either, the world itself was busy (BENCHMARKS.md: at 5,000 nodes the API
// server takes 57–77 % of a core at rest in a good hour, 93 % in a slow one, with the kubelets 1.4 s
// behind; their leases are due every 10 s).
const (
	saturatedAPIServerPercent = 80
	saturatedLagMs            = 1000
)

// peerTable is the side-by-side table: one row per checker, in the order given.
type peerTable struct {
	checkers []checker
	runs     map[string][]runFigures // by checker name, in run order
}

// sameKindMetalheal names metalheal's checker of a peer's kind.
func sameKindMetalheal(c checker) string {
	if c.kind == "MachineHealthCheck" {
		return "metalheal-mhc"
	}
	return "metalheal-nhc"
}

func (t *peerTable) column(name string, get func(runFigures) figure) summary {
	var fs []figure
	for _, r := range t.runs[name] {
		fs = append(fs, get(r))
	}
	return summarize(fs)
}

// bound is the longest detection bound of a checker's runs, for printing.
func (t *peerTable) bound(name string) float64 {
	b := 0.0
	for _, r := range t.runs[name] {
		b = max(b, r.boundSeconds)
	}
	return b
}

func boundString(seconds float64) string {
	if seconds >= 60 && math.Mod(seconds, 60) == 0 {
		return strconv.FormatFloat(seconds/60, 'f', 0, 64) + " min"
	}
	return strconv.FormatFloat(seconds, 'f', 0, 64) + " s"
}

var (
	getSpreadP50 = func(r runFigures) figure { return r.spreadP50 }
	getSpreadP99 = func(r runFigures) figure { return r.spreadP99 }
	getBurstP50  = func(r runFigures) figure { return r.burstP50 }
	getBurstP99  = func(r runFigures) figure { return r.burstP99 }
	getFloor     = func(r runFigures) figure { return r.floorMs }
	getRSS       = func(r runFigures) figure { return r.peakRSSMiB }
	getRestCPU   = func(r runFigures) figure { return r.restCPU }
	getLists     = func(r runFigures) figure { return r.lists }
	getAPIRest   = func(r runFigures) figure { return r.apiserverRest }
	getLag       = func(r runFigures) figure { return r.simLagMs }
)

func pct(v float64) string  { return strconv.FormatFloat(v, 'f', 2, 64) + " %" }
func pct0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + " %" }
func mibs(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + " MiB" }
func count(v float64) string {
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// print writes the tables: the figures, the ratios, the world's load, and every miss and error.
func (t *peerTable) print(out io.Writer) {
	fmt.Fprintf(out, "\nDETECTION AND COST (median of the runs, range in brackets; detection = condition expiry -> request stored, audit log)\n")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "checker\truns\tspread p50\tspread p99\tburst p50\tburst p99\tAPI server floor (burst)\tpeak RSS\tCPU at rest\tLISTs after start-up\t")
	for _, c := range t.checkers {
		n, b := c.name, boundString(t.bound(c.name))
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", n, len(t.runs[n]),
			t.column(n, getSpreadP50).cell(msOrS, b), t.column(n, getSpreadP99).cell(msOrS, b),
			t.column(n, getBurstP50).cell(msOrS, b), t.column(n, getBurstP99).cell(msOrS, b),
			t.column(n, getFloor).cell(msOrS, b), t.column(n, getRSS).cell(mibs, b),
			t.column(n, getRestCPU).cell(pct, b), t.column(n, getLists).cell(count, b))
	}
	w.Flush()

	fmt.Fprintf(out, "\nPEERS / METALHEAL (ratio of the medians to metalheal's checker of the same kind; > where the peer missed: its bound over ours)\n")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "peer\tagainst\tspread p50\tspread p99\tburst p50\tburst p99\tpeak RSS\tCPU at rest\tLISTs after start-up\t")
	for _, c := range t.checkers {
		if c.peer == nil {
			continue
		}
		ours := sameKindMetalheal(c)
		if _, ok := t.runs[ours]; !ok {
			fmt.Fprintf(w, "%s\t%s\t(not run)\t\t\t\t\t\t\t\n", c.name, ours)
			continue
		}
		boundMs := t.bound(c.name) * 1000
		r := func(get func(runFigures) figure) string {
			return ratio(t.column(c.name, get), t.column(ours, get), boundMs)
		}
		lists := fmt.Sprintf("%s vs %s", t.column(c.name, getLists).cell(count, ""), t.column(ours, getLists).cell(count, ""))
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.name, ours,
			r(getSpreadP50), r(getSpreadP99), r(getBurstP50), r(getBurstP99), r(getRSS), r(getRestCPU), lists)
	}
	w.Flush()

	fmt.Fprintf(out, "\nTHE WORLD (is the machine the bottleneck? saturated above %d %% of a core for the API server at rest, or %d ms of kubelet lag)\n",
		saturatedAPIServerPercent, saturatedLagMs)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "checker's runs\tAPI server at rest\tsimulated kubelets' worst lag\tsaturated runs\t")
	for _, c := range t.checkers {
		sat := 0
		for _, r := range t.runs[c.name] {
			if saturated(r) {
				sat++
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d of %d\t\n", c.name, t.column(c.name, getAPIRest).cell(pct0, ""),
			t.column(c.name, getLag).cell(msOrS, ""), sat, len(t.runs[c.name]))
	}
	w.Flush()

	for _, c := range t.checkers {
		for i, r := range t.runs[c.name] {
			if r.missedSpread > 0 || r.missedBurst > 0 {
				fmt.Fprintf(out, "  %s run %d: requests missing %d s after the last expiry (the bound): %d of the spread's failures, %d of the burst's\n",
					c.name, i+1, int(r.boundSeconds), r.missedSpread, r.missedBurst)
			}
			if r.err != "" {
				fmt.Fprintf(out, "  %s run %d stopped early: %s\n", c.name, i+1, r.err)
			}
			if saturated(r) {
				fmt.Fprintf(out, "  %s run %d: the world was saturated (API server %s at rest, kubelets %s behind): its figures are the machine's as much as the checker's\n",
					c.name, i+1, pct0(r.apiserverRest.v), msOrS(r.simLagMs.v))
			}
		}
	}
}

// saturated reports whether the world was busier than the thresholds in a run.
func saturated(r runFigures) bool {
	return (r.apiserverRest.ok && r.apiserverRest.v > saturatedAPIServerPercent) || (r.simLagMs.ok && r.simLagMs.v > saturatedLagMs)
}
