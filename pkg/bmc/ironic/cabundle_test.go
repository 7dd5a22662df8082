package ironic

import (
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/clock"

	"github.com/metalheal/metalheal/internal/testca"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/ironic/ironictest"
)

// TestCABundle: Ironic behind a certificate a private CA signed is reached with that CA's bundle, and
// refused with a certificate error without it.
func TestCABundle(t *testing.T) {
	siteCA, err := testca.New("site CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := testca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	api := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(nodeUUID, ironictest.PowerOff)
	srv, err := siteCA.NewTLSServer(api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	address := "ironic+https://" + strings.TrimPrefix(srv.URL, "https://") + "/" + nodeUUID

	for name, tc := range map[string]struct {
		opts     bmc.Options
		wantCert bool
	}{
		"the site CA's bundle":                {opts: bmc.Options{CABundle: siteCA.PEM}},
		"no bundle: the system's authorities": {opts: bmc.Options{}, wantCert: true},
		"another CA's bundle":                 {opts: bmc.Options{CABundle: otherCA.PEM}, wantCert: true},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			addr, err := bmc.ParseAddress(address)
			g.Expect(err).NotTo(HaveOccurred())
			d, err := newDriver(addr, creds, tc.opts, clock.RealClock{})
			g.Expect(err).NotTo(HaveOccurred())
			state, err := d.PowerState(t.Context())
			if !tc.wantCert {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(state).To(Equal(bmc.PowerStateOff))
				return
			}
			g.Expect(err).To(MatchError(bmc.ErrUnreachable))
			g.Expect(bmc.IsCertificateError(err)).To(BeTrue(), "%v", err)
			g.Expect(err).To(MatchError(ContainSubstring("certificate verification failed")))
		})
	}
}

func TestInvalidCABundleIsRefused(t *testing.T) {
	g := NewWithT(t)
	addr, err := bmc.ParseAddress("ironic+https://127.0.0.1:6385/" + nodeUUID)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = newDriver(addr, creds, bmc.Options{CABundle: []byte("not a certificate")}, clock.RealClock{})
	var bundleErr *bmc.CABundleError
	g.Expect(errors.As(err, &bundleErr)).To(BeTrue(), "want a *bmc.CABundleError, got %v", err)
}
