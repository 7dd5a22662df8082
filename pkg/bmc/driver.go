package bmc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// PowerState is a host's power state as its BMC reports it.
type PowerState string

const (
	// PowerStateOn means the host is powered on (or powering on, for BMCs that do not distinguish).
	PowerStateOn PowerState = "On"
	// PowerStateOff means the host is powered off: confirmed by the BMC, safe to fence on.
	PowerStateOff PowerState = "Off"
	// PowerStateUnknown means the BMC answered but the state is neither on nor off (e.g. PoweringOff).
	PowerStateUnknown PowerState = "Unknown"
)

// Driver controls one host's power through its BMC. Every method is bounded by ctx and safe to retry:
// PowerOff on a host that is already off and PowerOn on a host that is already on succeed.
type Driver interface {
	// PowerState reads the host's power state. It doubles as the reachability and credentials check.
	PowerState(ctx context.Context) (PowerState, error)
	// PowerOn asks the BMC to power the host on. It returns once the request is accepted, not once the
	// host is on: callers confirm with PowerState.
	PowerOn(ctx context.Context) error
	// PowerOff asks the BMC to power the host off. With force the power is cut at once. Without it the
	// host's operating system is asked to shut down (Redfish GracefulShutdown, IPMI chassis power soft,
	// Ironic soft power off), which a host may ignore; a BMC that offers no such request is sent nothing
	// and the call fails with an error of kind ErrUnsupported, for the caller to decide whether to force.
	// Callers confirm with PowerState.
	PowerOff(ctx context.Context, force bool) error
	// Close releases what the driver holds (a Redfish session, say). The driver must not be used after.
	Close(ctx context.Context) error
}

// Diagnoser is a Driver that can send its host a diagnostic interrupt: an NMI, on which a host set up for
// it (kdump, panic on NMI) writes its kernel's memory to disk and then reboots or powers off on its own.
// Not every BMC offers one; callers go through Diagnose, which checks.
type Diagnoser interface {
	// Diagnose asks the BMC to send the host a diagnostic interrupt. It returns once the BMC took the
	// request: what the host does then shows only in its power state. A BMC that does not offer it (the
	// Redfish system does not allow the Nmi reset, ipmitool's chassis power diag is refused, Ironic's
	// driver cannot inject one) fails with an error of kind ErrUnsupported.
	Diagnose(ctx context.Context) error
}

// Diagnose sends d's host a diagnostic interrupt (see Diagnoser). A driver that is no Diagnoser fails
// with an error of kind ErrUnsupported, as a BMC that offers none does.
func Diagnose(ctx context.Context, d Driver) error {
	if dd, ok := d.(Diagnoser); ok {
		return dd.Diagnose(ctx)
	}
	return &Error{Driver: fmt.Sprintf("%T", d), Operation: OperationDiagnose, Kind: ErrUnsupported,
		Err: errors.New("the driver cannot send a diagnostic interrupt")}
}

// PowerWatcher is a Driver whose BMC can tell of changes to its host's power as they happen: Redfish's
// event stream (DMTF Server-Sent Events on the EventService). Drivers whose BMC offers nothing of the kind
// (IPMI, Ironic) are no PowerWatcher; callers go through WatchPower, which checks, and poll PowerState.
type PowerWatcher interface {
	// WatchPower holds one event stream to the BMC open until ctx ends or the stream drops, and calls
	// changed, from the calling goroutine, each time the BMC tells of a change to the host's system (its
	// power among them). What an event says is not trusted: the caller reads PowerState to learn the
	// state, as it would after a poll. It returns nil once ctx ends; an error of kind ErrUnsupported when
	// the BMC offers no event stream (the caller polls instead); any other error when the stream could not
	// be opened, was refused or dropped (the caller opens it again, with backoff). It never holds the
	// driver's other calls back: PowerState may be called while a stream is open, from changed as well.
	WatchPower(ctx context.Context, changed func()) error
}

// WatchPower holds d's event stream open (see PowerWatcher). A driver that is no PowerWatcher fails at
// once with an error of kind ErrUnsupported, as a BMC that offers no stream does.
func WatchPower(ctx context.Context, d Driver, changed func()) error {
	if w, ok := d.(PowerWatcher); ok {
		return w.WatchPower(ctx, changed)
	}
	return &Error{Driver: fmt.Sprintf("%T", d), Operation: OperationWatchPower, Kind: ErrUnsupported,
		Err: errors.New("the driver cannot follow an event stream")}
}

// Credentials are a BMC's username and password. They never appear in a string, a log or an error.
type Credentials struct {
	Username string
	Password string
}

// String hides the password, so a credential printed by mistake leaks nothing.
func (c Credentials) String() string {
	return fmt.Sprintf("{Username:%s Password:<redacted>}", c.Username)
}

// GoString hides the password from %#v as well.
func (c Credentials) GoString() string { return c.String() }

// Secret keys holding the credentials.
const (
	UsernameKey = "username"
	PasswordKey = "password"
)

// CredentialsFromSecretData reads credentials from a Secret's data. Both keys are required; surrounding
// whitespace (a trailing newline from `echo`, typically) is trimmed.
func CredentialsFromSecretData(data map[string][]byte) (Credentials, error) {
	c := Credentials{
		Username: strings.TrimSpace(string(data[UsernameKey])),
		Password: strings.TrimSpace(string(data[PasswordKey])),
	}
	var missing []string
	if c.Username == "" {
		missing = append(missing, UsernameKey)
	}
	if c.Password == "" {
		missing = append(missing, PasswordKey)
	}
	if len(missing) > 0 {
		return Credentials{}, &CredentialsError{Missing: missing}
	}
	return c, nil
}

// CredentialsError says which credential keys are missing or empty.
type CredentialsError struct{ Missing []string }

func (e *CredentialsError) Error() string {
	return fmt.Sprintf("credentials secret is missing non-empty keys: %s", strings.Join(e.Missing, ", "))
}

// Options tune how a driver reaches its BMC.
type Options struct {
	// DisableCertificateVerification skips TLS verification of the BMC's certificate. Off by default.
	DisableCertificateVerification bool
	// CABundle, when set, holds the PEM certificates of the only authorities the BMC's certificate is
	// verified against (a site's private CA), instead of the system's. DisableCertificateVerification
	// overrides it. Drivers without TLS (IPMI) ignore it.
	CABundle []byte
	// RequestTimeout bounds one request to the BMC when ctx has no earlier deadline. Zero means 30s.
	RequestTimeout time.Duration
	// Report receives noteworthy things a driver notices (a session re-established, a fallback taken).
	// It may be nil.
	Report func(reason, message string)
	// Transport, when set, is used for HTTP-based drivers instead of a transport built from the options
	// (tests use it to count connections; production leaves it nil).
	Transport http.RoundTripper
}

// DefaultRequestTimeout bounds one BMC request when neither ctx nor Options say otherwise.
const DefaultRequestTimeout = 30 * time.Second

// Timeout returns the request timeout to use.
func (o Options) Timeout() time.Duration {
	if o.RequestTimeout > 0 {
		return o.RequestTimeout
	}
	return DefaultRequestTimeout
}

// ReportFunc returns Report, or a no-op when it is nil.
func (o Options) ReportFunc() func(reason, message string) {
	if o.Report != nil {
		return o.Report
	}
	return func(string, string) {}
}

// Sentinel error kinds. Driver errors wrap exactly one of them; match with errors.Is.
var (
	// ErrUnreachable: the BMC did not answer (connection refused or dropped, DNS, TLS handshake, 5xx).
	ErrUnreachable = errors.New("bmc unreachable")
	// ErrAuthentication: the BMC refused the credentials.
	ErrAuthentication = errors.New("bmc authentication failed")
	// ErrUnsupported: the BMC does not offer what was asked (no such system, no such reset type).
	ErrUnsupported = errors.New("operation not supported by bmc")
	// ErrTimeout: the BMC did not answer within the deadline.
	ErrTimeout = errors.New("bmc request timed out")
)

// Error is what drivers return: which driver and operation failed, the kind (one of the sentinels) and
// the cause. Its message never contains credentials.
type Error struct {
	Driver    string // "redfish", "ipmi", "ironic"
	Operation string // "PowerState", "PowerOn", "PowerOff", "Login", ...
	Kind      error  // one of ErrUnreachable, ErrAuthentication, ErrUnsupported, ErrTimeout
	Err       error  // the cause; may be nil
}

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%s %s: %v", e.Driver, e.Operation, e.Kind)
	}
	return fmt.Sprintf("%s %s: %v: %v", e.Driver, e.Operation, e.Kind, e.Err)
}

// Unwrap exposes both the kind and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Reason is a short UpperCamel word for the error's kind, suitable for a condition reason.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrAuthentication):
		return "AuthenticationFailed"
	case errors.Is(err, ErrTimeout):
		return "Timeout"
	case errors.Is(err, ErrUnsupported):
		return "Unsupported"
	case errors.Is(err, ErrUnreachable):
		return "Unreachable"
	default:
		return "Error"
	}
}
