package redfish

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// unsupportedError says the BMC does not offer what was asked.
type unsupportedError string

func (e unsupportedError) Error() string { return string(e) }

// fail turns err into a *bmc.Error of the right kind, with the password and the session token scrubbed
// from its message. Call it with the driver's lock held.
func (d *driver) fail(ctx context.Context, op string, err error) error {
	return d.failWith(ctx, op, err, d.token)
}

// failWith is fail for a caller that does not hold the lock: token is the session token it used.
func (d *driver) failWith(ctx context.Context, op string, err error, token string) error {
	if err == nil {
		return nil
	}
	return &bmc.Error{Driver: DriverName, Operation: op, Kind: kindOf(ctx, err),
		Err: scrub(bmc.ExplainCertificate(err), d.creds.Password, token, basicCredentials(d.creds))}
}

// basicCredentials is the credentials as HTTP basic auth sends them (base64 of user:password): a BMC that
// echoes the request's Authorization header in an error would otherwise put the password in ours.
func basicCredentials(c bmc.Credentials) string {
	if c.Password == "" {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password))
}

// kindOf classifies an error: what the BMC said (its status, a redirect elsewhere, an answer too large)
// first, then what the network did. A redirect that leaves the BMC is unsupported: the BMC cannot be
// used as addressed, and its address needs fixing. An answer too large is a bad answer, unreachable like
// a garbled one.
func kindOf(ctx context.Context, err error) error {
	var status *statusError
	var unsupported unsupportedError
	var redirect *bmc.RedirectError
	var tooLarge *bmc.ResponseTooLargeError
	var netErr net.Error
	switch {
	case errors.As(err, &unsupported), errors.Is(err, errNoTarget), errors.As(err, &redirect):
		return bmc.ErrUnsupported
	case errors.As(err, &tooLarge):
		return bmc.ErrUnreachable
	case errors.As(err, &status):
		return statusKind(status.code)
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.As(err, &netErr) && netErr.Timeout():
		return bmc.ErrTimeout
	default: // refused, reset, dropped, DNS, TLS, a garbled answer
		return bmc.ErrUnreachable
	}
}

// statusKind classifies an HTTP error status. What may pass if tried again (5xx, 408, 409, 429) is
// unreachable; other refusals of the request itself (404 no such system, 400 no such reset type) are
// unsupported.
func statusKind(code int) error {
	switch {
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return bmc.ErrAuthentication
	case code == http.StatusNotImplemented:
		return bmc.ErrUnsupported
	case code >= 500, code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooManyRequests:
		return bmc.ErrUnreachable
	case code >= 400:
		return bmc.ErrUnsupported
	default:
		return bmc.ErrUnreachable
	}
}

// scrubbed is an error whose message has the password cut out. errors.Is and errors.As still reach the
// cause.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// scrub cuts the secrets (the password, the session token), in the forms a message could carry them
// (raw, JSON- or URL-escaped), out of err's message. The driver never puts a secret in an error; this
// guards against a BMC or a library that echoes one.
func scrub(err error, secrets ...string) error {
	msg := err.Error()
	clean := msg
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		jsonForm, _ := json.Marshal(secret)
		for _, form := range []string{secret, strings.Trim(string(jsonForm), `"`), url.QueryEscape(secret), url.PathEscape(secret)} {
			clean = strings.ReplaceAll(clean, form, "<redacted>")
		}
	}
	if clean == msg {
		return err
	}
	return &scrubbed{msg: clean, err: err}
}
