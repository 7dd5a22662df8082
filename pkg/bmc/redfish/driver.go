package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish/common"
	"github.com/stmcginnis/gofish/redfish"
	"k8s.io/utils/clock"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// DriverName names this driver in errors and metrics.
const DriverName = "redfish"

// The drivers share one HTTP transport per TLS setting (see transports), rather than one each: a transport's own state
// (its connection pool, its TLS and HTTP/2 set-up) costs kilobytes, megabytes at thousands of BMCs. A
// connection to a BMC that has been idle idleConnTimeout is closed: a BMC is read every few seconds while
// its host is power-cycled, and every few minutes otherwise; the first keeps its connection, the second
// does not hold one open between checks (each costs two goroutines and two 4 KiB buffers).
//
// Many BMCs may share an address: a chassis manager serving its blades' systems, a Redfish proxy or
// aggregator, an emulator of virtual machines. Each keeps its connection there too (Go's default keeps
// two idle connections per address, so a wave of power cycles behind one address would connect anew for
// nearly every request).
const (
	idleConnTimeout = 15 * time.Second
	// maxIdleConns bounds the idle connections kept across all BMCs, and to any one address, enough for
	// every host in a large power-cycling wave to keep its connection between polls.
	maxIdleConns = 1024
)

// transports holds the shared transports by bmc.Options.TLSKey: one that verifies against the system's
// authorities, one that does not verify, and one per CA bundle in use. A bundle replaced by a new one
// leaves its transport behind: its connections close once idle (idleConnTimeout), and what remains is a
// few kilobytes per bundle a site ever used while the manager ran.
var transports = struct {
	sync.Mutex
	byKey map[string]*http.Transport
}{byKey: map[string]*http.Transport{}}

// sharedTransport returns the transport of opts' TLS configuration, made on first use.
func sharedTransport(opts bmc.Options) (*http.Transport, error) {
	key := opts.TLSKey()
	transports.Lock()
	defer transports.Unlock()
	if t, ok := transports.byKey[key]; ok {
		return t, nil
	}
	cfg, err := opts.TLSConfig()
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = cfg
	t.DialContext = bmc.DialContext // the BMC's name looked up as written, never under search domains
	t.IdleConnTimeout = idleConnTimeout
	t.MaxIdleConns = maxIdleConns
	t.MaxIdleConnsPerHost = maxIdleConns
	transports.byKey[key] = t
	return t, nil
}

// driver is a bmc.Driver for one ComputerSystem behind one Redfish service.
type driver struct {
	endpoint string // scheme://host[:port]
	origin   string // the endpoint's bmc.Origin: requests and redirects go nowhere else
	creds    bmc.Credentials
	http     *http.Client
	timeout  time.Duration
	report   func(reason, message string)
	clock    clock.WithDelayedExecution // times an event stream's silence
	// ownIdle: the transport is the caller's, for this driver alone: Close closes its idle connections.
	// The shared transports' connections are other drivers' too; they close when idle long enough.
	ownIdle bool

	// lock is held by the call in flight and guards the fields below. It is a channel so that waiting
	// for it respects the caller's context.
	lock    chan struct{}
	root    *serviceRoot // nil until read
	token   string       // our session's X-Auth-Token; empty before login and with basic auth
	session string       // our session's URI, for logout
	system  string       // the ComputerSystem's URI; empty until found
}

var _ bmc.Diagnoser = (*driver)(nil)

// serviceRoot holds the links the driver needs from /redfish/v1/.
type serviceRoot struct {
	Systems      common.Link
	EventService common.Link
	Links        struct {
		Sessions common.Link
	}
}

// basicAuth reports whether the service has no sessions to offer.
func (r *serviceRoot) basicAuth() bool { return r.Links.Sessions == "" }

// New returns a driver for the Redfish service at endpoint (http(s)://host[:port]) and the system at
// systemPath (e.g. /redfish/v1/Systems/1), or the service's only system when systemPath is empty. It does
// not contact the BMC: the first call logs in.
func New(endpoint *url.URL, systemPath string, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
	if endpoint == nil || (endpoint.Scheme != "http" && endpoint.Scheme != "https") || endpoint.Host == "" {
		return nil, fmt.Errorf("redfish endpoint must be http(s)://host[:port], got %q", endpoint.Redacted())
	}
	transport, owned := opts.Transport, opts.Transport != nil
	if !owned {
		t, err := sharedTransport(opts)
		if err != nil {
			return nil, err
		}
		transport = t
	}
	if systemPath = strings.TrimRight(systemPath, "/"); systemPath != "" && !strings.HasPrefix(systemPath, "/") {
		systemPath = "/" + systemPath
	}
	return &driver{
		endpoint: endpoint.Scheme + "://" + endpoint.Host,
		origin:   bmc.Origin(endpoint),
		creds:    creds,
		http:     &http.Client{Transport: transport, CheckRedirect: bmc.CheckRedirect(endpoint)},
		ownIdle:  owned,
		timeout:  opts.Timeout(),
		report:   opts.ReportFunc(),
		clock:    clock.RealClock{},
		lock:     make(chan struct{}, 1),
		system:   systemPath,
	}, nil
}

// PowerState reads the system's PowerState: On, Off, or Unknown for anything in between.
func (d *driver) PowerState(ctx context.Context) (bmc.PowerState, error) {
	state := bmc.PowerStateUnknown
	err := d.call(ctx, "PowerState", func(c client) error {
		power, err := d.powerState(c)
		if err != nil {
			return err
		}
		switch power {
		case redfish.OnPowerState:
			state = bmc.PowerStateOn
		case redfish.OffPowerState:
			state = bmc.PowerStateOff
		}
		return nil
	})
	return state, err
}

// PowerOn sends the On reset unless the system is on or powering on.
func (d *driver) PowerOn(ctx context.Context) error {
	return d.call(ctx, "PowerOn", func(c client) error {
		sys, err := d.computerSystem(c)
		if err != nil {
			return err
		}
		if sys.PowerState == redfish.OnPowerState || sys.PowerState == redfish.PoweringOnPowerState {
			return nil
		}
		return reset(sys, redfish.OnResetType)
	})
}

// PowerOff sends ForceOff, or GracefulShutdown when not forced, unless the system is off (or already
// shutting down, when not forced). A system that does not allow GracefulShutdown is sent nothing: the
// call fails as unsupported, and forcing is the caller's decision.
func (d *driver) PowerOff(ctx context.Context, force bool) error {
	return d.call(ctx, "PowerOff", func(c client) error {
		sys, err := d.computerSystem(c)
		if err != nil {
			return err
		}
		if sys.PowerState == redfish.OffPowerState || (!force && sys.PowerState == redfish.PoweringOffPowerState) {
			return nil
		}
		if force {
			return reset(sys, redfish.ForceOffResetType)
		}
		return reset(sys, redfish.GracefulShutdownResetType)
	})
}

// Diagnose sends the Nmi reset: the diagnostic interrupt. A system that does not list Nmi among its
// allowed reset types is sent nothing (unsupported); one that lists none is sent it, and a refusal (400)
// is unsupported too. An NMI to a host that is off would change nothing: nothing is sent then.
func (d *driver) Diagnose(ctx context.Context) error {
	return d.call(ctx, bmc.OperationDiagnose, func(c client) error {
		sys, err := d.computerSystem(c)
		if err != nil {
			return err
		}
		if sys.PowerState == redfish.OffPowerState {
			return nil
		}
		return reset(sys, redfish.NmiResetType)
	})
}

// Close logs out of the session, if any. A session the BMC already dropped is not an error.
func (d *driver) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	if err := d.acquire(ctx); err != nil {
		return d.fail(ctx, "Close", err)
	}
	defer d.release()
	if d.ownIdle {
		defer d.http.CloseIdleConnections()
	}

	if d.token == "" || d.session == "" {
		d.token = ""
		return nil
	}
	_, err := client{ctx: ctx, d: d}.Delete(d.session)
	d.token, d.session = "", ""
	if hasStatus(err, http.StatusUnauthorized) || hasStatus(err, http.StatusNotFound) {
		return nil
	}
	return d.fail(ctx, "Close", err)
}

// call runs fn with a logged-in client bound to ctx and the driver's timeout. When the BMC rejects our
// session (it expired, or the BMC rebooted) it logs in again once and retries fn.
func (d *driver) call(ctx context.Context, op string, fn func(c client) error) error {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	if err := d.acquire(ctx); err != nil {
		return d.fail(ctx, op, err)
	}
	defer d.release()

	c := client{ctx: ctx, d: d}
	err := d.login(c)
	if err == nil {
		err = fn(c)
	}
	if hasStatus(err, http.StatusUnauthorized) && d.token != "" {
		d.token, d.session = "", ""
		if err = d.login(c); err == nil {
			d.report("SessionReestablished", "The BMC rejected the Redfish session; logged in again")
			err = fn(c)
		}
	}
	return d.fail(ctx, op, err)
}

func (d *driver) acquire(ctx context.Context) error {
	select {
	case d.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *driver) release() { <-d.lock }

// login reads the service root once, then opens a session unless one is open or the service has none.
func (d *driver) login(c client) error {
	if d.root == nil {
		root, err := readServiceRoot(c)
		if err != nil {
			return err
		}
		d.root = root
		if root.basicAuth() {
			d.report("BasicAuthFallback", "The BMC offers no Redfish SessionService; using HTTP basic authentication")
		}
	}
	if d.token != "" || d.root.basicAuth() {
		return nil
	}
	auth, err := redfish.CreateSession(c, d.root.Links.Sessions.String(), d.creds.Username, d.creds.Password)
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	if auth.Token == "" {
		return errors.New("create session: the BMC returned no X-Auth-Token")
	}
	d.token, d.session = auth.Token, auth.Session
	return nil
}

func readServiceRoot(c client) (*serviceRoot, error) {
	resp, err := c.Get(common.DefaultServiceRoot)
	if err != nil {
		return nil, fmt.Errorf("read service root: %w", err)
	}
	defer resp.Body.Close()
	var root serviceRoot
	if err := json.NewDecoder(resp.Body).Decode(&root); err != nil {
		return nil, fmt.Errorf("read service root: %w", err)
	}
	return &root, nil
}

// authenticate adds the credentials the driver holds to a request.
func (d *driver) authenticate(req *http.Request) {
	switch {
	case d.token != "":
		req.Header.Set("X-Auth-Token", d.token)
	case d.root != nil && d.root.basicAuth():
		req.SetBasicAuth(d.creds.Username, d.creds.Password)
	}
}

// findSystem finds the system's URI when the address named none.
func (d *driver) findSystem(c client) error {
	if d.system != "" {
		return nil
	}
	uri, err := d.onlySystem(c)
	if err != nil {
		return err
	}
	d.system = uri
	return nil
}

// computerSystem reads the system, finding it first if the address named none.
func (d *driver) computerSystem(c client) (*redfish.ComputerSystem, error) {
	if err := d.findSystem(c); err != nil {
		return nil, err
	}
	sys, err := redfish.GetComputerSystem(c, d.system)
	if err != nil {
		return nil, fmt.Errorf("read system %s: %w", d.system, err)
	}
	return sys, nil
}

// powerState reads the system's PowerState and nothing else: the BMC inventory reads it from thousands
// of BMCs, and decoding the whole ComputerSystem was most of the CPU a check cost.
func (d *driver) powerState(c client) (redfish.PowerState, error) {
	if err := d.findSystem(c); err != nil {
		return "", err
	}
	resp, err := c.Get(d.system)
	if err != nil {
		return "", fmt.Errorf("read system %s: %w", d.system, err)
	}
	defer resp.Body.Close()
	var sys struct {
		PowerState redfish.PowerState
	}
	if err := json.NewDecoder(resp.Body).Decode(&sys); err != nil {
		return "", fmt.Errorf("read system %s: %w", d.system, err)
	}
	return sys.PowerState, nil
}

func (d *driver) onlySystem(c client) (string, error) {
	systems, err := common.GetCollection(c, d.root.Systems.String())
	if err != nil {
		return "", fmt.Errorf("list systems: %w", err)
	}
	switch n := len(systems.ItemLinks); n {
	case 0:
		return "", unsupportedError("the BMC lists no ComputerSystem")
	case 1:
		return systems.ItemLinks[0], nil
	default:
		return "", unsupportedError(fmt.Sprintf("the BMC lists %d ComputerSystems; the address must name one, e.g. %s", n, systems.ItemLinks[0]))
	}
}

// allowed reports whether sys allows a reset type. A system that lists none allows all.
func allowed(sys *redfish.ComputerSystem, t redfish.ResetType) bool {
	return len(sys.SupportedResetTypes) == 0 || slices.Contains(sys.SupportedResetTypes, t)
}

func reset(sys *redfish.ComputerSystem, t redfish.ResetType) error {
	if !allowed(sys, t) {
		return unsupportedError(fmt.Sprintf("system %s does not allow the %s reset (allowed: %v)", sys.ODataID, t, sys.SupportedResetTypes))
	}
	if err := sys.Reset(t); err != nil {
		return fmt.Errorf("%s reset of %s: %w", t, sys.ODataID, err)
	}
	return nil
}
