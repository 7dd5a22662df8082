package redfish_test

import (
	"net/url"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/internal/testca"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/redfish"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// TestCABundle: a BMC whose certificate a private CA signed is reached with that CA's bundle, and refused
// with a certificate error without it or with another CA's.
func TestCABundle(t *testing.T) {
	siteCA, err := testca.New("site CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := testca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	m := startMock(t, redfishmock.New().WithSystems(1))
	srv, err := siteCA.NewTLSServer(m) // the mock's Redfish service, over TLS with a certificate siteCA signed
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)

	tests := map[string]struct {
		opts     bmc.Options
		wantCert bool
	}{
		"the site CA's bundle":                 {opts: bmc.Options{CABundle: siteCA.PEM}},
		"the site CA among others":             {opts: bmc.Options{CABundle: append(append([]byte{}, otherCA.PEM...), siteCA.PEM...)}},
		"no bundle: the system's authorities":  {opts: bmc.Options{}, wantCert: true},
		"another CA's bundle":                  {opts: bmc.Options{CABundle: otherCA.PEM}, wantCert: true},
		"verification disabled beside another": {opts: bmc.Options{CABundle: otherCA.PEM, DisableCertificateVerification: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			d := newDriver(t, srv.URL, "", creds, tc.opts)
			state, err := d.PowerState(t.Context())
			if !tc.wantCert {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(state).To(Equal(bmc.PowerStateOn))
				return
			}
			g.Expect(err).To(MatchError(bmc.ErrUnreachable))
			g.Expect(bmc.IsCertificateError(err)).To(BeTrue(), "%v", err)
			g.Expect(err).To(MatchError(ContainSubstring("certificate verification failed")))
			g.Expect(err.Error()).NotTo(ContainSubstring(password))
		})
	}
}

func TestInvalidCABundleIsRefused(t *testing.T) {
	u, err := url.Parse("https://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	for name, bundle := range map[string][]byte{
		"not PEM":               []byte("ca.crt"),
		"a key, no certificate": []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
		"a garbled certificate": []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := redfish.New(u, "", creds, bmc.Options{CABundle: bundle})
			var bundleErr *bmc.CABundleError
			NewWithT(t).Expect(err).To(BeAssignableToTypeOf(bundleErr))
		})
	}
}
