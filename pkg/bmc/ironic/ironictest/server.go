package ironictest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Power states as Ironic spells them.
const (
	PowerOn  = "power on"
	PowerOff = "power off"
)

// Microversions this server supports. Soft power off needs 1.27.
const (
	MinVersion = "1.1"
	MaxVersion = "1.89"
)

const versionHeader = "X-OpenStack-Ironic-API-Version"

// Request is one request the server received.
type Request struct {
	Method     string
	Path       string
	APIVersion string // the X-OpenStack-Ironic-API-Version header, "" when absent
	Target     string // the power target of a PUT .../states/power
	Status     int    // the status code answered
}

// Server is a fake Ironic API. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	username string
	password string
	nodes    map[string]*node
	requests []Request
}

type node struct {
	power  string
	locked int  // how many more power requests get 409
	noNMI  bool // the node's driver cannot inject an NMI
	nmis   int  // NMIs injected
}

// NewServer starts a server that stops when t ends.
func NewServer(t testing.TB) *Server {
	s := &Server{nodes: map[string]*node{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// WithBasicAuth makes the server require HTTP basic auth with these credentials (Ironic's http_basic).
func (s *Server) WithBasicAuth(username, password string) *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.username, s.password = username, password
	return s
}

// WithNode adds a node in the given power state (PowerOn or PowerOff).
func (s *Server) WithNode(uuid, power string) *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[uuid] = &node{power: power}
	return s
}

// LockNode makes the next n power requests for the node fail with 409, as when another operation holds
// the node's lock.
func (s *Server) LockNode(uuid string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[uuid].locked = n
}

// WithoutNMI makes the node's driver one that cannot inject an NMI, as Ironic's drivers without a
// management interface for it: inject_nmi answers 400.
func (s *Server) WithoutNMI(uuid string) *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[uuid].noNMI = true
	return s
}

// NMIs returns how many NMIs were injected into the node.
func (s *Server) NMIs(uuid string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[uuid].nmis
}

// PowerState returns the node's power state.
func (s *Server) PowerState(uuid string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[uuid].power
}

// Address returns the metalheal BMC address of a node of this server.
func (s *Server) Address(uuid string) string {
	return "ironic://" + strings.TrimPrefix(s.URL, "http://") + "/" + uuid
}

// Requests returns the requests received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// ServeHTTP answers r as the server does, so that tests can put the API behind listeners of their own (one
// that redirects, one that records what reaches it).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req := Request{Method: r.Method, Path: r.URL.Path, APIVersion: r.Header.Get(versionHeader)}
	req.Status = s.handle(w, r, &req)
	s.requests = append(s.requests, req)
}

// handle answers r and returns the status code it wrote. s.mu is held.
func (s *Server) handle(w http.ResponseWriter, r *http.Request, req *Request) int {
	w.Header().Set("X-OpenStack-Ironic-API-Minimum-Version", MinVersion)
	w.Header().Set("X-OpenStack-Ironic-API-Maximum-Version", MaxVersion)
	w.Header().Set("OpenStack-Request-Id", fmt.Sprintf("req-%d", len(s.requests)))

	if s.username != "" {
		user, pass, ok := r.BasicAuth()
		if !ok || user != s.username || pass != s.password {
			w.Header().Set("WWW-Authenticate", `Basic realm="Baremetal API"`)
			return fail(w, http.StatusUnauthorized, "Authentication required")
		}
	}

	version := req.APIVersion
	if version == "" {
		version = MinVersion
	}
	if !inRange(version) {
		return fail(w, http.StatusNotAcceptable, fmt.Sprintf("Version %s was requested but the requested version is not supported by this service. The supported version range is: [%s, %s].", version, MinVersion, MaxVersion))
	}
	w.Header().Set(versionHeader, version)

	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/nodes/")
	if !ok {
		return fail(w, http.StatusNotFound, "The resource could not be found.")
	}
	uuid, action, _ := strings.Cut(rest, "/")
	n, ok := s.nodes[uuid]
	if !ok {
		return fail(w, http.StatusNotFound, fmt.Sprintf("Node %s could not be found.", uuid))
	}

	switch {
	case action == "" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"uuid": uuid, "name": nil, "power_state": n.power, "target_power_state": nil,
			"provision_state": "active", "maintenance": false, "reservation": nil,
		})
		return http.StatusOK
	case action == "states/power" && r.Method == http.MethodPut:
		var body struct {
			Target string `json:"target"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return fail(w, http.StatusBadRequest, "Invalid request body")
		}
		req.Target = body.Target
		return s.changePower(w, uuid, n, body.Target, version)
	case action == "management/inject_nmi" && r.Method == http.MethodPut:
		return s.injectNMI(w, uuid, n, version)
	default:
		return fail(w, http.StatusMethodNotAllowed, "Method not allowed")
	}
}

func (s *Server) injectNMI(w http.ResponseWriter, uuid string, n *node, version string) int {
	switch {
	case !atLeast(version, 1, 29):
		return fail(w, http.StatusNotFound, "The resource could not be found.")
	case n.noNMI:
		return fail(w, http.StatusBadRequest, fmt.Sprintf("Driver for node %s does not support inject NMI.", uuid))
	case n.locked > 0:
		n.locked--
		return fail(w, http.StatusConflict, fmt.Sprintf("Node %s is locked by host conductor-1, please retry after the current operation is completed.", uuid))
	}
	n.nmis++
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

func (s *Server) changePower(w http.ResponseWriter, uuid string, n *node, target, version string) int {
	switch target {
	case PowerOn, PowerOff, "rebooting":
	case "soft power off", "soft rebooting":
		if !atLeast(version, 1, 27) {
			return fail(w, http.StatusNotAcceptable, fmt.Sprintf("Request not acceptable: %q needs API version 1.27", target))
		}
	default:
		return fail(w, http.StatusBadRequest, fmt.Sprintf("Invalid input for field/attribute target. Value: '%s'.", target))
	}
	if n.locked > 0 {
		n.locked--
		return fail(w, http.StatusConflict, fmt.Sprintf("Node %s is locked by host conductor-1, please retry after the current operation is completed.", uuid))
	}
	switch target {
	case PowerOn, "rebooting", "soft rebooting":
		n.power = PowerOn
	default:
		n.power = PowerOff
	}
	w.WriteHeader(http.StatusAccepted)
	return http.StatusAccepted
}

// fail writes Ironic's error body: error_message is itself a JSON document.
func fail(w http.ResponseWriter, status int, msg string) int {
	inner, _ := json.Marshal(map[string]any{"faultstring": msg, "faultcode": "Client", "debuginfo": nil})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error_message": string(inner)})
	return status
}

func inRange(v string) bool {
	minMajor, minMinor := parse(MinVersion)
	maxMajor, maxMinor := parse(MaxVersion)
	major, minor := parse(v)
	return major == minMajor && minor >= minMinor && major == maxMajor && minor <= maxMinor
}

func atLeast(v string, major, minor int) bool {
	ma, mi := parse(v)
	return ma > major || (ma == major && mi >= minor)
}

// parse reads "MAJOR.MINOR"; anything else is version -1.-1, which no range contains.
func parse(v string) (int, int) {
	a, b, ok := strings.Cut(v, ".")
	major, err1 := strconv.Atoi(a)
	minor, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return -1, -1
	}
	return major, minor
}
