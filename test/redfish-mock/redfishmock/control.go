package redfishmock

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// The control endpoint drives a running mock over HTTP (for the demo, shell scripts and other processes),
// without authentication, and is not recorded:
//
//	GET    /mock/systems               every system: id, powerState, faults
//	GET    /mock/systems/{id}          one system
//	POST   /mock/systems/{id}/faults   replace its faults: {"latency":"2s","status":503,"count":3,"drop":true,
//	                                   "stuckPower":true,"refusePowerOff":true,"rejectAuth":true}
//	DELETE /mock/systems/{id}/faults   heal it
//	POST   /mock/systems/{id}/power    {"powerState":"On"|"Off"}: set at once, as if by hand
//	POST   /mock/systems/{id}/host     replace how its host behaves (see Host): {"ignoreGracefulShutdown":true,
//	                                   "powerOffAfterNMI":"30s"} or {"rebootAfterNMI":"30s"}
//	POST   /mock/faults                replace the faults of the whole service (same body)
//	DELETE /mock/faults                heal the service and every system
//	DELETE /mock/sessions              expire every session
//	GET    /mock/requests              the request record; DELETE empties it
//	GET    /mock/eventstreams          {"open":N,"slow":N}: event streams open, and dropped for a slow reader
//	DELETE /mock/eventstreams          close every open event stream's connection mid-stream
//	POST   /mock/eventservice          {"state":"Enabled"|"Disabled"|"NoSSE"|"Absent"}: what the EventService
//	                                   offers (see EventService); leaving Enabled drops the open streams
func (m *Mock) controlRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /mock/systems", func(w http.ResponseWriter, _ *http.Request) {
		out := []systemStatus{}
		for _, id := range m.SystemIDs() {
			if st, err := m.status(id); err == nil {
				out = append(out, st)
			}
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /mock/systems/{id}", func(w http.ResponseWriter, r *http.Request) {
		st, err := m.status(r.PathValue("id"))
		reply(w, st, err)
	})
	mux.HandleFunc("POST /mock/systems/{id}/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		if !decode(w, r, &f) {
			return
		}
		reply(w, nil, m.SetFaults(r.PathValue("id"), f))
	})
	mux.HandleFunc("DELETE /mock/systems/{id}/faults", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, m.SetFaults(r.PathValue("id"), Faults{}))
	})
	mux.HandleFunc("POST /mock/systems/{id}/power", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			PowerState PowerState `json:"powerState"`
		}
		if !decode(w, r, &body) {
			return
		}
		reply(w, nil, m.SetPowerState(r.PathValue("id"), body.PowerState))
	})
	mux.HandleFunc("POST /mock/systems/{id}/host", func(w http.ResponseWriter, r *http.Request) {
		var h Host
		if !decode(w, r, &h) {
			return
		}
		reply(w, nil, m.SetHost(r.PathValue("id"), h))
	})
	mux.HandleFunc("POST /mock/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		if !decode(w, r, &f) {
			return
		}
		reply(w, nil, m.SetGlobalFaults(f))
	})
	mux.HandleFunc("DELETE /mock/faults", func(w http.ResponseWriter, _ *http.Request) {
		m.ClearFaults()
		reply(w, nil, nil)
	})
	mux.HandleFunc("DELETE /mock/sessions", func(w http.ResponseWriter, _ *http.Request) {
		m.ExpireSessions()
		reply(w, nil, nil)
	})
	mux.HandleFunc("GET /mock/requests", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, m.Requests())
	})
	mux.HandleFunc("DELETE /mock/requests", func(w http.ResponseWriter, _ *http.Request) {
		m.ResetRequests()
		reply(w, nil, nil)
	})
	mux.HandleFunc("GET /mock/eventstreams", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, eventStreamsStatus{Open: m.OpenEventStreams(), Slow: m.SlowEventStreams()})
	})
	mux.HandleFunc("DELETE /mock/eventstreams", func(w http.ResponseWriter, _ *http.Request) {
		m.DropEventStreams()
		reply(w, nil, nil)
	})
	mux.HandleFunc("POST /mock/eventservice", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			State EventService `json:"state"`
		}
		if !decode(w, r, &body) {
			return
		}
		reply(w, nil, m.SetEventService(body.State))
	})
	return mux
}

// eventStreamsStatus is what GET /mock/eventstreams shows.
type eventStreamsStatus struct {
	Open int `json:"open"` // streams open now
	Slow int `json:"slow"` // streams dropped because their reader fell behind, since start
}

// systemStatus is one system as the control endpoint shows it.
type systemStatus struct {
	ID         string     `json:"id"`
	PowerState PowerState `json:"powerState"`
	Faults     Faults     `json:"faults"`
	Host       Host       `json:"host"`
}

func (m *Mock) status(id string) (systemStatus, error) {
	st := systemStatus{ID: id}
	err := m.withSystem(id, func(s *system, _ time.Time, _ *effects) {
		st.PowerState, st.Faults, st.Host = s.state(), s.faults, s.host
	})
	return st, err
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// reply answers 200 with body (204 when nil), 404 for an unknown system, 400 for any other error.
func reply(w http.ResponseWriter, body any, err error) {
	switch {
	case errors.Is(err, ErrNoSuchSystem):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
	case body == nil:
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSON(w, http.StatusOK, body)
	}
}
