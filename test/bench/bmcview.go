package main

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// bmcStepNames name the steps of a power cycle as its BMC sees them, to the millisecond (the Redfish
// mock's request record and power changes): where the time between the status stamps goes.
var bmcStepNames = []string{
	"created -> power-off request at the BMC",  // acceptance, lease, taint, power read, power-off record
	"power-off request -> poll that reads Off", // one poll interval, ideally
	"that poll -> power-on request at the BMC", // PoweredOff recorded, node fenced, power-on recorded
	"power-on request -> poll that reads On",   // one poll interval, ideally
	"that poll -> node Ready stored",           // the rest of the boot (--boot-delay after the host is on)
	"node Ready stored -> Succeeded seen",      // the remediator sees it, lets taints and lease go
}

// powerLog keeps the time of every power change of the Redfish mock's systems, and of every boot of the
// simulated hosts, while a batch runs.
type powerLog struct {
	mu      sync.Mutex
	changes map[string][]powerChange // by system ID
	boots   map[string][]time.Time   // by node
}

type powerChange struct {
	to redfishmock.PowerState
	at time.Time
}

// listen hears the mock's power changes from now on.
func (l *powerLog) listen(m *redfishmock.Mock) {
	l.reset()
	m.OnPowerChange(func(id string, _, to redfishmock.PowerState) {
		now := time.Now()
		l.mu.Lock()
		l.changes[id] = append(l.changes[id], powerChange{to: to, at: now})
		l.mu.Unlock()
	})
}

// booted records when a simulated host's Node was stored Ready after a boot (harness.Options.OnBoot).
func (l *powerLog) booted(node string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.boots != nil {
		l.boots[node] = append(l.boots[node], at)
	}
}

// reset forgets the changes and boots heard so far.
func (l *powerLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes, l.boots = map[string][]powerChange{}, map[string][]time.Time{}
}

// firstBoot is node's first boot at or after t.
func (l *powerLog) firstBoot(node string, t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.boots[node] {
		if !at.Before(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// lastBoot is node's latest boot heard.
func (l *powerLog) lastBoot(node string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if bs := l.boots[node]; len(bs) > 0 {
		return bs[len(bs)-1], true
	}
	return time.Time{}, false
}

// first is the first change of system id to state at or after t.
func (l *powerLog) first(id string, to redfishmock.PowerState, t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.changes[id] {
		if c.to == to && !c.at.Before(t) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// bmcSteps times each node's power cycle from the mock's record of requests (arrival times), its power
// changes and the simulated hosts' boots: the first reset after the create (power-off), the first read
// of the system after the host was off, the next reset (power-on), the first read after the host was on,
// the host's boot (its Node Ready stored), and the request seen Succeeded. (A periodic check of the BMC
// reads the system too: one that comes first counts as the poll.) It also counts the mock's requests in
// the batch, per remediation.
func (b *bench) bmcSteps(nodes []string, created []time.Time, terminal map[string]time.Time, reqs []redfishmock.Request) ([]CycleStep, float64) {
	bySystem := map[string][]redfishmock.Request{}
	for _, r := range reqs {
		if r.System != "" {
			bySystem[r.System] = append(bySystem[r.System], r)
		}
	}
	isReset := func(r redfishmock.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/Actions/ComputerSystem.Reset")
	}
	isRead := func(id string, r redfishmock.Request) bool {
		return r.Method == http.MethodGet && r.Path == b.h.Mock.SystemPath(id)
	}
	next := func(rs []redfishmock.Request, from time.Time, match func(redfishmock.Request) bool) (time.Time, bool) {
		for _, r := range rs {
			if !r.Time.Before(from) && match(r) {
				return r.Time, true
			}
		}
		return time.Time{}, false
	}
	// A read that arrives up to one latency before a change answers after it.
	early := b.cfg.bmcLatency
	samples := make([][]float64, len(bmcStepNames))
	for i, n := range nodes {
		id := harness.SystemID(n)
		rs := bySystem[id]
		read := func(r redfishmock.Request) bool { return isRead(id, r) }
		pollAfter := func(to redfishmock.PowerState) func(time.Time) (time.Time, bool) {
			return func(t time.Time) (time.Time, bool) {
				at, ok := b.powerLog.first(id, to, t)
				if !ok {
					return at, false
				}
				return next(rs, at.Add(-early), read)
			}
		}
		var lastReset time.Time
		reset := func(t time.Time) (time.Time, bool) {
			at, ok := next(rs, t, isReset)
			lastReset = at
			return at, ok
		}
		// The boot after the power-on; a poll later than the boot counts it as at once.
		boot := func(t time.Time) (time.Time, bool) {
			at, ok := b.powerLog.firstBoot(n, lastReset)
			return laterOf(at, t), ok
		}
		finders := []func(time.Time) (time.Time, bool){
			reset, pollAfter(redfishmock.PowerOff), reset, pollAfter(redfishmock.PowerOn), boot,
			func(t time.Time) (time.Time, bool) { at, ok := terminal[n]; return at, ok && at.After(t) },
		}
		mark := created[i]
		for j, find := range finders {
			at, ok := find(mark)
			if !ok {
				break
			}
			samples[j] = append(samples[j], at.Sub(mark).Seconds())
			mark = at
		}
	}
	var steps []CycleStep
	for i, name := range bmcStepNames {
		if s := stats(samples[i]); s != nil {
			steps = append(steps, CycleStep{Name: name, Seconds: s})
		}
	}
	var perRemediation float64
	if len(nodes) > 0 {
		perRemediation = float64(len(reqs)) / float64(len(nodes))
	}
	return steps, perRemediation
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// lastStepNames name the steps finishSteps splits "node Ready stored -> Succeeded seen" into,
// from the API server's audit log.
var lastStepNames = []string{
	"node Ready stored -> remediator's first node write arrives", // its Node watch, a free worker
	"that write -> Succeeded stored",                             // taints off, lease let go, status
	"Succeeded stored -> Succeeded seen",                         // the bench's watch
}

// waveEnds are what finishSteps needs of a batch, kept until the audit log is read: each node's boot
// after its power-on and the time its request was seen Succeeded.
type waveEnds struct {
	run      *CycleRun
	start    time.Time // the batch's first create
	boots    map[string]time.Time
	terminal map[string]time.Time
}

// keepEnds remembers a batch's boots and ends for finishSteps.
func (b *bench) keepEnds(run *CycleRun, start time.Time, nodes []string, terminal map[string]time.Time) {
	ends := waveEnds{run: run, start: start, boots: map[string]time.Time{}, terminal: terminal}
	for _, n := range nodes {
		if at, ok := b.powerLog.lastBoot(n); ok {
			ends.boots[n] = at
		}
	}
	b.ends = append(b.ends, ends)
}

// finishSteps adds lastStepNames to each kept batch's BMC steps, from the controller's requests: its
// first write of the node after the node's boot, and the last status write of the node's request stored
// before the bench saw it Succeeded.
func (b *bench) finishSteps(reqs []request) {
	nodeWrites, statusWrites := map[string][]request{}, map[string][]request{}
	for _, r := range reqs {
		switch {
		case r.write && r.resource == "nodes":
			nodeWrites[r.name] = append(nodeWrites[r.name], r)
		case r.write && r.resource == b.emrGVR.Resource+"/status":
			statusWrites[r.name] = append(statusWrites[r.name], r)
		}
	}
	for _, e := range b.ends {
		samples := make([][]float64, len(lastStepNames))
		var lastStored time.Time
		stores := 0
		for n, end := range e.terminal {
			// The last status write that arrived before the bench saw Succeeded: the one that recorded
			// it. It may have arrived before the boot was stamped, as the node's Ready can reach the
			// remediator's watch before the simulator has the API server's answer (seconds, in a wave).
			// An idle API server completes its answer just after the watch event has gone out.
			var stored, arrived time.Time
			for _, r := range statusWrites[n] { // the bench names each request after its node
				if r.at.Before(end) && r.at.After(arrived) {
					arrived, stored = r.at, r.at.Add(r.latency)
					if stored.After(end) {
						stored = end
					}
				}
			}
			if !stored.IsZero() {
				stores++
				lastStored = laterOf(lastStored, stored)
			}
			boot, ok := e.boots[n]
			if !ok || !end.After(boot) {
				continue
			}
			// The Ready is stamped when the simulator had the API server's answer; an idle remediator's
			// write can arrive before that. Its earlier node writes (the taints) come seconds before.
			var first time.Time
			for _, r := range nodeWrites[n] {
				if r.at.After(boot.Add(-time.Second)) {
					first = laterOf(r.at, boot)
					break
				}
			}
			if first.IsZero() || stored.Before(first) {
				continue
			}
			marks := []time.Time{boot, first, stored, end}
			for i := range lastStepNames {
				samples[i] = append(samples[i], marks[i+1].Sub(marks[i]).Seconds())
			}
		}
		if stores > 0 && stores == len(e.terminal) {
			e.run.StoredMakespanSeconds = lastStored.Sub(e.start).Seconds()
		}
		for i, name := range lastStepNames {
			if s := stats(samples[i]); s != nil {
				e.run.BMCSteps = append(e.run.BMCSteps, CycleStep{Name: name, Seconds: s})
			}
		}
	}
}
