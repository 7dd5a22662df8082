package redfishmock

import "time"

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
}

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

// change is one step of a system's power, for the OnPowerChange hooks.
type change struct {
	id       string
	from, to PowerState
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

// settle ends s's transition if its deadline has passed at now.
func (e *effects) settle(s *system, now time.Time) {
	if s.target == "" || now.Before(s.doneAt) {
		return
	}
	from := s.state()
	s.power, s.target = s.target, ""
	e.changes = append(e.changes, change{s.id, from, s.power})
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
	e.changes = append(e.changes, change{s.id, from, s.state()})
}

// cut drops s's power at once (the first half of a restart).
func (e *effects) cut(s *system) {
	from := s.state()
	if from == PowerOff {
		return
	}
	s.power, s.target = PowerOff, ""
	e.changes = append(e.changes, change{s.id, from, PowerOff})
}

// reset applies a Reset action's type to s (nothing when stuck) and reports whether the type is known.
func (e *effects) reset(s *system, resetType string, delay time.Duration, now time.Time, stuck bool) (known bool) {
	var apply func()
	switch resetType {
	case "On":
		apply = func() { e.moveTo(s, PowerOn, delay, now) }
	case "ForceOff", "GracefulShutdown":
		apply = func() { e.moveTo(s, PowerOff, delay, now) }
	case "ForceRestart", "GracefulRestart", "PowerCycle":
		apply = func() { e.cut(s); e.moveTo(s, PowerOn, delay, now) }
	case "Nmi":
		apply = func() {}
	default:
		return false
	}
	s.resets = append(s.resets, resetType)
	if !stuck {
		apply()
	}
	return true
}

// powersOff reports whether a reset type takes the power away, even for a moment.
func powersOff(resetType string) bool {
	switch resetType {
	case "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle":
		return true
	}
	return false
}
