package redfishmock_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// These tests drive the mock with real Redfish clients from Debian, so the mock is checked against
// implementations that are not ours: redfishtool (the DMTF's) and sushycli (OpenStack sushy, as Ironic
// uses it). A missing tool is a failure, not a skip.

// tool finds a client's binary or fails the test saying which package to install.
func tool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: apt-get install -y %s (%v)", name, debianPackage, err)
	}
	return path
}

// run runs a client against loopback only and returns its output; it fails the test if the client fails.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		// python-requests lets these override the CA file a client passes explicitly.
		if !strings.HasPrefix(kv, "REQUESTS_CA_BUNDLE=") && !strings.HasPrefix(kv, "CURL_CA_BUNDLE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(bin), args, err, out)
	}
	return string(out)
}

func TestRedfishtool(t *testing.T) {
	bin := tool(t, "redfishtool", "redfishtool")
	clk := fakeClock()
	m := start(t, redfishmock.New().WithSystems(2).WithClock(clk).WithPowerDelay(time.Minute))
	u, err := url.Parse(m.URL())
	if err != nil {
		t.Fatal(err)
	}
	rt := func(auth string, args ...string) string {
		return run(t, bin, append([]string{"-r", u.Host, "-S", "Never", "-u", "admin", "-p", "password", "-A", auth}, args...)...)
	}

	t.Run("list systems with a session", func(t *testing.T) {
		g := NewWithT(t)
		m.ResetRequests()
		out := rt("Session", "Systems", "list")
		g.Expect(out).To(And(ContainSubstring(`"/redfish/v1/Systems/1"`), ContainSubstring(`"/redfish/v1/Systems/2"`)))
		g.Expect(m.Requests()).To(ContainElement(And(HaveField("Path", "/redfish/v1/Systems"), HaveField("Auth", redfishmock.AuthSession))))
		g.Expect(m.SessionCount()).To(BeZero(), "redfishtool logs out")
	})
	t.Run("read power state with basic auth", func(t *testing.T) {
		g := NewWithT(t)
		m.ResetRequests()
		g.Expect(rt("Basic", "Systems", "-I", "2", "get", "-P", "PowerState")).To(MatchJSON(`{"PowerState": "On"}`))
		g.Expect(m.Requests()).To(ContainElement(And(HaveField("Path", "/redfish/v1/Systems/2"), HaveField("Auth", redfishmock.AuthBasic))))
	})
	t.Run("reset", func(t *testing.T) {
		g := NewWithT(t)
		rt("Session", "Systems", "-I", "2", "reset", "ForceOff")
		g.Expect(m.PowerState("2")).To(Equal(redfishmock.PoweringOff))
		g.Expect(rt("Session", "Systems", "-I", "2", "get", "-P", "PowerState")).To(MatchJSON(`{"PowerState": "PoweringOff"}`))
		clk.Step(time.Minute)
		g.Expect(rt("Session", "Systems", "-I", "2", "get", "-P", "PowerState")).To(MatchJSON(`{"PowerState": "Off"}`))
		g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn))
	})
}

func TestSushycli(t *testing.T) {
	bin := tool(t, "sushycli", "python3-sushy-cli")
	m := start(t, redfishmock.New().WithSystems(2).WithTLS().WithCredentials("root", "calvin"))
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, m.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--username", "root", "--password", "calvin", "--service-endpoint", m.URL(), "--tls-certificates", ca}
	sushy := func(args ...string) string { return run(t, bin, append(args, common...)...) }

	g := NewWithT(t)
	g.Expect(sushy("system", "list", "-f", "json")).To(MatchJSON(`[
		{"Name": "Mock system 1", "Identity": "00000000-0000-4000-8000-000000000001", "System ID": "/redfish/v1/Systems/1"},
		{"Name": "Mock system 2", "Identity": "00000000-0000-4000-8000-000000000002", "System ID": "/redfish/v1/Systems/2"}]`))
	g.Expect(sushy("system", "power", "show", "--system-id", "/redfish/v1/Systems/1", "-f", "value")).To(Equal("PowerState.ON\n"))

	sushy("system", "power", "off", "--system-id", "/redfish/v1/Systems/1")
	g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOff))
	g.Expect(m.PowerState("2")).To(Equal(redfishmock.PowerOn))
	g.Expect(sushy("system", "power", "show", "--system-id", "/redfish/v1/Systems/1", "-f", "value")).To(Equal("PowerState.OFF\n"))

	sushy("system", "power", "on", "--system-id", "/redfish/v1/Systems/1")
	g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn))
	g.Expect(m.Requests()).To(ContainElement(And(
		HaveField("Path", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"), HaveField("Auth", redfishmock.AuthSession))))
}
