package redfishmock

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// obj is a JSON object under construction.
type obj = map[string]any

func link(path string) obj { return obj{"@odata.id": path} }

// routes builds the Redfish API. Paths arrive without a trailing slash (see ServeHTTP).
func (m *Mock) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /redfish", m.versions)
	mux.HandleFunc("GET /redfish/v1", m.serviceRoot)
	mux.HandleFunc("POST "+sessionsPath, m.login)
	mux.HandleFunc("GET "+systemsPath, m.authed(m.listSystems))
	mux.HandleFunc("GET "+systemsPath+"/{id}", m.authed(m.getSystem))
	mux.HandleFunc("POST "+systemsPath+"/{id}/Actions/ComputerSystem.Reset", m.authed(m.resetSystem))
	mux.HandleFunc("GET "+sessionsSvc, m.authed(m.sessionService))
	mux.HandleFunc("GET "+sessionsPath, m.authed(m.listSessions))
	mux.HandleFunc("GET "+sessionsPath+"/{id}", m.authed(m.getSession))
	mux.HandleFunc("DELETE "+sessionsPath+"/{id}", m.authed(m.logout))
	mux.HandleFunc("GET "+eventServicePath, m.authed(m.eventService))
	mux.HandleFunc("GET "+ssePath, m.authed(m.serveEventStream))
	mux.HandleFunc("/", m.authed(func(w http.ResponseWriter, r *http.Request, _ string) { notFound(w, r.URL.Path) }))
	return mux
}

// ServeHTTP records the request, applies the faults, then serves Redfish (or the control endpoint).
func (m *Mock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := strings.TrimRight(r.URL.Path, "/"); p != "" {
		r.URL.Path = p
	}
	if r.URL.Path == "/mock" || strings.HasPrefix(r.URL.Path, "/mock/") {
		if !m.control {
			notFound(w, r.URL.Path)
			return
		}
		m.controlHandler.ServeHTTP(w, r)
		return
	}

	now := m.clock.Now()
	id := systemOf(r.URL.Path)
	m.mu.Lock()
	m.record(Request{Method: r.Method, Path: r.URL.Path, System: id, Auth: authKind(r), Time: now})
	latency := m.global.Latency
	status, drop := m.global.hit()
	if s, ok := m.systems[id]; ok {
		latency += s.faults.Latency
		if status == 0 && !drop {
			status, drop = s.faults.hit()
		}
	}
	m.mu.Unlock()

	if latency > 0 {
		t := m.clock.NewTimer(latency)
		defer t.Stop()
		select {
		case <-t.C():
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case drop:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		// Cannot hijack (HTTP/2): the nearest thing is an error.
		writeError(w, http.StatusBadGateway, "Base.1.8.GeneralError", "connection dropped by injected fault")
	case status != 0:
		writeError(w, status, "Base.1.8.GeneralError", fmt.Sprintf("injected fault: %d %s", status, http.StatusText(status)))
	default:
		m.handler.ServeHTTP(w, r)
	}
}

// systemOf returns the system ID a path is about, or "".
func systemOf(path string) string {
	rest, ok := strings.CutPrefix(path, systemsPath+"/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

func authKind(r *http.Request) AuthKind {
	if r.Header.Get("X-Auth-Token") != "" {
		return AuthSession
	}
	if _, _, ok := r.BasicAuth(); ok {
		return AuthBasic
	}
	return AuthNone
}

// authedHandler serves an authenticated request; user is the account it authenticated as.
type authedHandler func(w http.ResponseWriter, r *http.Request, user string)

// authed refuses requests without good credentials (401), or whose account may not reach the system
// they name (403).
func (m *Mock) authed(h authedHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		user, ok := m.user(r)
		s := m.systems[systemOf(r.URL.Path)]
		status := 0
		switch {
		case !ok || (s != nil && s.faults.RejectAuth):
			status = http.StatusUnauthorized
		case s != nil && m.owner(s) != user:
			status = http.StatusForbidden
		}
		m.mu.Unlock()
		switch status {
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Basic realm="redfish-mock"`)
			writeError(w, status, "Base.1.8.NoValidSession", "authentication required")
			return
		case http.StatusForbidden:
			writeError(w, status, "Base.1.8.InsufficientPrivilege", "this account may not reach "+r.URL.Path)
			return
		}
		h(w, r, user)
	}
}

// user returns the account a request authenticates as. Call with the lock.
func (m *Mock) user(r *http.Request) (string, bool) {
	if m.global.RejectAuth {
		return "", false
	}
	if token := r.Header.Get("X-Auth-Token"); token != "" {
		if m.noSessions {
			return "", false
		}
		s, ok := m.sessions[m.tokens[token]]
		if !ok {
			return "", false
		}
		return s.username, true
	}
	if u, p, ok := r.BasicAuth(); ok {
		if pw, known := m.accounts[u]; known && pw == p {
			return u, true
		}
	}
	return "", false
}

// owner is the account that reaches a system.
func (m *Mock) owner(s *system) string {
	if s.username != "" {
		return s.username
	}
	return m.username
}

func (m *Mock) versions(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, obj{"v1": rootPath + "/"})
}

func (m *Mock) serviceRoot(w http.ResponseWriter, _ *http.Request) {
	root := obj{
		"@odata.id":      rootPath + "/",
		"@odata.type":    "#ServiceRoot.v1_11_0.ServiceRoot",
		"Id":             "RootService",
		"Name":           "Redfish mock service",
		"RedfishVersion": "1.11.0",
		"UUID":           "92384634-2938-2342-8820-489239905423",
		"Systems":        link(systemsPath),
		"Links":          obj{},
	}
	if m.eventServiceState() != EventServiceAbsent {
		root["EventService"] = link(eventServicePath)
	}
	if !m.noSessions {
		root["SessionService"] = link(sessionsSvc)
		root["Links"] = obj{"Sessions": link(sessionsPath)}
	}
	writeJSON(w, http.StatusOK, root)
}

func (m *Mock) listSystems(w http.ResponseWriter, _ *http.Request, user string) {
	m.mu.Lock()
	members := []obj{}
	for _, id := range m.ids {
		if m.owner(m.systems[id]) == user {
			members = append(members, link(m.SystemPath(id)))
		}
	}
	m.mu.Unlock()
	writeJSON(w, http.StatusOK, collection(systemsPath, "#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection", members))
}

func (m *Mock) getSystem(w http.ResponseWriter, r *http.Request, _ string) {
	var body obj
	err := m.withSystem(r.PathValue("id"), func(s *system, _ time.Time, _ *effects) { body = m.systemBody(s) })
	if err != nil {
		notFound(w, r.URL.Path)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (m *Mock) systemBody(s *system) obj {
	path := m.SystemPath(s.id)
	return obj{
		"@odata.id":    path,
		"@odata.type":  "#ComputerSystem.v1_20_0.ComputerSystem",
		"Id":           s.id,
		"Name":         "Mock system " + s.id,
		"SystemType":   "Physical",
		"Manufacturer": "metalheal",
		"Model":        "redfish-mock",
		"UUID":         fmt.Sprintf("00000000-0000-4000-8000-%012s", s.id),
		"PowerState":   s.state(),
		"Status":       obj{"State": "Enabled", "Health": "OK"},
		"Boot": obj{ // sushy requires it
			"BootSourceOverrideEnabled": "Disabled",
			"BootSourceOverrideTarget":  "None",
			"BootSourceOverrideMode":    "UEFI",
		},
		"Actions": obj{"#ComputerSystem.Reset": obj{
			"target":                            path + "/Actions/ComputerSystem.Reset",
			"ResetType@Redfish.AllowableValues": m.resetTypes,
		}},
	}
}

func (m *Mock) resetSystem(w http.ResponseWriter, r *http.Request, _ string) {
	var req struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "the request body is not valid JSON")
		return
	}
	status := http.StatusNoContent
	err := m.withSystem(r.PathValue("id"), func(s *system, now time.Time, e *effects) {
		refuse := m.global.RefusePowerOff || s.faults.RefusePowerOff
		stuck := m.global.StuckPower || s.faults.StuckPower
		switch {
		case refuse && powersOff(req.ResetType):
			status = http.StatusInternalServerError
		case !slices.Contains(m.resetTypes, req.ResetType) || !e.reset(s, req.ResetType, m.powerDelay, now, stuck):
			status = http.StatusBadRequest
		}
	})
	switch {
	case err != nil:
		notFound(w, r.URL.Path)
	case status == http.StatusInternalServerError:
		writeError(w, status, "Base.1.8.InternalError", "the system refused to power off (injected fault)")
	case status == http.StatusBadRequest:
		writeError(w, status, "Base.1.8.ActionParameterValueNotInList",
			fmt.Sprintf("ResetType %q is not one of %s", req.ResetType, strings.Join(m.resetTypes, ", ")))
	case m.loseAnswer(w, r, r.PathValue("id")): // carried out, and its answer goes missing (see LoseResetAnswers)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (m *Mock) sessionService(w http.ResponseWriter, r *http.Request, _ string) {
	if m.noSessions {
		notFound(w, r.URL.Path)
		return
	}
	writeJSON(w, http.StatusOK, obj{
		"@odata.id":      sessionsSvc,
		"@odata.type":    "#SessionService.v1_1_8.SessionService",
		"Id":             "SessionService",
		"Name":           "Session Service",
		"ServiceEnabled": true,
		"SessionTimeout": 1800,
		"Sessions":       link(sessionsPath),
	})
}

func (m *Mock) listSessions(w http.ResponseWriter, r *http.Request, _ string) {
	if m.noSessions {
		notFound(w, r.URL.Path)
		return
	}
	m.mu.Lock()
	members := make([]obj, 0, len(m.sessions))
	for id := range m.sessions {
		members = append(members, link(sessionsPath+"/"+id))
	}
	m.mu.Unlock()
	writeJSON(w, http.StatusOK, collection(sessionsPath, "#SessionCollection.SessionCollection", "Session Collection", members))
}

func sessionBody(s *session) obj {
	return obj{
		"@odata.id":   sessionsPath + "/" + s.id,
		"@odata.type": "#Session.v1_3_0.Session",
		"Id":          s.id,
		"Name":        "User Session",
		"UserName":    s.username,
	}
}

// login creates a session: the only request besides the service root that needs no credentials.
func (m *Mock) login(w http.ResponseWriter, r *http.Request) {
	if m.noSessions {
		notFound(w, r.URL.Path)
		return
	}
	var req struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "the request body is not valid JSON")
		return
	}
	m.mu.Lock()
	pw, known := m.accounts[req.UserName]
	if !known || pw != req.Password || m.global.RejectAuth {
		m.mu.Unlock()
		writeError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "invalid username or password")
		return
	}
	m.lastSession++
	s := &session{id: strconv.Itoa(m.lastSession), token: newToken(), username: req.UserName}
	m.sessions[s.id], m.tokens[s.token] = s, s.id
	m.mu.Unlock()

	w.Header().Set("X-Auth-Token", s.token)
	w.Header().Set("Location", sessionsPath+"/"+s.id)
	writeJSON(w, http.StatusCreated, sessionBody(s))
}

func (m *Mock) getSession(w http.ResponseWriter, r *http.Request, _ string) {
	m.mu.Lock()
	s, ok := m.sessions[r.PathValue("id")]
	m.mu.Unlock()
	if !ok || m.noSessions {
		notFound(w, r.URL.Path)
		return
	}
	writeJSON(w, http.StatusOK, sessionBody(s))
}

func (m *Mock) logout(w http.ResponseWriter, r *http.Request, _ string) {
	m.mu.Lock()
	s, ok := m.sessions[r.PathValue("id")]
	if ok {
		delete(m.sessions, s.id)
		delete(m.tokens, s.token)
	}
	m.mu.Unlock()
	if !ok || m.noSessions {
		notFound(w, r.URL.Path)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func collection(path, odataType, name string, members []obj) obj {
	return obj{
		"@odata.id":           path,
		"@odata.type":         odataType,
		"Name":                name,
		"Members@odata.count": len(members),
		"Members":             members,
	}
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with a Redfish error body.
func writeError(w http.ResponseWriter, status int, messageID, message string) {
	writeJSON(w, status, obj{"error": obj{
		"code":    messageID,
		"message": message,
		"@Message.ExtendedInfo": []obj{{
			"@odata.type": "#Message.v1_1_1.Message",
			"MessageId":   messageID,
			"Message":     message,
		}},
	}})
}

func notFound(w http.ResponseWriter, path string) {
	writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no resource at "+path)
}
