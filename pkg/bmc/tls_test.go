package bmc_test

import (
	"crypto/x509"
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/internal/testca"
	"github.com/metalheal/metalheal/pkg/bmc"
)

func TestTLSConfig(t *testing.T) {
	ca, err := testca.New("site CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testca.New("other CA")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		opts         bmc.Options
		wantInsecure bool
		wantRoots    int // certificates in RootCAs; -1: nil, the system's
		wantKey      string
		wantErr      bool
	}{
		"system authorities":   {opts: bmc.Options{}, wantRoots: -1, wantKey: "system"},
		"verification off":     {opts: bmc.Options{DisableCertificateVerification: true}, wantInsecure: true, wantRoots: -1, wantKey: "insecure"},
		"a private CA":         {opts: bmc.Options{CABundle: ca.PEM}, wantRoots: 1, wantKey: "ca:"},
		"two CAs and a key":    {opts: bmc.Options{CABundle: fmt.Appendf(nil, "%s-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n%s", ca.PEM, other.PEM)}, wantRoots: 2, wantKey: "ca:"},
		"off wins over a CA":   {opts: bmc.Options{CABundle: ca.PEM, DisableCertificateVerification: true}, wantInsecure: true, wantRoots: -1, wantKey: "insecure"},
		"a bundle without one": {opts: bmc.Options{CABundle: []byte("ca.crt")}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			cfg, err := tc.opts.TLSConfig()
			if tc.wantErr {
				var bundleErr *bmc.CABundleError
				g.Expect(errors.As(err, &bundleErr)).To(BeTrue(), "%v", err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.InsecureSkipVerify).To(Equal(tc.wantInsecure))
			if tc.wantRoots < 0 {
				g.Expect(cfg.RootCAs).To(BeNil())
			} else {
				g.Expect(cfg.RootCAs.Subjects()).To(HaveLen(tc.wantRoots)) //nolint:staticcheck // counting our own pool
			}
			g.Expect(tc.opts.TLSKey()).To(HavePrefix(tc.wantKey))
		})
	}
	g := NewWithT(t)
	g.Expect(bmc.Options{CABundle: ca.PEM}.TLSKey()).To(Equal(bmc.Options{CABundle: append([]byte{}, ca.PEM...)}.TLSKey()), "one transport per bundle")
	g.Expect(bmc.Options{CABundle: ca.PEM}.TLSKey()).NotTo(Equal(bmc.Options{CABundle: other.PEM}.TLSKey()))
}

func TestIsCertificateError(t *testing.T) {
	g := NewWithT(t)
	unknown := fmt.Errorf("get: %w", x509.UnknownAuthorityError{})
	g.Expect(bmc.IsCertificateError(unknown)).To(BeTrue())
	g.Expect(bmc.IsCertificateError(&bmc.Error{Kind: bmc.ErrUnreachable, Err: bmc.ExplainCertificate(unknown)})).To(BeTrue())
	g.Expect(bmc.ExplainCertificate(unknown)).To(MatchError(ContainSubstring("certificate verification failed")))
	g.Expect(bmc.ExplainCertificate(bmc.ExplainCertificate(unknown)).Error()).To(Equal(bmc.ExplainCertificate(unknown).Error()), "wrapped once")
	g.Expect(bmc.IsCertificateError(errors.New("connection refused"))).To(BeFalse())
	g.Expect(bmc.IsCertificateError(nil)).To(BeFalse())
}
