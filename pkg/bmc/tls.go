package bmc

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// TLSConfig returns the TLS configuration the options ask for: the system's authorities, those of
// CABundle only when it is set, or no verification at all with DisableCertificateVerification. It fails
// when CABundle holds no certificate or one that does not parse (see ParseCABundle).
func (o Options) TLSConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.DisableCertificateVerification} //nolint:gosec // the admin's explicit choice
	if len(o.CABundle) > 0 && !o.DisableCertificateVerification {
		pool, err := ParseCABundle(o.CABundle)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// TLSKey names the TLS configuration of the options, for drivers that share one HTTP transport between
// the BMCs that verify alike: "insecure", "system", or "ca:" and the SHA-256 of the bundle.
func (o Options) TLSKey() string {
	switch {
	case o.DisableCertificateVerification:
		return "insecure"
	case len(o.CABundle) > 0:
		return fmt.Sprintf("ca:%x", sha256.Sum256(o.CABundle))
	default:
		return "system"
	}
}

// CABundleError says why a CA bundle cannot be used. Its message never quotes the bundle.
type CABundleError struct{ Reason string }

func (e *CABundleError) Error() string { return "invalid CA bundle: " + e.Reason }

// ParseCABundle returns the pool of the PEM CERTIFICATE blocks in bundle. Other PEM blocks (a private key
// pasted by mistake, say) are ignored; a bundle without any certificate, or with one that does not parse,
// is refused with a *CABundleError: verifying against an empty or partial pool would fail on every
// connection with a far less helpful message.
func ParseCABundle(bundle []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, &CABundleError{Reason: fmt.Sprintf("certificate %d does not parse: %v", n+1, err)}
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, &CABundleError{Reason: "no PEM-encoded certificate (-----BEGIN CERTIFICATE-----) found"}
	}
	return pool, nil
}

// CertificateError is a TLS connection refused because the BMC's certificate did not verify: an unknown
// authority, a name that is not the address's host, an expired certificate. Drivers wrap such errors in
// it (see ExplainCertificate); the kind stays ErrUnreachable.
type CertificateError struct{ Err error }

func (e *CertificateError) Error() string {
	return fmt.Sprintf("certificate verification failed (trust the authority that signed the BMC's certificate with a CA bundle, or disable certificate verification for this BMC): %v", e.Err)
}

func (e *CertificateError) Unwrap() error { return e.Err }

// ExplainCertificate wraps err in a *CertificateError when a certificate verification failure is its
// cause, and returns it unchanged otherwise.
func ExplainCertificate(err error) error {
	var already *CertificateError
	if err == nil || errors.As(err, &already) || !verificationFailure(err) {
		return err
	}
	return &CertificateError{Err: err}
}

// IsCertificateError says whether err is (or wraps) a certificate verification failure.
func IsCertificateError(err error) bool {
	var certErr *CertificateError
	return errors.As(err, &certErr) || verificationFailure(err)
}

// verificationFailure says whether crypto/tls or crypto/x509 refused a certificate somewhere in err.
func verificationFailure(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &hostname) || errors.As(err, &invalid)
}
