package redfishmock

import (
	"fmt"
	"time"
)

// PowerState is a ComputerSystem's PowerState, spelled as Redfish does.
type PowerState string

// The power states a mock system goes through.
const (
	PowerOn     PowerState = "On"
	PowerOff    PowerState = "Off"
	PoweringOn  PowerState = "PoweringOn"
	PoweringOff PowerState = "PoweringOff"
)

// allResetTypes are the ResetType values a mock system knows.
var allResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle", "Nmi"}

// system is one simulated ComputerSystem. A transition is lazy: it is a target and a deadline, settled by
// whoever looks first after the deadline (a read, or the timer that tells the hooks).
type system struct {
	id                 string
	username, password string // the system's own account; empty means the service's

	power  PowerState // the settled state: On or Off
	target PowerState // On or Off while a transition runs, "" otherwise
	doneAt time.Time  // when the running transition ends

	faults Faults
	resets []string // the ResetType of every accepted reset

	host   Host
	hostAt time.Time     // when the host acts on its own (after an NMI); zero when it will not
	act    hostAction    // what it does then
	actFor time.Duration // the power delay of what it does
}

// Host is how a mock system's host, its operating system, answers the resets a BMC only passes on to it:
// a graceful shutdown and a diagnostic interrupt (Nmi). The zero value is a host that shuts down when
// asked and carries on after an NMI as if nothing happened.
type Host struct {
	// IgnoreGracefulShutdown makes the host ignore GracefulShutdown and GracefulRestart (a hung operating
	// system): the reset is accepted (204) and recorded, and the power stays as it was.
	IgnoreGracefulShutdown bool
	// PowerOffAfterNMI, when positive, makes the host power itself off this long after an Nmi reset, as
	// one that writes a kernel dump (kdump) and then powers off does. The power-off takes the mock's
	// power delay, like any other.
	PowerOffAfterNMI time.Duration
	// RebootAfterNMI, when positive, makes the host restart this long after an Nmi reset (a kernel dump,
	// then a reboot): its power is cut and comes back, taking the mock's power delay (PoweringOn
	// meanwhile). At most one of PowerOffAfterNMI and RebootAfterNMI may be set.
	RebootAfterNMI time.Duration
}

func (h Host) validate() error {
	if h.PowerOffAfterNMI < 0 || h.RebootAfterNMI < 0 {
		return fmt.Errorf("host: the waits after an NMI must not be negative")
	}
	if h.PowerOffAfterNMI > 0 && h.RebootAfterNMI > 0 {
		return fmt.Errorf("host: powerOffAfterNMI and rebootAfterNMI exclude each other")
	}
	return nil
}

// hostAction is what a host does on its own once its time comes.
type hostAction string

const (
	hostPowersOff hostAction = "power off"
	hostReboots   hostAction = "reboot"
)

// state is the PowerState the system reports.
func (s *system) state() PowerState {
	switch s.target {
	case PowerOn:
		return PoweringOn
	case PowerOff:
		return PoweringOff
	}
	return s.power
}

// change is one step of a system's power, for the OnPowerChange hooks and the event streams.
type change struct {
	id       string
	from, to PowerState
	at       time.Time // when it happened, on the Mock's clock
}

// timerReq asks for a transition to be settled at its deadline, so the hooks hear of it even if nobody
// reads the system.
type timerReq struct {
	id    string
	after time.Duration
	at    time.Time
}

// effects are what a locked section leaves for after the unlock: hooks to call and timers to start. They
// run outside the Mock's mutex because a fake clock calls timer functions while holding its own lock.
type effects struct {
	changes []change
	timers  []timerReq
}

// settle ends s's transition if its deadline has passed at now, after starting what its host does on its
// own (see Host) if that time has come: at that time, so that what it starts ends when it would have.
func (e *effects) settle(s *system, now time.Time) {
	if !s.hostAt.IsZero() && !now.Before(s.hostAt) {
		e.settleTransition(s, s.hostAt)
		at, act, delay := s.hostAt, s.act, s.actFor
		s.hostAt, s.act = time.Time{}, ""
		timers := len(e.timers)
		switch act {
		case hostPowersOff:
			e.moveTo(s, PowerOff, delay, at)
		case hostReboots:
			e.cut(s, at)
			e.moveTo(s, PowerOn, delay, at)
		}
		// hostActs started the timer of this transition already: a timer may not start another (see
		// settleAt).
		e.timers = e.timers[:timers]
	}
	e.settleTransition(s, now)
}

// settleTransition ends s's transition if its deadline has passed at now.
func (e *effects) settleTransition(s *system, now time.Time) {
	if s.target == "" || now.Before(s.doneAt) {
		return
	}
	from := s.state()
	s.power, s.target = s.target, ""
	e.changes = append(e.changes, change{s.id, from, s.power, now})
}

// hostActs makes s's host do act on its own after wait (see Host), unless a power change comes first.
// The timers of both the act and the power transition it starts are started now: the first one's
// function runs inside the clock, where no timer can be started.
func (e *effects) hostActs(s *system, act hostAction, wait, delay time.Duration, now time.Time) {
	s.hostAt, s.act, s.actFor = now.Add(wait), act, delay
	e.timers = append(e.timers, timerReq{s.id, wait, s.hostAt})
	if delay > 0 {
		e.timers = append(e.timers, timerReq{s.id, wait + delay, s.hostAt.Add(delay)})
	}
}

// moveTo starts moving s towards to (On or Off), taking delay.
func (e *effects) moveTo(s *system, to PowerState, delay time.Duration, now time.Time) {
	from := s.state()
	if from == to || s.target == to {
		return // there already, or on the way
	}
	if delay <= 0 {
		s.power, s.target = to, ""
	} else {
		s.target, s.doneAt = to, now.Add(delay)
		e.timers = append(e.timers, timerReq{s.id, delay, s.doneAt})
	}
	e.changes = append(e.changes, change{s.id, from, s.state(), now})
}

// cut drops s's power at once (the first half of a restart).
func (e *effects) cut(s *system, now time.Time) {
	from := s.state()
	if from == PowerOff {
		return
	}
	s.power, s.target = PowerOff, ""
	e.changes = append(e.changes, change{s.id, from, PowerOff, now})
}

// reset applies a Reset action's type to s (nothing when stuck) and reports whether the type is known.
func (e *effects) reset(s *system, resetType string, delay time.Duration, now time.Time, stuck bool) (known bool) {
	var apply func()
	ignored := s.host.IgnoreGracefulShutdown
	switch resetType {
	case "On":
		apply = func() { e.moveTo(s, PowerOn, delay, now) }
	case "ForceOff":
		apply = func() { e.moveTo(s, PowerOff, delay, now) }
	case "GracefulShutdown":
		apply = func() {
			if !ignored {
				e.moveTo(s, PowerOff, delay, now)
			}
		}
	case "ForceRestart", "PowerCycle":
		apply = func() { e.cut(s, now); e.moveTo(s, PowerOn, delay, now) }
	case "GracefulRestart":
		apply = func() {
			if !ignored {
				e.cut(s, now)
				e.moveTo(s, PowerOn, delay, now)
			}
		}
	case "Nmi":
		apply = func() {
			switch {
			case s.state() != PowerOn || !s.hostAt.IsZero():
				// Off, on its way, or already dumping: an NMI changes nothing.
			case s.host.PowerOffAfterNMI > 0:
				e.hostActs(s, hostPowersOff, s.host.PowerOffAfterNMI, delay, now)
			case s.host.RebootAfterNMI > 0:
				e.hostActs(s, hostReboots, s.host.RebootAfterNMI, delay, now)
			}
		}
	default:
		return false
	}
	s.resets = append(s.resets, resetType)
	if stuck {
		return true
	}
	if powersOff(resetType) && (!ignored || !graceful(resetType)) {
		s.hostAt, s.act = time.Time{}, "" // the power goes: whatever the host was doing ends
	}
	apply()
	return true
}

// graceful reports whether a reset type only asks the host's operating system.
func graceful(resetType string) bool {
	return resetType == "GracefulShutdown" || resetType == "GracefulRestart"
}

// powersOff reports whether a reset type takes the power away, even for a moment.
func powersOff(resetType string) bool {
	switch resetType {
	case "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle":
		return true
	}
	return false
}
