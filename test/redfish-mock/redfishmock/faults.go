package redfishmock

import (
	"encoding/json"
	"fmt"
	"time"
)

// Faults are the misbehaviours a Mock can be told to show, for one system or for the whole service. The
// zero value is a healthy BMC.
type Faults struct {
	// Latency delays every answer. The wait runs on the Mock's clock and ends early when the client gives up.
	Latency time.Duration
	// Status, when non-zero, answers requests with this HTTP status and a Redfish error body.
	Status int
	// Drop closes the connection without answering.
	Drop bool
	// Count limits Status and Drop to the next Count requests they hit; zero means until cleared.
	Count int
	// StuckPower accepts resets (204) but leaves the power state as it was.
	StuckPower bool
	// RefusePowerOff answers the resets that would power the system off with 500.
	RefusePowerOff bool
	// RejectAuth answers every authenticated request, and every login, with 401, as a BMC whose account
	// was changed behind our back would.
	RejectAuth bool
}

// faultsJSON is how Faults travel over the control endpoint: the latency is a Go duration string ("1.5s").
type faultsJSON struct {
	Latency        string `json:"latency,omitempty"`
	Status         int    `json:"status,omitempty"`
	Drop           bool   `json:"drop,omitempty"`
	Count          int    `json:"count,omitempty"`
	StuckPower     bool   `json:"stuckPower,omitempty"`
	RefusePowerOff bool   `json:"refusePowerOff,omitempty"`
	RejectAuth     bool   `json:"rejectAuth,omitempty"`
}

// MarshalJSON writes the control endpoint's form.
func (f Faults) MarshalJSON() ([]byte, error) {
	j := faultsJSON{Status: f.Status, Drop: f.Drop, Count: f.Count, StuckPower: f.StuckPower,
		RefusePowerOff: f.RefusePowerOff, RejectAuth: f.RejectAuth}
	if f.Latency > 0 {
		j.Latency = f.Latency.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the control endpoint's form.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var j faultsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*f = Faults{Status: j.Status, Drop: j.Drop, Count: j.Count, StuckPower: j.StuckPower,
		RefusePowerOff: j.RefusePowerOff, RejectAuth: j.RejectAuth}
	if j.Latency != "" {
		d, err := time.ParseDuration(j.Latency)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		f.Latency = d
	}
	return nil
}

// validate refuses faults that cannot be served.
func (f Faults) validate() error {
	if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
		return fmt.Errorf("status %d is not an HTTP error status (400-599)", f.Status)
	}
	if f.Latency < 0 || f.Count < 0 {
		return fmt.Errorf("latency and count must not be negative")
	}
	return nil
}

// hit reports whether a request is answered by Status or Drop, and counts it down.
func (f *Faults) hit() (status int, drop bool) {
	if f.Status == 0 && !f.Drop {
		return 0, false
	}
	status, drop = f.Status, f.Drop
	if f.Count > 0 {
		f.Count--
		if f.Count == 0 {
			f.Status, f.Drop = 0, false
		}
	}
	return status, drop
}

// hostJSON is how a Host travels over the control endpoint: the waits are Go duration strings ("5s").
type hostJSON struct {
	IgnoreGracefulShutdown bool   `json:"ignoreGracefulShutdown,omitempty"`
	PowerOffAfterNMI       string `json:"powerOffAfterNMI,omitempty"`
	RebootAfterNMI         string `json:"rebootAfterNMI,omitempty"`
}

// MarshalJSON writes the control endpoint's form.
func (h Host) MarshalJSON() ([]byte, error) {
	j := hostJSON{IgnoreGracefulShutdown: h.IgnoreGracefulShutdown}
	if h.PowerOffAfterNMI > 0 {
		j.PowerOffAfterNMI = h.PowerOffAfterNMI.String()
	}
	if h.RebootAfterNMI > 0 {
		j.RebootAfterNMI = h.RebootAfterNMI.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the control endpoint's form.
func (h *Host) UnmarshalJSON(b []byte) error {
	var j hostJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*h = Host{IgnoreGracefulShutdown: j.IgnoreGracefulShutdown}
	for _, d := range []struct {
		name string
		in   string
		out  *time.Duration
	}{{"powerOffAfterNMI", j.PowerOffAfterNMI, &h.PowerOffAfterNMI}, {"rebootAfterNMI", j.RebootAfterNMI, &h.RebootAfterNMI}} {
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		*d.out = v
	}
	return nil
}
