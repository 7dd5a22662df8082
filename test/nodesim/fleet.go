package nodesim

import (
	"container/heap"
	"errors"
	"fmt"
	"time"
)

// State is what a simulated host is doing.
type State string

// The states of a host.
const (
	// StateOff: the host has no power. No heartbeats.
	StateOff State = "Off"
	// StateBooting: powered on, the kubelet is not up yet (for the boot delay). No heartbeats.
	StateBooting State = "Booting"
	// StateRunning: the kubelet renews the node's lease and posts its status.
	StateRunning State = "Running"
	// StateHung: powered on, but the kubelet hangs (FaultTransient). No heartbeats until a power cycle.
	StateHung State = "Hung"
	// StateBroken: powered on, but the host never comes up (FaultPersistent). No heartbeats, ever.
	StateBroken State = "Broken"
)

// Fault is a failure injected into a host.
type Fault string

// The faults a host can be given.
const (
	// FaultNone is a healthy host.
	FaultNone Fault = ""
	// FaultTransient hangs the kubelet: heartbeats stop while the host stays powered on. Losing power
	// cures it: the next boot comes up healthy. Injected into a host that is off, it hangs the next boot.
	FaultTransient Fault = "Transient"
	// FaultPersistent breaks the host for good: it stops heartbeating and never comes back, however often
	// it is power-cycled, until the fault is cleared.
	FaultPersistent Fault = "Persistent"
)

// ErrUnknownNode is returned for a node the simulator does not simulate.
var ErrUnknownNode = errors.New("node not simulated")

// ErrUnknownFault is returned for a Fault value that is not one of the constants.
var ErrUnknownFault = errors.New("unknown fault")

// errNodeGone is what a heartbeat reports when the Node object has been deleted: the kubelet stops
// until its host boots again (a real kubelet registers its node when it starts, and only then).
var errNodeGone = errors.New("node object deleted")

// taskKind is a piece of kubelet work.
type taskKind int

const (
	// taskBoot is the kubelet starting: register the Node (or take it over), post Ready=True with a new
	// boot ID, create or renew the lease.
	taskBoot taskKind = iota
	// taskLease renews the node's lease.
	taskLease
	// taskStatus posts the node's status (a heartbeat of the Ready condition).
	taskStatus
	numTaskKinds
)

func (k taskKind) String() string {
	return [...]string{"boot", "lease", "status"}[k]
}

// timing is how often and how late the kubelet acts.
type timing struct {
	bootDelay      time.Duration // power on → kubelet up
	leaseInterval  time.Duration // between lease renewals
	statusInterval time.Duration // between status posts that change nothing
	retryInterval  time.Duration // after a failed API call
}

// host is one simulated machine and its kubelet.
type host struct {
	spec    *NodeSpec
	index   int // order of addition, from 1: the node's address
	powered bool
	fault   Fault
	state   State
	// gen changes with every change of state: work queued or under way for an older generation is
	// dropped (a renewal that was due before the power went off never happens).
	gen uint64
	// seq changes each time a kind of work is (re)scheduled, so only the newest chain of it runs.
	seq [numTaskKinds]uint64

	boots        int       // boots started; the boot ID names the newest
	registered   bool      // the Node object is known to exist
	leaseCreated bool      // the Lease object is known to exist
	readySince   time.Time // when Ready=True was last posted after something else
	lastStatus   time.Time // when the status was last posted
	statusDue    time.Time // when the next status post is queued for
	lastErr      error     // the last failed API call, for AddNodes' error

	up chan struct{} // closed once the host has booted for the first time
}

// event is work due at a time, for one generation of a host.
type event struct {
	due  time.Time
	node string
	kind taskKind
	gen  uint64
	seq  uint64
}

// task is an event that is due, with what the worker needs to know.
type task struct {
	event
	spec         *NodeSpec
	index        int
	bootID       string
	registered   bool
	leaseCreated bool
	readySince   time.Time // zero: Ready becomes True now
}

// pendingBoot is a boot to be put on the queue at the next schedule, delay after that moment. Boots are
// queued in two steps because power changes arrive from hooks that must not read the clock.
type pendingBoot struct {
	node  string
	gen   uint64
	delay time.Duration
}

// fleet is the simulator's memory: every host and the queue of work due. It does no I/O and reads no
// clock (callers pass now), so its decisions are plain functions of what happened; the Simulator puts
// it behind a mutex.
type fleet struct {
	timing  timing
	jitter  func(max time.Duration) time.Duration // a duration in (0, max]
	hosts   map[string]*host
	added   int
	queue   eventQueue
	pending []pendingBoot
}

func newFleet(t timing, jitter func(time.Duration) time.Duration) *fleet {
	return &fleet{timing: t, jitter: jitter, hosts: map[string]*host{}}
}

// add starts simulating a host. A powered, healthy host boots at once (its kubelet was running before
// the simulator knew it): the Node is registered by that boot. A host added powered off is registered
// by its first boot.
func (f *fleet) add(spec *NodeSpec, powered bool) (*host, error) {
	if _, ok := f.hosts[spec.Name]; ok {
		return nil, fmt.Errorf("node %q is simulated already", spec.Name)
	}
	f.added++
	h := &host{spec: spec, index: f.added, state: StateOff, up: make(chan struct{})}
	f.hosts[spec.Name] = h
	if powered {
		h.powered = true
		f.startBoot(h, 0)
	}
	return h, nil
}

// remove stops simulating a host; its queued work is dropped.
func (f *fleet) remove(name string) {
	delete(f.hosts, name)
}

// setPower applies a change of a host's power. It reports false for an unknown host.
func (f *fleet) setPower(name string, on bool) bool {
	h, ok := f.hosts[name]
	if !ok {
		return false
	}
	switch {
	case on && !h.powered:
		h.powered = true
		switch h.fault {
		case FaultPersistent:
			f.transition(h, StateBroken)
		case FaultTransient:
			f.transition(h, StateHung)
		default:
			f.startBoot(h, f.timing.bootDelay)
		}
	case !on && h.powered:
		h.powered = false
		if h.fault == FaultTransient {
			h.fault = FaultNone // a power cycle cures a hung kubelet
		}
		f.transition(h, StateOff)
	}
	return true
}

// inject gives a host a fault.
func (f *fleet) inject(name string, fault Fault) error {
	h, ok := f.hosts[name]
	if !ok {
		return fmt.Errorf("%q: %w", name, ErrUnknownNode)
	}
	switch fault {
	case FaultNone:
		return f.clear(name)
	case FaultTransient:
		h.fault = fault
		if h.state == StateRunning || h.state == StateBooting {
			f.transition(h, StateHung)
		}
	case FaultPersistent:
		h.fault = fault
		if h.powered {
			f.transition(h, StateBroken)
		}
	default:
		return fmt.Errorf("%q: %w", fault, ErrUnknownFault)
	}
	return nil
}

// clear heals a host: a hung kubelet resumes at once, a broken host boots.
func (f *fleet) clear(name string) error {
	h, ok := f.hosts[name]
	if !ok {
		return fmt.Errorf("%q: %w", name, ErrUnknownNode)
	}
	h.fault = FaultNone
	switch h.state {
	case StateHung:
		f.resume(h)
	case StateBroken:
		f.startBoot(h, f.timing.bootDelay)
	}
	return nil
}

// transition moves a host to a state and drops its queued work.
func (f *fleet) transition(h *host, s State) {
	h.state = s
	h.gen++
}

// startBoot moves a host to Booting with a new boot ID; its boot is queued delay after the next schedule.
func (f *fleet) startBoot(h *host, delay time.Duration) {
	f.transition(h, StateBooting)
	h.boots++
	f.pending = append(f.pending, pendingBoot{node: h.spec.Name, gen: h.gen, delay: delay})
}

// resume restarts a hung kubelet without a reboot: it posts its status at once, as a boot does.
func (f *fleet) resume(h *host) {
	f.transition(h, StateBooting)
	f.pending = append(f.pending, pendingBoot{node: h.spec.Name, gen: h.gen})
}

// schedule queues the boots that power changes asked for, counting their delay from now.
func (f *fleet) schedule(now time.Time) {
	for _, p := range f.pending {
		if h, ok := f.hosts[p.node]; ok && h.gen == p.gen {
			f.push(h, taskBoot, now.Add(p.delay))
		}
	}
	f.pending = f.pending[:0]
}

// push queues a kind of work for a host, replacing any chain of that kind.
func (f *fleet) push(h *host, kind taskKind, due time.Time) {
	h.seq[kind]++
	if kind == taskStatus {
		h.statusDue = due
	}
	heap.Push(&f.queue, event{due: due, node: h.spec.Name, kind: kind, gen: h.gen, seq: h.seq[kind]})
}

// current reports whether an event (or the task made of it) is still wanted.
func (f *fleet) current(e event) (*host, bool) {
	h, ok := f.hosts[e.node]
	if !ok || h.gen != e.gen || h.seq[e.kind] != e.seq {
		return nil, false
	}
	return h, true
}

// next is when the earliest queued event is due; false when nothing is queued or pending.
func (f *fleet) next() (time.Time, bool) {
	if len(f.pending) > 0 {
		return time.Time{}, true
	}
	if len(f.queue) == 0 {
		return time.Time{}, false
	}
	return f.queue[0].due, true
}

// pop takes the work due at now.
func (f *fleet) pop(now time.Time) []task {
	var tasks []task
	for len(f.queue) > 0 && !f.queue[0].due.After(now) {
		e := heap.Pop(&f.queue).(event)
		h, ok := f.current(e)
		if !ok {
			continue
		}
		t := task{event: e, spec: h.spec, index: h.index, bootID: bootID(h), registered: h.registered, leaseCreated: h.leaseCreated}
		if e.kind == taskStatus && h.state == StateRunning {
			t.readySince = h.readySince
		}
		tasks = append(tasks, t)
	}
	return tasks
}

// done records the outcome of a task finished at now (the time the worker stamped on what it wrote) and
// queues what follows. It reports whether the task completed a boot.
func (f *fleet) done(t task, now time.Time, err error) (booted bool) {
	h, ok := f.current(t.event)
	if !ok {
		return false
	}
	if err != nil {
		h.lastErr = err
		if errors.Is(err, errNodeGone) {
			// The kubelet carries on, unregistered, until its host boots again.
			h.registered, h.leaseCreated = false, false
			return false
		}
		f.push(h, t.kind, now.Add(f.timing.retryInterval))
		return false
	}
	switch t.kind {
	case taskBoot:
		h.state = StateRunning // same generation: the queued work stays valid
		h.registered, h.leaseCreated = true, true
		h.readySince, h.lastStatus = now, now
		// Spread the fleet's heartbeats over their intervals rather than in the rhythm of its boots.
		f.push(h, taskLease, now.Add(f.jitter(f.timing.leaseInterval)))
		f.push(h, taskStatus, now.Add(f.jitter(f.timing.statusInterval)))
		select {
		case <-h.up:
		default:
			close(h.up)
		}
		return true
	case taskLease:
		h.leaseCreated = true
		f.push(h, taskLease, now.Add(f.timing.leaseInterval))
	case taskStatus:
		if t.readySince.IsZero() {
			h.readySince = now
		}
		h.lastStatus = now
		f.push(h, taskStatus, now.Add(f.timing.statusInterval))
	}
	return false
}

// repair has a running host post its status soon, as a kubelet does when the Node it reads back says
// something other than what it last posted (the node lifecycle controller marked it Unknown while it was
// alive): at once, or one lease interval after its last post if that was more recent (a kubelet looks
// every nodeStatusUpdateFrequency). It reports whether it moved the next post earlier.
func (f *fleet) repair(name string, now time.Time) bool {
	h, ok := f.hosts[name]
	if !ok || h.state != StateRunning || !h.registered {
		return false
	}
	due := h.lastStatus.Add(f.timing.leaseInterval)
	if due.Before(now) {
		due = now
	}
	if !h.statusDue.After(due) {
		return false // a post is coming soon enough
	}
	h.readySince = time.Time{} // the post makes Ready True again: a transition
	f.push(h, taskStatus, due)
	return true
}

// heartbeating reports whether a host's kubelet is up and registered (it runs its pods).
func (f *fleet) heartbeating(name string) bool {
	h, ok := f.hosts[name]
	return ok && h.state == StateRunning && h.registered
}

// bootID names a host's current boot, as /proc/sys/kernel/random/boot_id would.
func bootID(h *host) string {
	return fmt.Sprintf("%s-boot-%d", h.spec.Name, h.boots)
}

// eventQueue is a min-heap of events by due time.
type eventQueue []event

func (q eventQueue) Len() int           { return len(q) }
func (q eventQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q eventQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)        { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
