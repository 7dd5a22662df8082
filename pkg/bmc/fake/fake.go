package fake

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// Call is one call a Driver received.
type Call struct {
	// Operation is bmc.OperationPowerState, bmc.OperationPowerOn, bmc.OperationPowerOff,
	// bmc.OperationDiagnose, bmc.OperationWatchPower or bmc.OperationClose.
	Operation string
	// Force is PowerOff's argument (false for the other operations): false is a graceful shutdown.
	Force bool
}

// Driver is a fake bmc.Driver: one host behind its BMC.
type Driver struct {
	mu          sync.Mutex
	state       bmc.PowerState
	pending     *transition
	delay       int
	script      []bmc.PowerState // what the next PowerState reads report, one each (see AfterDiagnose)
	afterNMI    []bmc.PowerState
	ignoreSoft  bool
	calls       []Call
	next        map[string][]error
	always      map[string]error
	credentials bmc.Credentials
	// noStream makes WatchPower unsupported; streams are the event streams open (see WatchPower).
	noStream bool
	streams  map[*stream]struct{}
}

// stream is one open event stream: events coalesce (one pending change is as good as several, the
// reader reads the state anyway), drop ends it with an error.
type stream struct {
	events chan struct{}
	drop   chan error
}

// transition is a power change in progress: the host reaches to after readsLeft more PowerState reads.
type transition struct {
	to        bmc.PowerState
	readsLeft int
}

var (
	_ bmc.Driver       = (*Driver)(nil)
	_ bmc.Diagnoser    = (*Driver)(nil)
	_ bmc.PowerWatcher = (*Driver)(nil)
)

// New returns a Driver for a host in the given power state.
func New(state bmc.PowerState) *Driver {
	return &Driver{state: state, next: map[string][]error{}, always: map[string]error{}, streams: map[*stream]struct{}{}}
}

// SetPowerState sets the host's power state, cancelling any transition in progress, and tells every
// open event stream (see WatchPower), as a BMC tells of a power change.
func (d *Driver) SetPowerState(state bmc.PowerState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state, d.pending, d.script = state, nil, nil
	d.notifyLocked()
}

// SetPowerStateQuietly sets the host's power state as SetPowerState does, but tells no event stream: a
// change the BMC's stream missed, which only a poll sees.
func (d *Driver) SetPowerStateQuietly(state bmc.PowerState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state, d.pending, d.script = state, nil, nil
}

// Notify sends an event on every open event stream without changing anything (an event about something
// else of the system, or a BMC that tells of changes that did not happen).
func (d *Driver) Notify() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.notifyLocked()
}

// SetWatchUnsupported makes WatchPower fail at once with an error of kind bmc.ErrUnsupported (true), as a
// BMC without an event stream does, or open streams again (false, the default). Streams already open
// stay open.
func (d *Driver) SetWatchUnsupported(unsupported bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.noStream = unsupported
}

// DropStreams ends every open event stream: WatchPower returns err (one of kind bmc.ErrUnreachable, say,
// as for a connection the BMC closed). It returns how many it ended.
func (d *Driver) DropStreams(err error) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.streams)
	for s := range d.streams {
		s.drop <- err
		delete(d.streams, s)
	}
	return n
}

// OpenStreams returns how many event streams are open now.
func (d *Driver) OpenStreams() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.streams)
}

// WatchPower holds an event stream open until ctx ends (nil), DropStreams ends it (its error), or fails at
// once: with a queued error (FailNext(bmc.OperationWatchPower, ...)) or, after SetWatchUnsupported(true),
// bmc.ErrUnsupported. Each power change made through SetPowerState, PowerOn or PowerOff, and each Notify,
// calls changed once, from this goroutine, without the driver's lock held; changes that come while changed
// runs coalesce into one more call.
func (d *Driver) WatchPower(ctx context.Context, changed func()) error {
	d.mu.Lock()
	if err := d.begin(ctx, Call{Operation: bmc.OperationWatchPower}); err != nil {
		d.mu.Unlock()
		return err
	}
	if d.noStream {
		d.mu.Unlock()
		return &bmc.Error{Driver: "fake", Operation: bmc.OperationWatchPower, Kind: bmc.ErrUnsupported,
			Err: errors.New("the BMC offers no event stream")}
	}
	s := &stream{events: make(chan struct{}, 1), drop: make(chan error, 1)}
	d.streams[s] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.streams, s)
		d.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-s.drop:
			return err
		case <-s.events:
			changed()
		}
	}
}

// notifyLocked tells every open stream of a change. d.mu must be held.
func (d *Driver) notifyLocked() {
	for s := range d.streams {
		select {
		case s.events <- struct{}{}:
		default: // one is pending already
		}
	}
}

// SetTransitionDelay makes later PowerOn and PowerOff calls take effect only after n PowerState reads:
// the next n reads still report the old state, the one after reports the new state. Zero (the default)
// applies power changes at once.
func (d *Driver) SetTransitionDelay(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delay = n
}

// AfterDiagnose sets what the host does after a diagnostic interrupt: the PowerState reads that follow
// one report the given states, one each, and the last of them stays (a kernel dump that ends powered
// off: On, On, Off; a reboot seen by the BMC: On, Unknown, On). With none (the default) the host does
// nothing.
func (d *Driver) AfterDiagnose(states ...bmc.PowerState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.afterNMI = slices.Clone(states)
}

// IgnoreGracefulShutdown makes the host ignore (true) or obey (false, the default) a graceful shutdown:
// PowerOff without force is accepted and, ignored, changes nothing.
func (d *Driver) IgnoreGracefulShutdown(ignore bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ignoreSoft = ignore
}

// FailNext queues errors for operation: each call to it returns the next queued error, and has no effect,
// until the queue is empty.
func (d *Driver) FailNext(operation string, errs ...error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next[operation] = append(d.next[operation], errs...)
}

// FailAlways makes every call to operation return err, and have no effect, once the queued errors are
// used up. A nil err clears it.
func (d *Driver) FailAlways(operation string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.always, operation)
		return
	}
	d.always[operation] = err
}

// Calls returns the calls received so far, oldest first.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

// CallCount returns how many times operation was called.
func (d *Driver) CallCount(operation string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.calls {
		if c.Operation == operation {
			n++
		}
	}
	return n
}

// Credentials returns the credentials the driver was last built with by a Factory.
func (d *Driver) Credentials() bmc.Credentials {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.credentials
}

// PowerState reports the host's power state, completing a slow transition when its reads are used up.
func (d *Driver) PowerState(ctx context.Context) (bmc.PowerState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.begin(ctx, Call{Operation: bmc.OperationPowerState}); err != nil {
		return "", err
	}
	if len(d.script) > 0 {
		d.state, d.script = d.script[0], d.script[1:]
		return d.state, nil
	}
	if d.pending != nil {
		if d.pending.readsLeft > 0 {
			d.pending.readsLeft--
		} else {
			d.state, d.pending = d.pending.to, nil
		}
	}
	return d.state, nil
}

// PowerOn powers the host on (see SetTransitionDelay).
func (d *Driver) PowerOn(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.begin(ctx, Call{Operation: bmc.OperationPowerOn}); err != nil {
		return err
	}
	d.script = nil
	d.powerTo(bmc.PowerStateOn)
	return nil
}

// PowerOff powers the host off (see SetTransitionDelay), forced or gracefully alike, unless the host
// ignores a graceful shutdown (see IgnoreGracefulShutdown). A forced one ends what the host was doing
// on its own (see AfterDiagnose).
func (d *Driver) PowerOff(ctx context.Context, force bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.begin(ctx, Call{Operation: bmc.OperationPowerOff, Force: force}); err != nil {
		return err
	}
	if !force && d.ignoreSoft {
		return nil
	}
	d.script = nil
	d.powerTo(bmc.PowerStateOff)
	return nil
}

// Diagnose records the diagnostic interrupt; the host then does what AfterDiagnose says, if it is on.
func (d *Driver) Diagnose(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.begin(ctx, Call{Operation: bmc.OperationDiagnose}); err != nil {
		return err
	}
	if d.state == bmc.PowerStateOn && d.pending == nil {
		d.script = slices.Clone(d.afterNMI)
	}
	return nil
}

// Close records the call. The fake stays usable afterwards, as a real host outlives one connection.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.begin(ctx, Call{Operation: bmc.OperationClose})
}

// begin records c and returns the error the call must fail with, if any. d.mu must be held.
func (d *Driver) begin(ctx context.Context, c Call) error {
	d.calls = append(d.calls, c)
	if err := ctx.Err(); err != nil {
		return &bmc.Error{Driver: "fake", Operation: c.Operation, Kind: bmc.ErrTimeout, Err: err}
	}
	if q := d.next[c.Operation]; len(q) > 0 {
		d.next[c.Operation] = q[1:]
		return q[0]
	}
	return d.always[c.Operation]
}

// powerTo starts (or completes at once) a change to target. d.mu must be held.
func (d *Driver) powerTo(target bmc.PowerState) {
	switch {
	case d.pending != nil && d.pending.to == target:
		// Already on its way: asking again does not restart the wait.
	case d.state == target:
		d.pending = nil // a change the other way, if any, is cancelled
	case d.delay == 0:
		d.state, d.pending = target, nil
		d.notifyLocked()
	default:
		d.pending = &transition{to: target, readsLeft: d.delay}
	}
}
