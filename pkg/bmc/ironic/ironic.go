package ironic

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/httpbasic"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"
	"k8s.io/utils/clock"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// apiVersion is the Ironic API microversion the driver speaks: 1.27 added soft power off. The diagnostic
// interrupt alone asks for nmiAPIVersion, the first with inject_nmi, so that an older Ironic still powers
// hosts (it answers that one request 406: unsupported).
const (
	apiVersion    = "1.27"
	nmiAPIVersion = "1.29"
)

// Backoff between power requests refused with 409 (node locked): doubling from initialBackoff up to
// maxBackoff, for as long as the context allows.
const (
	initialBackoff = 500 * time.Millisecond
	maxBackoff     = 8 * time.Second
)

// Driver controls a node's power through the Ironic API.
type Driver struct {
	client    *gophercloud.ServiceClient
	transport *http.Transport // ours to close; nil when Options.Transport was given
	node      string
	secrets   []string
	opts      bmc.Options
	clock     clock.Clock
}

var (
	_ bmc.Driver    = (*Driver)(nil)
	_ bmc.Diagnoser = (*Driver)(nil)
)

// New returns an Ironic driver for the node at addr. It matches bmc.Factory. Empty credentials select
// noauth; otherwise both username and password are needed. It does not contact Ironic.
func New(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
	return newDriver(addr, creds, opts, clock.RealClock{})
}

func newDriver(addr bmc.Address, creds bmc.Credentials, opts bmc.Options, clk clock.Clock) (*Driver, error) {
	if addr.Driver != bmc.DriverIronic {
		return nil, &bmc.Error{Driver: bmc.DriverIronic, Operation: "New", Kind: bmc.ErrUnsupported,
			Err: errors.New("not an ironic address: " + addr.String())}
	}
	d := &Driver{node: strings.TrimPrefix(addr.Path, "/"), opts: opts, clock: clk}
	origin := addr.Endpoint()
	endpoint := origin.JoinPath("v1").String()

	var err error
	switch {
	case creds.Username == "" && creds.Password == "":
		d.client, err = noauth.NewBareMetalNoAuth(noauth.EndpointOpts{IronicEndpoint: endpoint})
	case creds.Username == "" || creds.Password == "":
		return nil, &bmc.Error{Driver: bmc.DriverIronic, Operation: "New", Kind: bmc.ErrAuthentication,
			Err: errors.New("http_basic auth needs both a username and a password")}
	default:
		d.secrets = []string{creds.Password, base64.StdEncoding.EncodeToString([]byte(creds.Username + ":" + creds.Password))}
		d.client, err = httpbasic.NewBareMetalHTTPBasic(httpbasic.EndpointOpts{
			IronicEndpoint: endpoint, IronicUser: creds.Username, IronicUserPassword: creds.Password,
		})
	}
	if err != nil {
		return nil, &bmc.Error{Driver: bmc.DriverIronic, Operation: "New", Kind: bmc.ErrUnsupported, Err: bmc.Redact(err, d.secrets...)}
	}

	rt := opts.Transport
	if rt == nil {
		tlsConfig, err := opts.TLSConfig()
		if err != nil {
			return nil, &bmc.Error{Driver: bmc.DriverIronic, Operation: "New", Kind: bmc.ErrUnsupported, Err: err}
		}
		d.transport = http.DefaultTransport.(*http.Transport).Clone()
		d.transport.TLSClientConfig = tlsConfig
		d.transport.DialContext = bmc.DialContext // Ironic's name looked up as written, never under search domains
		rt = d.transport
	}
	// Requests go to Ironic's origin only (gophercloud puts the basic credentials in every request, and Go
	// keeps them on a redirect to another port or scheme of the same host), and no answer is read beyond
	// bmc.MaxResponseBytes (gophercloud decodes a whole value, and reads an error answer whole).
	d.client.HTTPClient = http.Client{Transport: limitedTransport{next: rt}, CheckRedirect: bmc.CheckRedirect(origin)}
	d.client.Microversion = apiVersion
	return d, nil
}

// PowerState reads the node's power_state.
func (d *Driver) PowerState(ctx context.Context) (bmc.PowerState, error) {
	ctx, cancel := d.begin(ctx)
	defer cancel()
	n, err := nodes.Get(ctx, d.client, d.node).Extract()
	if err != nil {
		return "", d.wrap(ctx, bmc.OperationPowerState, err)
	}
	switch n.PowerState {
	case string(nodes.PowerOn):
		return bmc.PowerStateOn, nil
	case string(nodes.PowerOff):
		return bmc.PowerStateOff, nil
	default: // null while Ironic cannot tell, "error" after a failed action
		return bmc.PowerStateUnknown, nil
	}
}

// PowerOn asks Ironic to power the node on.
func (d *Driver) PowerOn(ctx context.Context) error {
	return d.changePower(ctx, bmc.OperationPowerOn, nodes.PowerOn)
}

// PowerOff asks Ironic to power the node off: at once with force, through the OS otherwise.
func (d *Driver) PowerOff(ctx context.Context, force bool) error {
	if force {
		return d.changePower(ctx, bmc.OperationPowerOff, nodes.PowerOff)
	}
	return d.changePower(ctx, bmc.OperationPowerOff, nodes.SoftPowerOff)
}

// Close releases idle connections.
func (d *Driver) Close(context.Context) error {
	if d.transport != nil {
		d.transport.CloseIdleConnections()
	}
	return nil
}

// Diagnose asks Ironic to inject an NMI into the node (PUT /v1/nodes/{node}/management/inject_nmi,
// microversion 1.29), retrying while the node is locked (409). A driver of Ironic's that cannot inject
// one (400), or an Ironic too old to know the request (406), fails as unsupported.
func (d *Driver) Diagnose(ctx context.Context) error {
	nmi := *d.client
	nmi.Microversion = nmiAPIVersion
	return d.whileLocked(ctx, bmc.OperationDiagnose, func(ctx context.Context) error {
		return nodes.InjectNMI(ctx, &nmi, d.node).ExtractErr()
	})
}

// changePower requests target, retrying while the node is locked (409).
func (d *Driver) changePower(ctx context.Context, operation string, target nodes.TargetPowerState) error {
	return d.whileLocked(ctx, operation, func(ctx context.Context) error {
		return nodes.ChangePowerState(ctx, d.client, d.node, nodes.PowerStateOpts{Target: target}).ExtractErr()
	})
}

// whileLocked makes request, and makes it again while Ironic answers that the node is locked by another
// operation (409), with a growing wait, for as long as ctx allows.
func (d *Driver) whileLocked(ctx context.Context, operation string, request func(ctx context.Context) error) error {
	ctx, cancel := d.begin(ctx)
	defer cancel()
	delay := initialBackoff
	for {
		// An answer too large ends the call, whatever its status: a 409 cut off at the cap is no lock to
		// wait for.
		err := guarded(ctx, request(ctx))
		if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			return d.wrap(ctx, operation, err)
		}
		if delay == initialBackoff {
			d.opts.ReportFunc()("NodeLocked", fmt.Sprintf("Ironic node %s is locked by another operation; retrying", d.node))
		}
		timer := d.clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return d.wrap(ctx, operation, fmt.Errorf("node %s stayed locked: %w", d.node, err))
		case <-timer.C():
		}
		delay = min(2*delay, maxBackoff)
	}
}

// wrap turns a gophercloud error into a *bmc.Error of the right kind (nil stays nil). Its message never
// holds the password nor the basic auth token, even should Ironic echo them back.
func (d *Driver) wrap(ctx context.Context, operation string, err error) error {
	if err == nil {
		return nil
	}
	err = guarded(ctx, err)
	kind := classify(ctx, err)
	err = bmc.Redact(bmc.ExplainCertificate(err), d.secrets...)
	if kind == nil {
		return fmt.Errorf("ironic %s: %w", operation, err)
	}
	return &bmc.Error{Driver: bmc.DriverIronic, Operation: operation, Kind: kind, Err: err}
}

// classify returns the kind of err, or nil when it has none. A redirect that leaves Ironic is unsupported:
// Ironic cannot be used as addressed, and the address needs fixing. An answer too large is a bad answer,
// unreachable like a garbled one.
func classify(ctx context.Context, err error) error {
	var redirect *bmc.RedirectError
	var tooLarge *bmc.ResponseTooLargeError
	switch {
	case errors.As(err, &redirect):
		return bmc.ErrUnsupported
	case errors.As(err, &tooLarge):
		return bmc.ErrUnreachable
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return bmc.ErrTimeout
	}
	var code gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &code) {
		switch status := code.Actual; {
		case status == http.StatusUnauthorized, status == http.StatusForbidden:
			return bmc.ErrAuthentication
		case status == http.StatusNotFound, status == http.StatusBadRequest, status == http.StatusNotAcceptable:
			return bmc.ErrUnsupported // no such node, or a request this Ironic does not accept
		case status >= 500:
			return bmc.ErrUnreachable
		}
		return nil
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) && !errors.Is(err, context.Canceled) {
		return bmc.ErrUnreachable // connection refused, DNS, TLS
	}
	return nil
}

// begin returns the context of one driver call: bounded by Options.Timeout, and carrying the call's
// record of its answers for limitedTransport.
func (d *Driver) begin(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = context.WithValue(ctx, callKey{}, &call{})
	return context.WithTimeout(ctx, d.opts.Timeout())
}

// callKey is the context key of a driver call's *call.
type callKey struct{}

// call is what limitedTransport tells one driver call about its answers. gophercloud reads an error answer
// with io.ReadAll and drops the read's error, so an answer cut off at the cap would otherwise come back as
// an ordinary error status quoting the first 4 MiB of it.
type call struct {
	tooLarge atomic.Pointer[bmc.ResponseTooLargeError]
}

// guarded returns the error that really ended a request of the call in ctx: an answer too large when one
// was (whatever gophercloud made of it), a redirect that leaves Ironic on its own (its *url.Error would
// quote the whole Location Ironic sent), and err otherwise.
func guarded(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		if tooLarge := c.tooLarge.Load(); tooLarge != nil {
			return tooLarge
		}
	}
	var redirect *bmc.RedirectError
	if errors.As(err, &redirect) {
		return redirect
	}
	return err
}

// limitedTransport cuts every answer at bmc.MaxResponseBytes (bmc.LimitResponse), and records an answer
// too large in the request's call.
type limitedTransport struct {
	next http.RoundTripper
}

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	c, _ := req.Context().Value(callKey{}).(*call)
	if err := bmc.LimitResponse(resp, bmc.MaxResponseBytes); err != nil {
		if c != nil {
			var tooLarge *bmc.ResponseTooLargeError
			if errors.As(err, &tooLarge) {
				c.tooLarge.CompareAndSwap(nil, tooLarge)
			}
		}
		return nil, err
	}
	if c != nil {
		resp.Body = &watchedBody{ReadCloser: resp.Body, call: c}
	}
	return resp, nil
}

// watchedBody records in its call that the answer proved too large, when it does.
type watchedBody struct {
	io.ReadCloser
	call *call
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooLarge *bmc.ResponseTooLargeError
	if err != nil && errors.As(err, &tooLarge) {
		b.call.tooLarge.CompareAndSwap(nil, tooLarge)
	}
	return n, err
}
