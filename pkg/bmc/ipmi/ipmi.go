package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"

	"github.com/bmc-toolbox/bmclib/v2/providers/ipmitool"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// cipherSuite 3 is RAKP-HMAC-SHA1 / HMAC-SHA1-96 / AES-CBC-128: the suite every IPMI v2.0 BMC supports.
const cipherSuite = "3"

// errNoIpmitool explains the one thing an administrator must do.
var errNoIpmitool = errors.New("ipmitool not found in PATH; install the ipmitool package")

// Driver controls a host's power over IPMI LAN.
type Driver struct {
	host     string // a hostname or an IP address, as the address has it
	port     string
	ipmitool string // the binary's path
	creds    bmc.Credentials
	opts     bmc.Options
}

var (
	_ bmc.Driver    = (*Driver)(nil)
	_ bmc.Diagnoser = (*Driver)(nil)
)

// New returns an IPMI driver for addr. It matches bmc.Factory. It fails with bmc.ErrUnsupported when
// the ipmitool binary is missing; it does not contact the BMC.
func New(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
	if addr.Driver != bmc.DriverIPMI {
		return nil, &bmc.Error{Driver: bmc.DriverIPMI, Operation: "New", Kind: bmc.ErrUnsupported,
			Err: errors.New("not an ipmi address: " + addr.String())}
	}
	path, err := exec.LookPath("ipmitool")
	if err != nil {
		return nil, &bmc.Error{Driver: bmc.DriverIPMI, Operation: "New", Kind: bmc.ErrUnsupported, Err: errNoIpmitool}
	}
	return &Driver{host: addr.Host, port: addr.Port, ipmitool: path, creds: creds, opts: opts}, nil
}

// conn returns the ipmitool connection of one call, to the BMC's address looked up now. ipmitool would
// look a hostname up itself, with libc and the resolver's search domains (see bmc.AbsoluteName); given
// the absolute name instead, libc would no longer find it in /etc/hosts (a pod's hostAliases). So the name
// is looked up here, as written (bmc.LookupHost), and ipmitool is given the address.
func (d *Driver) conn(ctx context.Context, operation string) (*ipmitool.Conn, error) {
	ip, err := bmc.LookupHost(ctx, d.host)
	if err != nil {
		return nil, &bmc.Error{Driver: bmc.DriverIPMI, Operation: operation, Kind: bmc.ErrUnreachable, Err: err}
	}
	host := ip.String()
	if ip.Is6() {
		host = "[" + host + "]" // bmclib joins host and port with a bare ":" and splits them again
	}
	conn, err := ipmitool.New(host, d.creds.Username, d.creds.Password,
		ipmitool.WithPort(d.port), ipmitool.WithCipherSuite(cipherSuite), ipmitool.WithIpmitoolPath(d.ipmitool))
	if err != nil {
		return nil, &bmc.Error{Driver: bmc.DriverIPMI, Operation: operation, Kind: bmc.ErrUnsupported,
			Err: bmc.Redact(err, d.creds.Password)}
	}
	return conn, nil
}

// PowerState reads the chassis power state.
func (d *Driver) PowerState(ctx context.Context) (bmc.PowerState, error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout())
	defer cancel()
	return d.powerState(ctx)
}

func (d *Driver) powerState(ctx context.Context) (bmc.PowerState, error) {
	conn, err := d.conn(ctx, bmc.OperationPowerState)
	if err != nil {
		return "", err
	}
	out, err := conn.PowerStateGet(ctx)
	if err != nil {
		return "", d.wrap(ctx, bmc.OperationPowerState, err)
	}
	switch {
	case strings.Contains(out, "Chassis Power is on"):
		return bmc.PowerStateOn, nil
	case strings.Contains(out, "Chassis Power is off"):
		return bmc.PowerStateOff, nil
	default:
		return bmc.PowerStateUnknown, nil
	}
}

// PowerOn powers the chassis on; a host already on is left alone.
func (d *Driver) PowerOn(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout())
	defer cancel()
	return d.set(ctx, bmc.OperationPowerOn, "on")
}

// PowerOff cuts the chassis power (force) or asks the OS to shut down through ACPI (soft). A BMC that
// refuses the soft power off fails as unsupported.
func (d *Driver) PowerOff(ctx context.Context, force bool) error {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout())
	defer cancel()
	if force {
		return d.set(ctx, bmc.OperationPowerOff, "off")
	}
	// bmclib reports success for a soft power off when it cannot read the power state; read it first
	// so that an unreachable BMC is an error, not a silent no-op.
	state, err := d.powerState(ctx)
	if err != nil || state == bmc.PowerStateOff {
		return err
	}
	return d.set(ctx, bmc.OperationPowerOff, "soft")
}

// Diagnose pulses the diagnostic interrupt (ipmitool chassis power diag: an NMI). A BMC that refuses it
// ("Invalid data field in request", as OpenIPMI's ipmi_sim always does) fails as unsupported.
func (d *Driver) Diagnose(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout())
	defer cancel()
	conn, err := d.conn(ctx, bmc.OperationDiagnose)
	if err != nil {
		return err
	}
	if err := conn.SendNMI(ctx); err != nil {
		return d.wrap(ctx, bmc.OperationDiagnose, err)
	}
	return nil
}

// Close does nothing: every ipmitool call opens and closes its own session.
func (d *Driver) Close(context.Context) error { return nil }

func (d *Driver) set(ctx context.Context, operation, state string) error {
	conn, err := d.conn(ctx, operation)
	if err != nil {
		return err
	}
	ok, err := conn.PowerSet(ctx, state)
	if err != nil {
		return d.wrap(ctx, operation, err)
	}
	if !ok {
		return d.wrap(ctx, operation, errors.New("the BMC did not confirm chassis power "+state))
	}
	return nil
}

// wrap turns an ipmitool failure into a *bmc.Error of the right kind, or a plain error when the kind is
// unknown. The message is ipmitool's output, with the password redacted should it ever appear.
func (d *Driver) wrap(ctx context.Context, operation string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			return &bmc.Error{Driver: bmc.DriverIPMI, Operation: operation, Kind: bmc.ErrTimeout, Err: ctxErr}
		}
		return fmt.Errorf("ipmi %s: %w", operation, ctxErr)
	}
	// ipmitool's output, on one line, with the password redacted should it ever appear.
	msg := strings.ReplaceAll(strings.TrimSpace(bmc.Redact(err, d.creds.Password).Error()), "\n", "; ")
	kind := classify(msg)
	if kind == nil && strings.Contains(msg, "Unable to establish") {
		// Wrong credentials, or nobody answering? A BMC that answers a ping refused our credentials.
		kind = bmc.ErrUnreachable
		if Ping(ctx, net.JoinHostPort(d.host, d.port)) == nil {
			kind = bmc.ErrAuthentication
			msg = "the BMC answers but refused the session (wrong username or password?): " + msg
		}
	}
	if kind == nil {
		return fmt.Errorf("ipmi %s: %s", operation, msg)
	}
	return &bmc.Error{Driver: bmc.DriverIPMI, Operation: operation, Kind: kind, Err: errors.New(msg)}
}

// classify maps ipmitool's output to an error kind, or nil when the output does not tell.
func classify(msg string) error {
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("Address lookup for", "No route to host", "Connection refused", "Network is unreachable"):
		return bmc.ErrUnreachable
	case has("Insufficient privilege", "unauthorized name", "Invalid user name", "RAKP"):
		return bmc.ErrAuthentication
	case has("Invalid data field in request", "Invalid command", "not supported"):
		return bmc.ErrUnsupported
	}
	return nil
}
