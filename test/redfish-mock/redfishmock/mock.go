package redfishmock

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Paths of the Redfish resources the mock serves.
const (
	rootPath     = "/redfish/v1"
	systemsPath  = rootPath + "/Systems"
	sessionsSvc  = rootPath + "/SessionService"
	sessionsPath = sessionsSvc + "/Sessions"
)

// defaultRequestLimit is how many requests the record keeps (the most recent ones).
const defaultRequestLimit = 10000

// AuthKind is how a request authenticated itself.
type AuthKind string

// The kinds of authentication a request can carry.
const (
	AuthNone    AuthKind = "none"
	AuthBasic   AuthKind = "basic"
	AuthSession AuthKind = "session"
)

// Request is one Redfish request the mock received (the control endpoint is not recorded).
type Request struct {
	Method string
	Path   string
	// System is the ID of the ComputerSystem the path names, if any.
	System string
	Auth   AuthKind
	Time   time.Time
}

// ErrNoSuchSystem is returned for a system ID the mock does not serve.
var ErrNoSuchSystem = errors.New("no such system")

// Mock is a simulated Redfish service. Configure it with the With methods, then Start it; after Start
// its configuration is fixed and the remaining methods may be called from any goroutine.
type Mock struct {
	// Configuration, fixed at Start.
	clock        clock.WithDelayedExecution
	username     string
	password     string
	powerDelay   time.Duration
	noSessions   bool
	tls          bool
	control      bool
	listen       string
	requestLimit int
	resetTypes   []string      // the ResetType values systems allow
	keepAlive    time.Duration // between keep-alive comments on an idle event stream
	host         Host          // the host of systems added from now on (see WithHost)
	err          error         // the first configuration mistake, returned by Start

	handler        http.Handler // the Redfish API
	controlHandler http.Handler // the control endpoint
	server         *http.Server
	connections    atomic.Int64 // connections accepted
	listener       net.Listener // closed by Close too: Serve only tracks it once its goroutine has run
	url            string
	cert           *x509.Certificate // the TLS certificate; nil without TLS

	mu          sync.Mutex
	systems     map[string]*system
	ids         []string          // system IDs in creation order
	accounts    map[string]string // username → password
	sessions    map[string]*session
	tokens      map[string]string // X-Auth-Token → session ID
	lastSession int
	global      Faults
	requests    []Request
	hooks       []func(systemID string, from, to PowerState)
	lost        lostAnswers // see LoseResetAnswers

	events eventHub // the open event streams, under a lock of their own
}

// session is one logged-in Redfish session.
type session struct {
	id, token, username string
}

// New returns an unstarted Mock with no systems, the account admin/password, instant power transitions,
// a SessionService, the real clock and plain HTTP on a free loopback port.
func New() *Mock {
	m := &Mock{
		clock:        clock.RealClock{},
		username:     "admin",
		password:     "password",
		listen:       "127.0.0.1:0",
		requestLimit: defaultRequestLimit,
		resetTypes:   allResetTypes,
		keepAlive:    DefaultEventKeepAlive,
		events:       eventHub{service: EventServiceEnabled, streams: map[*eventStream]struct{}{}},
		systems:      map[string]*system{},
		accounts:     map[string]string{},
		sessions:     map[string]*session{},
		tokens:       map[string]string{},
	}
	m.handler, m.controlHandler = m.routes(), m.controlRoutes()
	return m
}

// WithSystems adds n systems, numbered on from the ones already there ("1", "2", ...), all powered on.
func (m *Mock) WithSystems(n int) *Mock {
	for range n {
		id := strconv.Itoa(len(m.ids) + 1)
		m.systems[id] = &system{id: id, power: PowerOn, host: m.host}
		m.ids = append(m.ids, id)
	}
	return m
}

// WithHost sets how the hosts of every system, those there and those added later, answer a graceful
// shutdown and a diagnostic interrupt (see Host; SetHost changes one system's).
func (m *Mock) WithHost(h Host) *Mock {
	if err := h.validate(); err != nil {
		m.fail(fmt.Errorf("WithHost: %w", err))
		return m
	}
	m.host = h
	for _, s := range m.systems {
		s.host = h
	}
	return m
}

// AddSystems adds systems with the given IDs, all powered on, before or after Start: a test that grows
// its world (another cluster's hosts, say) keeps one service, one record of requests and one set of
// power hooks for every host. An ID that is empty, holds a slash or is served already is refused, and
// then nothing is added. Added systems answer to the service's account.
func (m *Mock) AddSystems(ids ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for _, id := range ids {
		switch {
		case id == "" || strings.Contains(id, "/"):
			return fmt.Errorf("system ID %q: want a non-empty path segment", id)
		case m.systems[id] != nil || seen[id]:
			return fmt.Errorf("system %q exists already", id)
		}
		seen[id] = true
	}
	for _, id := range ids {
		m.systems[id] = &system{id: id, power: PowerOn, host: m.host}
		m.ids = append(m.ids, id)
	}
	return nil
}

// WithCredentials sets the service's account: the one that logs in and reaches every system that has no
// account of its own.
func (m *Mock) WithCredentials(username, password string) *Mock {
	m.username, m.password = username, password
	return m
}

// WithSystemCredentials gives one system its own account, as if it sat behind a BMC of its own: only
// that account reaches it, and the Systems collection shows each account only its systems.
func (m *Mock) WithSystemCredentials(id, username, password string) *Mock {
	s, ok := m.systems[id]
	if !ok {
		m.fail(fmt.Errorf("WithSystemCredentials: system %q: %w", id, ErrNoSuchSystem))
		return m
	}
	s.username, s.password = username, password
	return m
}

// WithTLS serves HTTPS with a self-signed certificate made in memory (see CertPool).
func (m *Mock) WithTLS() *Mock {
	m.tls = true
	return m
}

// WithPowerDelay makes power transitions take d: PoweringOn or PoweringOff meanwhile.
func (m *Mock) WithPowerDelay(d time.Duration) *Mock {
	m.powerDelay = d
	return m
}

// WithClock sets the clock transitions and latencies run on (a fake clock in tests).
func (m *Mock) WithClock(c clock.WithDelayedExecution) *Mock {
	m.clock = c
	return m
}

// WithoutSessionService removes the SessionService: clients must use basic auth.
func (m *Mock) WithoutSessionService() *Mock {
	m.noSessions = true
	return m
}

// WithControlEndpoint serves the HTTP control endpoint under /mock/ (see control.go).
func (m *Mock) WithControlEndpoint() *Mock {
	m.control = true
	return m
}

// WithListenAddress sets where Start listens (host:port; port 0 picks a free one).
func (m *Mock) WithListenAddress(addr string) *Mock {
	m.listen = addr
	return m
}

// WithResetTypes limits the ResetType values systems allow (all of On, ForceOff, GracefulShutdown,
// ForceRestart, GracefulRestart, PowerCycle and Nmi by default), as many real BMCs do.
func (m *Mock) WithResetTypes(types ...string) *Mock {
	for _, t := range types {
		if !slices.Contains(allResetTypes, t) {
			m.fail(fmt.Errorf("WithResetTypes: unknown ResetType %q", t))
		}
	}
	m.resetTypes = types
	return m
}

// WithRequestLimit sets how many of the most recent requests the record keeps.
func (m *Mock) WithRequestLimit(n int) *Mock {
	m.requestLimit = n
	return m
}

func (m *Mock) fail(err error) {
	if m.err == nil {
		m.err = err
	}
}

// Start validates the configuration and starts serving.
func (m *Mock) Start() (*Mock, error) {
	if m.err != nil {
		return nil, m.err
	}
	m.accounts[m.username] = m.password
	for _, id := range m.ids {
		s := m.systems[id]
		if s.username == "" {
			continue
		}
		if pw, ok := m.accounts[s.username]; ok && pw != s.password {
			return nil, fmt.Errorf("account %q is given two passwords", s.username)
		}
		m.accounts[s.username] = s.password
	}

	ln, err := net.Listen("tcp", m.listen)
	if err != nil {
		return nil, err
	}
	m.server = &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			m.connections.Add(1)
		}
	}}
	scheme := "http"
	if m.tls {
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		cert, err := selfSigned(host)
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		// HTTP/1.1 only: dropping a connection needs http.Hijacker.
		m.server.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, m.server.TLSConfig)
		m.cert, scheme = cert.Leaf, "https"
	}
	m.url = scheme + "://" + ln.Addr().String()
	m.listener = ln
	go func() { _ = m.server.Serve(ln) }()
	return m, nil
}

// Connections is how many connections the mock has accepted since it started.
func (m *Mock) Connections() int { return int(m.connections.Load()) }

// Close stops serving and drops every connection.
func (m *Mock) Close() {
	if m.server != nil {
		_ = m.server.Close()
		_ = m.listener.Close()
	}
}

// URL is the service's base URL (scheme://host:port), known once started.
func (m *Mock) URL() string { return m.url }

// CertPool trusts the mock's certificate; nil without TLS.
func (m *Mock) CertPool() *x509.CertPool {
	if m.cert == nil {
		return nil
	}
	pool := x509.NewCertPool()
	pool.AddCert(m.cert)
	return pool
}

// CertPEM is the mock's certificate in PEM, for clients that read a CA file; nil without TLS.
func (m *Mock) CertPEM() []byte {
	if m.cert == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.cert.Raw})
}

// SystemPath is the Redfish path of a system, as a BMC address names it.
func (m *Mock) SystemPath(id string) string { return systemsPath + "/" + id }

// SystemIDs lists the systems in creation order.
func (m *Mock) SystemIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.ids...)
}

// OnPowerChange registers fn to hear every step of every system's power (On → PoweringOff → Off, ...).
// Hooks run outside the mock's lock, possibly from a timer; with a fake clock they run inside Step, so
// they must not call that clock.
func (m *Mock) OnPowerChange(fn func(systemID string, from, to PowerState)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hooks = append(m.hooks, fn)
}

// PowerState returns what a system reports now.
func (m *Mock) PowerState(id string) (PowerState, error) {
	var state PowerState
	err := m.withSystem(id, func(s *system, _ time.Time, _ *effects) { state = s.state() })
	return state, err
}

// SetPowerState puts a system in a settled state at once (On or Off), as if by hand.
func (m *Mock) SetPowerState(id string, state PowerState) error {
	if state != PowerOn && state != PowerOff {
		return fmt.Errorf("power state %q: want On or Off", state)
	}
	return m.withSystem(id, func(s *system, now time.Time, e *effects) {
		s.hostAt, s.act = time.Time{}, ""
		e.moveTo(s, state, 0, now)
	})
}

// SetHost sets how a system's host answers a graceful shutdown and a diagnostic interrupt (see Host),
// before or after Start. A wait already running after an NMI keeps the behaviour it started with.
func (m *Mock) SetHost(id string, h Host) error {
	if err := h.validate(); err != nil {
		return err
	}
	return m.withSystem(id, func(s *system, _ time.Time, _ *effects) { s.host = h })
}

// Host returns how a system's host behaves.
func (m *Mock) Host(id string) (Host, error) {
	var h Host
	err := m.withSystem(id, func(s *system, _ time.Time, _ *effects) { h = s.host })
	return h, err
}

// Resets lists the ResetType of every reset a system accepted, oldest first.
func (m *Mock) Resets(id string) ([]string, error) {
	var resets []string
	err := m.withSystem(id, func(s *system, _ time.Time, _ *effects) { resets = append(resets, s.resets...) })
	return resets, err
}

// SetFaults replaces one system's faults.
func (m *Mock) SetFaults(id string, f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	return m.withSystem(id, func(s *system, _ time.Time, _ *effects) { s.faults = f })
}

// Faults returns one system's faults as they stand (counts go down as requests hit them).
func (m *Mock) Faults(id string) (Faults, error) {
	var f Faults
	err := m.withSystem(id, func(s *system, _ time.Time, _ *effects) { f = s.faults })
	return f, err
}

// SetGlobalFaults replaces the faults that apply to every request and every system.
func (m *Mock) SetGlobalFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.global = f
	return nil
}

// ClearFaults heals the service and every system.
func (m *Mock) ClearFaults() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.global = Faults{}
	for _, s := range m.systems {
		s.faults = Faults{}
	}
	m.lost.clear()
}

// ExpireSessions forgets every session, as a BMC does on timeout or reboot: their tokens get 401.
func (m *Mock) ExpireSessions() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.sessions)
	clear(m.tokens)
}

// SessionCount is how many sessions are open.
func (m *Mock) SessionCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Requests returns the recorded requests, oldest first.
func (m *Mock) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.requests...)
}

// ResetRequests empties the record.
func (m *Mock) ResetRequests() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = nil
}

// withSystem runs fn on a system under the lock, after settling any transition that is due.
func (m *Mock) withSystem(id string, fn func(s *system, now time.Time, e *effects)) error {
	now := m.clock.Now() // before the lock: see effects
	var e effects
	m.mu.Lock()
	s, ok := m.systems[id]
	if ok {
		e.settle(s, now)
		fn(s, now, &e)
	}
	m.mu.Unlock()
	m.apply(e)
	if !ok {
		return fmt.Errorf("system %q: %w", id, ErrNoSuchSystem)
	}
	return nil
}

// apply starts the timers, calls the hooks and tells the event streams of the changes a locked section
// asked for. Call it without the lock.
func (m *Mock) apply(e effects) {
	for _, t := range e.timers {
		m.clock.AfterFunc(t.after, func() { m.settleAt(t.id, t.at) })
	}
	if len(e.changes) == 0 {
		return
	}
	m.mu.Lock()
	hooks := m.hooks
	owners := make([]string, len(e.changes))
	for i, c := range e.changes {
		if s, ok := m.systems[c.id]; ok {
			owners[i] = m.owner(s)
		}
	}
	m.mu.Unlock()
	for i, c := range e.changes {
		for _, h := range hooks {
			h(c.id, c.from, c.to)
		}
		m.events.publish(c, owners[i])
	}
}

// settleAt is a transition's timer (or a host's, see Host): it settles the system as of the deadline. It
// must neither read the clock nor start a timer (a fake clock runs it while holding its own lock).
func (m *Mock) settleAt(id string, at time.Time) {
	var e effects
	m.mu.Lock()
	if s, ok := m.systems[id]; ok {
		e.settle(s, at)
	}
	m.mu.Unlock()
	m.apply(e)
}

// record appends to the request record, dropping the oldest half when it is full. Call with the lock.
func (m *Mock) record(r Request) {
	if m.requestLimit <= 0 {
		return
	}
	if len(m.requests) >= m.requestLimit {
		m.requests = append(m.requests[:0], m.requests[len(m.requests)/2:]...)
	}
	m.requests = append(m.requests, r)
}
