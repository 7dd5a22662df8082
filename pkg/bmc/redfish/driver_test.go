package redfish_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/redfish"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// password is distinctive, so a leak into an error string cannot hide.
const password = `s3cr3t-"P@ss/w0rd`

var creds = bmc.Credentials{Username: "admin", Password: password}

const sessionsPath = "/redfish/v1/SessionService/Sessions"

func fakeClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

// startMock starts m with our credentials and stops it when the test ends.
func startMock(t *testing.T, m *redfishmock.Mock) *redfishmock.Mock {
	t.Helper()
	started, err := m.WithCredentials(creds.Username, creds.Password).Start()
	if err != nil {
		t.Fatalf("start mock: %v", err)
	}
	t.Cleanup(started.Close)
	return started
}

// reports records what a driver reports.
type reports struct {
	mu      sync.Mutex
	reasons []string
}

func (r *reports) report(reason, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
}

func (r *reports) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reasons...)
}

// newDriver returns a driver for the system at systemPath of the mock at base.
func newDriver(t *testing.T, base, systemPath string, c bmc.Credentials, opts bmc.Options) bmc.Driver {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	d, err := redfish.New(u, systemPath, c, opts)
	if err != nil {
		t.Fatalf("new driver: %v", err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

// count counts recorded requests with this method and path.
func count(m *redfishmock.Mock, method, path string) int {
	n := 0
	for _, r := range m.Requests() {
		if r.Method == method && r.Path == path {
			n++
		}
	}
	return n
}

func TestPowerCycle(t *testing.T) {
	const delay = 30 * time.Second
	tests := map[string]struct {
		force     bool
		wantReset string
	}{
		"forced power-off cuts the power":  {force: true, wantReset: "ForceOff"},
		"graceful power-off asks the host": {force: false, wantReset: "GracefulShutdown"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := t.Context()
			clk := fakeClock()
			m := startMock(t, redfishmock.New().WithSystems(2).WithClock(clk).WithPowerDelay(delay))
			d := newDriver(t, m.URL(), m.SystemPath("2"), creds, bmc.Options{})

			g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOn))
			g.Expect(d.PowerOff(ctx, tc.force)).To(Succeed())
			g.Expect(m.PowerState("2")).To(Equal(redfishmock.PoweringOff))
			g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateUnknown), "powering off is not off yet")
			g.Expect(d.PowerOff(ctx, false)).To(Succeed(), "asking again while it shuts down is fine")
			clk.Step(delay)
			g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOff))
			g.Expect(d.PowerOff(ctx, true)).To(Succeed(), "off when off succeeds")

			g.Expect(d.PowerOn(ctx)).To(Succeed())
			g.Expect(m.PowerState("2")).To(Equal(redfishmock.PoweringOn))
			g.Expect(d.PowerOn(ctx)).To(Succeed(), "on while powering on succeeds")
			clk.Step(delay)
			g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOn))
			g.Expect(d.PowerOn(ctx)).To(Succeed(), "on when on succeeds")

			g.Expect(m.Resets("2")).To(Equal([]string{tc.wantReset, "On"}), "no-ops send no reset")
			g.Expect(m.Resets("1")).To(BeEmpty(), "the named system, not another")
		})
	}
}

func TestForcedPowerOffDuringGracefulShutdown(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1).WithClock(fakeClock()).WithPowerDelay(time.Minute))
	d := newDriver(t, m.URL(), m.SystemPath("1"), creds, bmc.Options{})

	g.Expect(d.PowerOff(t.Context(), false)).To(Succeed())
	g.Expect(d.PowerOff(t.Context(), true)).To(Succeed())
	g.Expect(m.Resets("1")).To(Equal([]string{"GracefulShutdown", "ForceOff"}), "force escalates a slow shutdown")
}

func TestResetTypeFallbacks(t *testing.T) {
	g := NewWithT(t)
	var r reports
	m := startMock(t, redfishmock.New().WithSystems(1).WithResetTypes("ForceOff", "ForceRestart"))
	d := newDriver(t, m.URL(), m.SystemPath("1"), creds, bmc.Options{Report: r.report})

	err := d.PowerOff(t.Context(), false)
	g.Expect(err).To(MatchError(bmc.ErrUnsupported), "no GracefulShutdown allowed: forcing is the caller's decision")
	g.Expect(err).To(MatchError(ContainSubstring("does not allow the GracefulShutdown reset")))
	g.Expect(m.Resets("1")).To(BeEmpty(), "nothing is sent in its place")
	g.Expect(d.PowerOff(t.Context(), true)).To(Succeed())
	g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}))
	g.Expect(r.get()).To(BeEmpty())

	err = d.PowerOn(t.Context())
	g.Expect(err).To(MatchError(bmc.ErrUnsupported), "On is not allowed")
	g.Expect(err).To(MatchError(ContainSubstring("does not allow the On reset")))
	g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}))
}

// The diagnostic interrupt is the Nmi reset, sent to a system that allows it and is on. One that does not
// list Nmi among its allowed reset types (AllowableValues) is sent nothing, and the error is unsupported,
// as is a BMC's refusal of it.
func TestDiagnose(t *testing.T) {
	for name, tc := range map[string]struct {
		resetTypes  []string // allowed; nil: all
		off         bool
		wantErr     error
		wantResets  []string
		wantMessage string
	}{
		"an NMI is the Nmi reset":             {wantResets: []string{"Nmi"}},
		"a system that does not allow it":     {resetTypes: []string{"On", "ForceOff"}, wantErr: bmc.ErrUnsupported, wantMessage: "does not allow the Nmi reset"},
		"a host that is off is sent nothing":  {off: true},
		"a system that allows it, and others": {resetTypes: []string{"On", "ForceOff", "Nmi"}, wantResets: []string{"Nmi"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			mock := redfishmock.New().WithSystems(1)
			if tc.resetTypes != nil {
				mock = mock.WithResetTypes(tc.resetTypes...)
			}
			m := startMock(t, mock)
			if tc.off {
				g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
			}
			d := newDriver(t, m.URL(), m.SystemPath("1"), creds, bmc.Options{})

			err := bmc.Diagnose(t.Context(), d)
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantMessage)))
				g.Expect(err).To(MatchError(ContainSubstring("redfish Diagnose")))
			}
			g.Expect(m.Resets("1")).To(Equal(tc.wantResets))
		})
	}
}

// A host that powers itself off after an NMI (a kernel dump): the driver sends the interrupt and reads
// the host going down on its own.
func TestDiagnoseThenTheHostPowersOff(t *testing.T) {
	g := NewWithT(t)
	clk := fakeClock()
	m := startMock(t, redfishmock.New().WithSystems(1).WithClock(clk).WithPowerDelay(5*time.Second).
		WithHost(redfishmock.Host{PowerOffAfterNMI: 20 * time.Second}))
	d := newDriver(t, m.URL(), m.SystemPath("1"), creds, bmc.Options{})

	g.Expect(bmc.Diagnose(t.Context(), d)).To(Succeed())
	g.Expect(d.PowerState(t.Context())).To(Equal(bmc.PowerStateOn), "writing its dump")
	clk.Step(20 * time.Second)
	g.Expect(d.PowerState(t.Context())).To(Equal(bmc.PowerStateUnknown), "powering off")
	clk.Step(5 * time.Second)
	g.Expect(d.PowerState(t.Context())).To(Equal(bmc.PowerStateOff))
	g.Expect(m.Resets("1")).To(Equal([]string{"Nmi"}), "no power-off was sent")
}

func TestSessionIsReused(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1))
	d := newDriver(t, m.URL(), "", creds, bmc.Options{})

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := d.PowerState(t.Context())
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
	wg.Wait()
	g.Expect(d.PowerOff(t.Context(), true)).To(Succeed())
	g.Expect(d.PowerOn(t.Context())).To(Succeed())

	g.Expect(count(m, "POST", sessionsPath)).To(Equal(1), "one login for every call")
	g.Expect(count(m, "GET", "/redfish/v1/Systems")).To(Equal(1), "the system is found once")
	g.Expect(m.SessionCount()).To(Equal(1))
	for _, r := range m.Requests() {
		if r.System != "" {
			g.Expect(r.Auth).To(Equal(redfishmock.AuthSession), "%s %s", r.Method, r.Path)
		}
	}

	g.Expect(d.Close(t.Context())).To(Succeed())
	g.Expect(m.SessionCount()).To(BeZero(), "Close logs out")
	g.Expect(count(m, "DELETE", sessionsPath+"/1")).To(Equal(1))
}

func TestExpiredSessionIsReestablished(t *testing.T) {
	g := NewWithT(t)
	var r reports
	m := startMock(t, redfishmock.New().WithSystems(1))
	d := newDriver(t, m.URL(), m.SystemPath("1"), creds, bmc.Options{Report: r.report})

	g.Expect(d.PowerState(t.Context())).To(Equal(bmc.PowerStateOn))
	m.ExpireSessions()
	g.Expect(d.PowerOff(t.Context(), true)).To(Succeed(), "a 401 on the old session logs in again and retries")
	g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOff))
	g.Expect(count(m, "POST", sessionsPath)).To(Equal(2))
	g.Expect(r.get()).To(Equal([]string{"SessionReestablished"}))

	m.ExpireSessions()
	g.Expect(d.Close(t.Context())).To(Succeed(), "logging out of a session the BMC dropped is fine")
}

func TestBasicAuthFallback(t *testing.T) {
	g := NewWithT(t)
	var r reports
	m := startMock(t, redfishmock.New().WithSystems(1).WithoutSessionService())
	d := newDriver(t, m.URL(), "", creds, bmc.Options{Report: r.report})

	g.Expect(d.PowerOff(t.Context(), true)).To(Succeed())
	g.Expect(d.PowerState(t.Context())).To(Equal(bmc.PowerStateOff))
	g.Expect(count(m, "POST", sessionsPath)).To(BeZero())
	g.Expect(m.Requests()).To(ContainElement(And(HaveField("System", "1"), HaveField("Auth", redfishmock.AuthBasic))))
	for _, req := range m.Requests() {
		g.Expect(req.Auth).NotTo(Equal(redfishmock.AuthSession))
	}
	g.Expect(r.get()).To(Equal([]string{"BasicAuthFallback"}), "reported once")
	g.Expect(d.Close(t.Context())).To(Succeed())
}

func TestSystemSelection(t *testing.T) {
	tests := map[string]struct {
		systems    int
		systemPath string
		wantErr    error
		wantMsg    string
		wantReset  string // the system that gets the reset
	}{
		"the address names the system":       {systems: 3, systemPath: "/redfish/v1/Systems/2", wantReset: "2"},
		"a trailing slash is fine":           {systems: 3, systemPath: "/redfish/v1/Systems/3/", wantReset: "3"},
		"the only system when none is named": {systems: 1, wantReset: "1"},
		"several systems and none named":     {systems: 3, wantErr: bmc.ErrUnsupported, wantMsg: "lists 3 ComputerSystems"},
		"no such system":                     {systems: 1, systemPath: "/redfish/v1/Systems/9", wantErr: bmc.ErrUnsupported, wantMsg: "404"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := startMock(t, redfishmock.New().WithSystems(tc.systems))
			d := newDriver(t, m.URL(), tc.systemPath, creds, bmc.Options{})

			err := d.PowerOff(t.Context(), true)
			if tc.wantErr != nil {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantMsg)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(m.Resets(tc.wantReset)).To(Equal([]string{"ForceOff"}))
		})
	}
}

func TestCertificateVerification(t *testing.T) {
	m := startMock(t, redfishmock.New().WithSystems(1).WithTLS())
	tests := map[string]struct {
		opts    bmc.Options
		wantErr bool
	}{
		"verified by default, and the mock's certificate is self-signed": {opts: bmc.Options{}, wantErr: true},
		"verification disabled": {opts: bmc.Options{DisableCertificateVerification: true}},
		"verified against a CA that signs it": {opts: bmc.Options{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: m.CertPool(), MinVersion: tls.VersionTLS12}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			d := newDriver(t, m.URL(), "", creds, tc.opts)
			state, err := d.PowerState(t.Context())
			if !tc.wantErr {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(state).To(Equal(bmc.PowerStateOn))
				return
			}
			g.Expect(err).To(MatchError(bmc.ErrUnreachable))
			g.Expect(err).To(MatchError(ContainSubstring("certificate verification failed")))
			g.Expect(bmc.Reason(err)).To(Equal("Unreachable"))
		})
	}
}

func TestNewRefusesBadEndpoints(t *testing.T) {
	for _, raw := range []string{"ftp://bmc", "https://", "redfish://bmc/redfish/v1/Systems/1"} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = redfish.New(u, "", creds, bmc.Options{})
		NewWithT(t).Expect(err).To(HaveOccurred(), raw)
	}
	_, err := redfish.New(nil, "", creds, bmc.Options{})
	NewWithT(t).Expect(err).To(HaveOccurred())
}

// BMCs behind one address (a chassis manager, a Redfish proxy, an emulator) each keep their connection
// between calls: a wave of power cycles there does not connect anew for nearly every request.
func TestBMCsSharingAnAddressKeepTheirConnections(t *testing.T) {
	g := NewWithT(t)
	const n, rounds = 8, 5
	m := startMock(t, redfishmock.New().WithSystems(n))
	drivers := make([]bmc.Driver, n)
	for i := range drivers {
		drivers[i] = newDriver(t, m.URL(), m.SystemPath(strconv.Itoa(i+1)), creds, bmc.Options{})
	}
	// warm: the connections of the first round, in which every driver logs in (and dials may race).
	warm := 0
	for round := range rounds { // every BMC polled at once, round after round
		if round == 1 {
			warm = m.Connections()
		}
		var wg sync.WaitGroup
		for _, d := range drivers {
			wg.Go(func() {
				_, err := d.PowerState(t.Context())
				g.Expect(err).NotTo(HaveOccurred())
			})
		}
		wg.Wait()
	}
	// The connections are kept between polls: the later rounds connect anew only by chance (a dial that
	// raced a connection on its way back to the pool). With Go's default of two idle connections per
	// address, 6 of every round's 8 polls connect anew.
	g.Expect(m.Connections()-warm).To(BeNumerically("<", n), "connections made by %d more rounds of polls of %d BMCs", rounds-1, n)
}

// A BMC's calls share one connection, whatever they read of their answers: a login, a power change
// and polls (an answer closed before its end would close its connection).
func TestOneConnectionForEveryCall(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1))
	d := newDriver(t, m.URL(), "", creds, bmc.Options{})
	g.Expect(d.PowerOff(t.Context(), true)).To(Succeed())
	g.Expect(d.PowerOn(t.Context())).To(Succeed())
	for range 3 {
		_, err := d.PowerState(t.Context())
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(m.Connections()).To(Equal(1), "connections for %d requests", len(m.Requests()))
}
