package bmc_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/ipmi"
	"github.com/metalheal/metalheal/pkg/bmc/ironic"
	"github.com/metalheal/metalheal/pkg/bmc/ironic/ironictest"
	"github.com/metalheal/metalheal/test/ipmisim"
)

// TestNoPasswordInErrors drives every driver of this module into every failure it can report and checks
// that neither the password nor the HTTP basic token built from it appears in an error or a report.
// (The Redfish driver has its own test; add its rows here once it exists.)
func TestNoPasswordInErrors(t *testing.T) {
	const (
		user     = "admin"
		password = "Zq7-never-SHOWN-pw" // 18 bytes: fits IPMI's 20-byte limit
		node     = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"
	)
	creds := bmc.Credentials{Username: user, Password: password}
	token := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))

	sim := ipmisim.Start(t) // its password is not ours: every call fails authentication
	locked := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(node, ironictest.PowerOn)
	locked.LockNode(node, 1000)
	wrongPassword := ironictest.NewServer(t).WithBasicAuth(user, "another-password").WithNode(node, ironictest.PowerOn)
	// A broken proxy that echoes the request's credentials back in its error page.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		http.Error(w, fmt.Sprintf("upstream failed for %s (Authorization: %s, user %s, password %s)", r.URL, r.Header.Get("Authorization"), u, p), http.StatusBadGateway)
	}))
	t.Cleanup(echo.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	var reports []string
	opts := bmc.Options{
		RequestTimeout: time.Second,
		Report:         func(reason, message string) { reports = append(reports, reason+": "+message) },
	}
	registry := bmc.NewRegistry(bmc.WithMetrics(bmc.NewMetrics(nil)))
	NewWithT(t).Expect(registry.Register(bmc.DriverIPMI, ipmi.New)).To(Succeed())
	NewWithT(t).Expect(registry.Register(bmc.DriverIronic, ironic.New)).To(Succeed())

	hostport := func(u string) string { return strings.TrimPrefix(u, "http://") }
	for _, tc := range []struct {
		name    string
		address string
	}{
		{name: "ipmi wrong password", address: sim.Address},
		{name: "ipmi nobody listening", address: "ipmi://127.0.0.1:" + strconv.Itoa(freeUDPPort(t))},
		{name: "ipmi unknown host", address: "ipmi://bmc.invalid"},
		{name: "ironic wrong password", address: wrongPassword.Address(node)},
		{name: "ironic unknown node", address: locked.Address("no-such-node")},
		{name: "ironic node locked past the deadline", address: locked.Address(node)},
		{name: "ironic proxy echoing credentials", address: "ironic://" + hostport(echo.URL) + "/" + node},
		{name: "ironic connection refused", address: "ironic://" + hostport(closed.URL) + "/" + node},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d, err := registry.New(tc.address, creds, opts)
			g.Expect(err).NotTo(HaveOccurred())
			ctx := context.Background()
			_, stateErr := d.PowerState(ctx)
			errs := []error{stateErr, d.PowerOn(ctx), d.PowerOff(ctx, true), d.PowerOff(ctx, false), bmc.Diagnose(ctx, d), d.Close(ctx)}

			failures := 0
			for _, err := range errs {
				if err == nil {
					continue
				}
				failures++
				g.Expect(err.Error()).NotTo(ContainSubstring(password))
				g.Expect(err.Error()).NotTo(ContainSubstring(token))
				g.Expect(fmt.Sprintf("%+v %#v", err, err)).NotTo(ContainSubstring(password))
			}
			g.Expect(failures).To(BeNumerically(">=", 3), "every power change must fail: %v", errs)
		})
	}

	t.Run("address with embedded credentials", func(t *testing.T) {
		g := NewWithT(t)
		_, err := registry.New("ironic://"+user+":"+password+"@10.0.0.1/"+node, creds, opts)
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).NotTo(ContainSubstring(password))
	})

	g := NewWithT(t)
	g.Expect(reports).NotTo(BeEmpty(), "the locked node was reported")
	for _, r := range reports {
		g.Expect(r).NotTo(ContainSubstring(password))
	}
}

func freeUDPPort(t *testing.T) int {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck
	return c.LocalAddr().(*net.UDPAddr).Port
}
