package ironic

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/httpbasic"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"
	"k8s.io/utils/clock"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// apiVersion is the Ironic API microversion the driver speaks: 1.27 added soft power off.
const apiVersion = "1.27"

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

var _ bmc.Driver = (*Driver)(nil)

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
	endpoint := addr.Endpoint().JoinPath("v1").String()

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
		d.transport = http.DefaultTransport.(*http.Transport).Clone()
		d.transport.TLSClientConfig = opts.TLSConfig()
		rt = d.transport
	}
	d.client.HTTPClient = http.Client{Transport: rt}
	d.client.Microversion = apiVersion
	return d, nil
}

// PowerState reads the node's power_state.
func (d *Driver) PowerState(ctx context.Context) (bmc.PowerState, error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout())
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

// changePower requests target, retrying while the node is locked (409).
func (d *Driver) changePower(ctx context.Context, operation string, target nodes.TargetPowerState) error {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout())
	defer cancel()
	delay := initialBackoff
	for {
		err := nodes.ChangePowerState(ctx, d.client, d.node, nodes.PowerStateOpts{Target: target}).ExtractErr()
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
	kind := classify(ctx, err)
	err = bmc.Redact(err, d.secrets...)
	if kind == nil {
		return fmt.Errorf("ironic %s: %w", operation, err)
	}
	return &bmc.Error{Driver: bmc.DriverIronic, Operation: operation, Kind: kind, Err: err}
}

// classify returns the kind of err, or nil when it has none.
func classify(ctx context.Context, err error) error {
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
