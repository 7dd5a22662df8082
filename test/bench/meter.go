package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metalheal/metalheal/test/world"
)

// meter reads the CPU time and memory of a set of processes (one, or a process group) from /proc.
type meter struct {
	name string
	pids func() []int
}

// reading is what a meter's processes had consumed at one moment.
type reading struct {
	CPU time.Duration
	RSS int64 // now, summed over the processes
	HWM int64 // sum of the processes' high-water marks
}

func (m *meter) read() reading {
	var r reading
	for _, pid := range m.pids() {
		u, err := world.ProcessUsage(pid)
		if err != nil {
			continue // exited
		}
		r.CPU += u.CPU
		r.RSS += u.RSS
		r.HWM += u.PeakRSS
	}
	return r
}

// processGroup lists the live processes of a process group (a peer command and its children).
func processGroup(pgid int) func() []int {
	return func() []int {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return []int{pgid}
		}
		var pids []int
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			i := bytes.LastIndexByte(b, ')')
			if i < 0 {
				continue
			}
			// After "pid (comm)": state, ppid, pgrp.
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
				pids = append(pids, pid)
			}
		}
		return pids
	}
}

// Cost is what one process (or group) consumed during a phase.
type Cost struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUPercent is CPU time over wall time, in percent of one core.
	CPUPercent float64 `json:"cpuPercentOfOneCore"`
	// PeakRSSMiB is the largest RSS sampled (every second, and at the phase's ends).
	PeakRSSMiB float64 `json:"peakRSSMiB"`
	// HWMMiB is the kernel's RSS high-water mark (VmHWM) at the phase's end: the peak since the process
	// started.
	HWMMiB float64 `json:"highWaterMarkMiB"`
}

// Phase is one measured stretch of the run.
type Phase struct {
	Name    string          `json:"name"`
	Start   time.Time       `json:"start"`
	End     time.Time       `json:"end"`
	Seconds float64         `json:"seconds"`
	Costs   map[string]Cost `json:"costs"`
	// LoadAvg is /proc/loadavg at the start and the end: other work on the machine makes CPU figures noisy.
	LoadAvgStart string `json:"loadAvgStart"`
	LoadAvgEnd   string `json:"loadAvgEnd"`
	// StealPercent is the share of the machine's CPU time its hypervisor gave to others during the phase
	// (/proc/stat): on a virtual machine, the other noise the figures carry.
	StealPercent *float64 `json:"stealPercent,omitempty"`
	// Requests counts the controller's API requests by "verb resource" (from the audit log).
	Requests      map[string]int `json:"requests"`
	RequestsTotal int            `json:"requestsTotal"`
	// Lists counts LIST requests and watches that start with the full state (sendInitialEvents).
	Lists int `json:"lists"`
	// Writes counts create, update, patch, delete and deletecollection requests.
	Writes int `json:"writes"`
	// WriteLatencyMs is how long the API server took over the writes (audit log: received to answered).
	WriteLatencyMs *Stats `json:"writeLatencyMs,omitempty"`
	// Reconciles counts the controller's reconciles by controller (metalheal's manager: from its
	// controller_runtime_reconcile_total).
	Reconciles map[string]float64 `json:"reconciles,omitempty"`
	// Gauges are the controller's own gauges at the phase's end (metalheal's manager: goroutines, heap).
	Gauges map[string]float64 `json:"gauges,omitempty"`
	// SimulatorLagMs is the simulator's worst lease renewal delay in the phase (due → stored): whether the
	// simulated kubelets kept up (a few ms) or fell behind a slow API server (a real kubelet would not
	// wait for the others).
	SimulatorLagMs *float64 `json:"simulatorLagMs,omitempty"`
	// Server is the change over the phase of the API server's own counters (see serverCounters): its
	// fairness queues' waits, the watches it closed on slow watchers, its etcd requests.
	Server map[string]float64 `json:"apiServer,omitempty"`
	// Peaks are the largest values of etcd's watch gauges sampled in the phase (see etcdGauges).
	Peaks map[string]float64 `json:"etcdPeaks,omitempty"`
	// Notes say what happened in the phase.
	Notes []string `json:"notes,omitempty"`
}

// tracker samples the meters every second and cuts the run into phases.
type tracker struct {
	mu     sync.Mutex
	meters []*meter
	cur    *phaseRun
	phases []*Phase
	// counters, when set, reads counters whose change over each phase is recorded as its Reconciles.
	counters func() map[string]float64
	// gauges, when set, reads what is recorded as each phase's Gauges at its end.
	gauges func() map[string]float64
	// lag, when set, returns the world's worst lag since it was last called (see Phase.SimulatorLagMs).
	lag func() time.Duration
	// server, when set, reads counters whose change over each phase is recorded as its Server.
	server func() map[string]float64
	// peaks, when set, reads gauges sampled every second whose largest values are each phase's Peaks.
	peaks func() map[string]float64
}

type phaseRun struct {
	phase    *Phase
	start    map[string]reading
	peak     map[string]int64
	counters map[string]float64
	server   map[string]float64
	// The machine's CPU time at the start (see machineCPU).
	cpuTotal, cpuSteal uint64
	cpuOK              bool
}

func (t *tracker) add(m *meter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.meters = append(t.meters, m)
}

// run samples until ctx is done.
func (t *tracker) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.sample()
	}
}

func (t *tracker) sample() {
	t.mu.Lock()
	peaks := t.peaks
	t.mu.Unlock()
	var gauges map[string]float64
	if peaks != nil {
		gauges = peaks() // a scrape: not under the lock
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur == nil {
		return
	}
	for k, v := range gauges {
		if p := t.cur.phase; p.Peaks == nil {
			p.Peaks = map[string]float64{k: v}
		} else if v > p.Peaks[k] {
			p.Peaks[k] = v
		}
	}
	for _, m := range t.meters {
		r := m.read()
		if r.RSS > t.cur.peak[m.name] {
			t.cur.peak[m.name] = r.RSS
		}
	}
}

// begin ends the current phase, if any, and starts one.
func (t *tracker) begin(name string) *Phase {
	now := time.Now()
	t.end(now)
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &Phase{Name: name, Start: now, LoadAvgStart: loadAvg(), Costs: map[string]Cost{}}
	run := &phaseRun{phase: p, start: map[string]reading{}, peak: map[string]int64{}}
	run.cpuTotal, run.cpuSteal, run.cpuOK = machineCPU()
	for _, m := range t.meters {
		r := m.read()
		run.start[m.name], run.peak[m.name] = r, r.RSS
	}
	if t.counters != nil {
		run.counters = t.counters()
	}
	if t.server != nil {
		run.server = t.server()
	}
	if t.lag != nil {
		t.lag() // start over
	}
	t.cur = run
	t.phases = append(t.phases, p)
	return p
}

// end ends the current phase.
func (t *tracker) end(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	run := t.cur
	if run == nil {
		return
	}
	t.cur = nil
	p := run.phase
	p.End, p.LoadAvgEnd = now, loadAvg()
	p.Seconds = now.Sub(p.Start).Seconds()
	if total, steal, ok := machineCPU(); ok && run.cpuOK && total > run.cpuTotal {
		p.StealPercent = new(100 * float64(steal-run.cpuSteal) / float64(total-run.cpuTotal))
	}
	for _, m := range t.meters {
		r := m.read()
		startCPU := run.start[m.name].CPU // zero for a meter added during the phase
		cpu := (r.CPU - startCPU).Seconds()
		c := Cost{CPUSeconds: cpu, PeakRSSMiB: mib(max(run.peak[m.name], r.RSS)), HWMMiB: mib(r.HWM)}
		if p.Seconds > 0 {
			c.CPUPercent = 100 * cpu / p.Seconds
		}
		p.Costs[m.name] = c
	}
	if t.gauges != nil {
		p.Gauges = t.gauges()
	}
	if t.lag != nil {
		p.SimulatorLagMs = new(float64(t.lag().Microseconds()) / 1000)
	}
	if t.counters != nil {
		p.Reconciles = change(run.counters, t.counters())
	}
	if t.server != nil && run.server != nil {
		p.Server = change(run.server, t.server())
	}
}

// change is what counters read at a phase's end add to those read at its start; nil without an end.
func change(start, end map[string]float64) map[string]float64 {
	if end == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range end {
		out[k] = v - start[k]
	}
	return out
}

func (t *tracker) finish() []*Phase {
	t.end(time.Now())
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.phases
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// machineCPU reads the machine's CPU time from the first line of /proc/stat, in clock ticks: all of it,
// and the part stolen by the hypervisor.
func machineCPU() (total, steal uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice, already counted in user and nice]
	for i := 1; i <= 8; i++ {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 8 {
			steal = v
		}
	}
	return total, steal, true
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// memoryGiB is MemTotal from /proc/meminfo.
func memoryGiB() float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err == nil {
				return kb / (1 << 20)
			}
		}
	}
	return 0
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// waitQuiet waits until a meter's processes use less than percent of a core over window, after at least
// window has passed.
func waitQuiet(ctx context.Context, m *meter, window time.Duration, percent float64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type point struct {
		at  time.Time
		cpu time.Duration
	}
	var hist []point
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		now := time.Now()
		hist = append(hist, point{now, m.read().CPU})
		for len(hist) > 1 && now.Sub(hist[1].at) >= window {
			hist = hist[1:]
		}
		if first := hist[0]; now.Sub(first.at) >= window {
			used := (hist[len(hist)-1].cpu - first.cpu).Seconds() / now.Sub(first.at).Seconds() * 100
			if used < percent {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to go quiet: %w", m.name, ctx.Err())
		case <-tick.C:
		}
	}
}
