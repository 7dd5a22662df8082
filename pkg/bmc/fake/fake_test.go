package fake_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/fake"
)

const (
	on  = bmc.PowerStateOn
	off = bmc.PowerStateOff
)

// step is one call in a scenario: an operation and, for PowerState, the state it must report.
type step struct {
	op   string
	want bmc.PowerState
}

func read(want bmc.PowerState) step { return step{op: bmc.OperationPowerState, want: want} }

var (
	powerOn  = step{op: bmc.OperationPowerOn}
	powerOff = step{op: bmc.OperationPowerOff}
	diagnose = step{op: bmc.OperationDiagnose}
)

// run takes the steps, checking what each read reports.
func run(g Gomega, d *fake.Driver, steps []step) {
	ctx := context.Background()
	for i, s := range steps {
		switch s.op {
		case bmc.OperationPowerState:
			got, err := d.PowerState(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(s.want), "step %d", i)
		case bmc.OperationPowerOn:
			g.Expect(d.PowerOn(ctx)).To(Succeed())
		case bmc.OperationPowerOff:
			g.Expect(d.PowerOff(ctx, true)).To(Succeed())
		case bmc.OperationDiagnose:
			g.Expect(d.Diagnose(ctx)).To(Succeed())
		}
	}
}

func TestDriverPowerTransitions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial bmc.PowerState
		delay   int
		steps   []step
	}{
		{name: "off at once", initial: on, steps: []step{read(on), powerOff, read(off)}},
		{name: "on at once", initial: off, steps: []step{powerOn, read(on)}},
		{name: "power off is idempotent", initial: off, steps: []step{powerOff, read(off), powerOff, read(off)}},
		{name: "slow power off", initial: on, delay: 2, steps: []step{powerOff, read(on), read(on), read(off), read(off)}},
		{name: "slow power on", initial: off, delay: 1, steps: []step{powerOn, read(off), read(on)}},
		{name: "asking again does not restart the wait", initial: on, delay: 2, steps: []step{powerOff, read(on), powerOff, read(on), read(off)}},
		{name: "power on cancels a slow power off", initial: on, delay: 2, steps: []step{powerOff, read(on), powerOn, read(on), read(on), read(on)}},
		{name: "a full slow cycle", initial: on, delay: 1, steps: []step{powerOff, read(on), read(off), powerOn, read(off), read(on)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := fake.New(tc.initial)
			d.SetTransitionDelay(tc.delay)
			run(g, d, tc.steps)
			g.Expect(d.Calls()).To(HaveLen(len(tc.steps)))
		})
	}
}

func TestDriverQueuedErrors(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	d := fake.New(on)
	d.FailNext(bmc.OperationPowerOff, bmc.ErrUnreachable, bmc.ErrTimeout)

	g.Expect(d.PowerOff(ctx, true)).To(MatchError(bmc.ErrUnreachable))
	g.Expect(d.PowerOff(ctx, false)).To(MatchError(bmc.ErrTimeout))
	g.Expect(d.PowerState(ctx)).To(Equal(on), "a failed PowerOff must not change the power state")
	g.Expect(d.PowerOff(ctx, true)).To(Succeed())
	g.Expect(d.PowerState(ctx)).To(Equal(off))
	g.Expect(d.Calls()).To(Equal([]fake.Call{
		{Operation: bmc.OperationPowerOff, Force: true},
		{Operation: bmc.OperationPowerOff, Force: false},
		{Operation: bmc.OperationPowerState},
		{Operation: bmc.OperationPowerOff, Force: true},
		{Operation: bmc.OperationPowerState},
	}))
}

func TestDriverFailAlways(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	d := fake.New(on)
	d.FailNext(bmc.OperationPowerState, bmc.ErrTimeout)
	d.FailAlways(bmc.OperationPowerState, bmc.ErrAuthentication)

	_, err := d.PowerState(ctx)
	g.Expect(err).To(MatchError(bmc.ErrTimeout), "queued errors come first")
	for range 3 {
		_, err = d.PowerState(ctx)
		g.Expect(err).To(MatchError(bmc.ErrAuthentication))
	}
	d.FailAlways(bmc.OperationPowerState, nil)
	g.Expect(d.PowerState(ctx)).To(Equal(on))
	g.Expect(d.CallCount(bmc.OperationPowerState)).To(Equal(5))
}

func TestDriverHonoursCancelledContext(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := fake.New(on)
	err := d.PowerOff(ctx, true)
	g.Expect(err).To(MatchError(bmc.ErrTimeout))
	g.Expect(errors.Is(err, context.Canceled)).To(BeTrue())
	d.SetPowerState(on)
	g.Expect(d.PowerState(context.Background())).To(Equal(on))
}

func TestDriverIsSafeForConcurrentUse(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	d := fake.New(on)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if i%2 == 0 {
				_ = d.PowerOff(ctx, true)
			} else {
				_ = d.PowerOn(ctx)
			}
			_, _ = d.PowerState(ctx)
		})
	}
	wg.Wait()
	g.Expect(d.Calls()).To(HaveLen(100))
	g.Expect(d.CallCount(bmc.OperationPowerOff)).To(Equal(25))
}

func TestFactoryHandsOutOneDriverPerAddress(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	hosts := fake.NewFactory(on)
	registry := bmc.NewRegistry()
	g.Expect(registry.Register(bmc.DriverIPMI, hosts.New)).To(Succeed())
	g.Expect(registry.Register(bmc.DriverRedfish, hosts.New)).To(Succeed())
	creds := bmc.Credentials{Username: "admin", Password: "pw"}

	d, err := registry.New("10.0.0.1", creds, bmc.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.PowerOff(ctx, true)).To(Succeed())

	// Another spelling of the same address reaches the same host; another address, another host.
	g.Expect(hosts.Driver("ipmi://10.0.0.1:623").PowerState(ctx)).To(Equal(off))
	g.Expect(hosts.Driver("ipmi://10.0.0.1:623").Credentials()).To(Equal(creds))
	g.Expect(hosts.Driver("10.0.0.2").PowerState(ctx)).To(Equal(on))

	again, err := registry.New("ipmi:10.0.0.1", creds, bmc.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.PowerState(ctx)).To(Equal(off))

	hosts.SetNewError("redfish://10.0.0.3", bmc.ErrUnsupported)
	_, err = registry.New("redfish://10.0.0.3:443", creds, bmc.Options{})
	g.Expect(err).To(MatchError(bmc.ErrUnsupported))
	hosts.SetNewError("redfish://10.0.0.3", nil)
	_, err = registry.New("redfish://10.0.0.3:443", creds, bmc.Options{})
	g.Expect(err).NotTo(HaveOccurred())
}

// After a diagnostic interrupt the host does what AfterDiagnose scripted, one state per read, and stays
// in the last; a forced power-off, a power-on or a hand cuts the script short. A host that is off ignores
// the interrupt.
func TestDriverAfterDiagnose(t *testing.T) {
	unknown := bmc.PowerStateUnknown
	for _, tc := range []struct {
		name    string
		initial bmc.PowerState
		script  []bmc.PowerState
		steps   []step
	}{
		{name: "nothing by default", initial: on, steps: []step{diagnose, read(on), read(on)}},
		{name: "a dump, then off", initial: on, script: []bmc.PowerState{on, on, off},
			steps: []step{read(on), diagnose, read(on), read(on), read(off), read(off)}},
		{name: "a dump, then a reboot", initial: on, script: []bmc.PowerState{on, unknown, on},
			steps: []step{diagnose, read(on), read(unknown), read(on), read(on)}},
		{name: "a forced power-off ends the dump", initial: on, script: []bmc.PowerState{on, on, on},
			steps: []step{diagnose, read(on), powerOff, read(off), read(off)}},
		{name: "a host that is off ignores it", initial: off, script: []bmc.PowerState{on},
			steps: []step{diagnose, read(off)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := fake.New(tc.initial)
			d.AfterDiagnose(tc.script...)
			run(g, d, tc.steps)
			g.Expect(d.CallCount(bmc.OperationDiagnose)).To(Equal(1))
		})
	}
}

func TestDriverGracefulShutdown(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	d := fake.New(on)
	d.IgnoreGracefulShutdown(true)
	g.Expect(d.PowerOff(ctx, false)).To(Succeed(), "accepted")
	g.Expect(d.PowerState(ctx)).To(Equal(on), "and ignored")
	g.Expect(d.PowerOff(ctx, true)).To(Succeed())
	g.Expect(d.PowerState(ctx)).To(Equal(off), "forced off")

	d.SetPowerState(on)
	d.IgnoreGracefulShutdown(false)
	g.Expect(d.PowerOff(ctx, false)).To(Succeed())
	g.Expect(d.PowerState(ctx)).To(Equal(off), "obeyed")
	g.Expect(d.Calls()).To(ContainElements(
		fake.Call{Operation: bmc.OperationPowerOff, Force: false}, fake.Call{Operation: bmc.OperationPowerOff, Force: true}))
}

// The event stream: power changes and Notify reach an open stream, DropStreams ends it with its error,
// a queued error or an unsupported BMC fails the open, and the end of ctx closes it with nil.
func TestWatchPower(t *testing.T) {
	g := NewWithT(t)
	d := fake.New(on)
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan struct{}, 8)
	done := make(chan error, 1)
	go func() { done <- bmc.WatchPower(ctx, d, func() { changes <- struct{}{} }) }()
	g.Eventually(d.OpenStreams).Should(Equal(1))

	d.SetPowerState(off)
	g.Eventually(changes).Should(Receive())
	d.Notify()
	g.Eventually(changes).Should(Receive())
	d.SetPowerStateQuietly(on)
	g.Consistently(changes, "50ms").ShouldNot(Receive(), "a quiet change reaches no stream")
	g.Expect(d.PowerOff(ctx, true)).To(Succeed())
	g.Eventually(changes).Should(Receive(), "a power-off the BMC carries out is an event too")

	dropped := &bmc.Error{Driver: "fake", Operation: bmc.OperationWatchPower, Kind: bmc.ErrUnreachable}
	g.Expect(d.DropStreams(dropped)).To(Equal(1))
	g.Eventually(done).Should(Receive(MatchError(bmc.ErrUnreachable)))
	g.Expect(d.OpenStreams()).To(Equal(0))

	d.FailNext(bmc.OperationWatchPower, dropped)
	g.Expect(bmc.WatchPower(ctx, d, func() {})).To(MatchError(bmc.ErrUnreachable))
	d.SetWatchUnsupported(true)
	g.Expect(bmc.WatchPower(ctx, d, func() {})).To(MatchError(bmc.ErrUnsupported))
	d.SetWatchUnsupported(false)

	go func() { done <- bmc.WatchPower(ctx, d, func() {}) }()
	g.Eventually(d.OpenStreams).Should(Equal(1))
	cancel()
	g.Eventually(done).Should(Receive(BeNil()))
	g.Expect(d.OpenStreams()).To(Equal(0))
	g.Expect(d.CallCount(bmc.OperationWatchPower)).To(Equal(4))
}
