package bmcaccess

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// Kinds of Access failures. An *Error wraps exactly one of them (or bmc.ErrUnsupported); match with
// errors.Is.
var (
	// ErrBMCNotFound: no BMC object powers the host.
	ErrBMCNotFound = errors.New("no BMC for the host")
	// ErrBMCAmbiguous: more than one BMC object powers the host; none is used.
	ErrBMCAmbiguous = errors.New("more than one BMC for the host")
	// ErrSecretNotFound: the BMC's credentials Secret does not exist in the manager's namespace.
	ErrSecretNotFound = errors.New("credentials secret not found")
	// ErrInvalidCredentials: the Secret lacks a non-empty username or password.
	ErrInvalidCredentials = errors.New("invalid credentials secret")
	// ErrInvalidAddress: the BMC's address cannot be parsed.
	ErrInvalidAddress = errors.New("invalid BMC address")
	// ErrCABundleNotFound: the Secret or ConfigMap the BMC's spec.caBundleRef names, or its key, does not
	// exist in the manager's namespace.
	ErrCABundleNotFound = errors.New("CA bundle not found")
	// ErrCABundleInvalid: the BMC's CA bundle holds no usable PEM certificate.
	ErrCABundleInvalid = errors.New("invalid CA bundle")
)

// Error is what Access returns when a BMC cannot be turned into a driver. Its message names the BMC or
// the node, says what is wrong and never holds a credential.
type Error struct {
	// BMC is the BMC object, when the failure is about one.
	BMC types.NamespacedName
	// Node is the host that was looked up (Host.String), for ForHost failures.
	Node string
	// Kind is ErrBMCNotFound, ErrBMCAmbiguous, ErrSecretNotFound, ErrInvalidCredentials, ErrCABundleNotFound,
	// ErrCABundleInvalid, ErrInvalidAddress or bmc.ErrUnsupported (no driver for the address in this binary, or the driver cannot be built).
	Kind error
	// Err is the cause; it may be nil.
	Err error
}

func (e *Error) Error() string {
	var subject string
	switch {
	case e.BMC.Name != "":
		subject = "BMC " + e.BMC.String()
	default:
		subject = fmt.Sprintf("host %q", e.Node)
	}
	if e.Err == nil {
		return fmt.Sprintf("%s: %v", subject, e.Kind)
	}
	return fmt.Sprintf("%s: %v: %v", subject, e.Kind, e.Err)
}

// Unwrap exposes both the kind and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Reason returns the api/v1alpha1 condition reason for an error from Access or from a driver it built,
// or "" for any other error (an API server error, say: not the BMC's fault, retry it).
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrBMCNotFound):
		return v1alpha1.ReasonBMCNotFound
	case errors.Is(err, ErrBMCAmbiguous):
		return v1alpha1.ReasonBMCAmbiguous
	case errors.Is(err, ErrSecretNotFound):
		return v1alpha1.ReasonSecretNotFound
	case errors.Is(err, ErrInvalidCredentials):
		return v1alpha1.ReasonInvalidCredentials
	case errors.Is(err, ErrInvalidAddress):
		return v1alpha1.ReasonInvalidAddress
	case errors.Is(err, ErrCABundleNotFound):
		return v1alpha1.ReasonCABundleNotFound
	case errors.Is(err, ErrCABundleInvalid):
		return v1alpha1.ReasonCABundleInvalid
	case errors.Is(err, bmc.ErrAuthentication):
		return v1alpha1.ReasonAuthenticationFailed
	case errors.Is(err, bmc.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return v1alpha1.ReasonBMCTimeout
	case errors.Is(err, bmc.ErrUnsupported):
		return v1alpha1.ReasonUnsupported
	case bmc.IsCertificateError(err):
		return v1alpha1.ReasonCertificateVerificationFailed
	case errors.Is(err, bmc.ErrUnreachable):
		return v1alpha1.ReasonBMCUnreachable
	default:
		return ""
	}
}

// redactedError has the credentials cut out of its message; errors.Is and errors.As still reach the
// cause, for the kind.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// secretForms returns the spellings in which a driver, a library or a BMC could echo the credentials
// back: the password raw, JSON-, URL- and base64-encoded, and the HTTP basic auth token.
func secretForms(creds bmc.Credentials) []string {
	if creds.Password == "" {
		return nil
	}
	p := creds.Password
	json := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(p)
	return []string{
		base64.StdEncoding.EncodeToString([]byte(creds.Username + ":" + p)),
		p, json, url.QueryEscape(p), url.PathEscape(p),
		base64.StdEncoding.EncodeToString([]byte(p)),
	}
}

// redact returns err, or an error with the same chain whose message reads "<redacted>" wherever one of
// forms appeared. It is the last line of defence: drivers already keep credentials out of errors.
func redact(err error, forms []string) error {
	if err == nil || len(forms) == 0 {
		return err
	}
	msg := err.Error()
	clean := scrub(msg, forms)
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}

// scrub returns s with every one of forms replaced by "<redacted>".
func scrub(s string, forms []string) string {
	for _, f := range forms {
		if f != "" {
			s = strings.ReplaceAll(s, f, "<redacted>")
		}
	}
	return s
}
