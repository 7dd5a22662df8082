package redfish_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// TestFaults: every fault the mock can inject comes back as a *bmc.Error of the right kind, within the
// context's deadline, and without the password in its message.
func TestFaults(t *testing.T) {
	const short = 300 * time.Millisecond // for the rows that must time out
	type op func(ctx context.Context, d bmc.Driver) error
	powerState := func(ctx context.Context, d bmc.Driver) error { _, err := d.PowerState(ctx); return err }
	powerOff := func(ctx context.Context, d bmc.Driver) error { return d.PowerOff(ctx, true) }
	powerOn := func(ctx context.Context, d bmc.Driver) error { return d.PowerOn(ctx) }

	tests := map[string]struct {
		global, system redfishmock.Faults
		creds          *bmc.Credentials
		opts           bmc.Options
		noDeadline     bool // bounded by Options.RequestTimeout instead of ctx
		op             op
		wantKind       error // nil: success
	}{
		"service unavailable":         {global: redfishmock.Faults{Status: 503}, op: powerState, wantKind: bmc.ErrUnreachable},
		"system answers 500":          {system: redfishmock.Faults{Status: 500}, op: powerState, wantKind: bmc.ErrUnreachable},
		"a transient 503 on a reset":  {system: redfishmock.Faults{Status: 503}, op: powerOff, wantKind: bmc.ErrUnreachable},
		"dropped connections":         {global: redfishmock.Faults{Drop: true}, op: powerState, wantKind: bmc.ErrUnreachable},
		"dropped on the system":       {system: redfishmock.Faults{Drop: true}, op: powerOn, wantKind: bmc.ErrUnreachable},
		"slower than the deadline":    {global: redfishmock.Faults{Latency: time.Hour}, op: powerState, wantKind: bmc.ErrTimeout},
		"slow system":                 {system: redfishmock.Faults{Latency: time.Hour}, op: powerOff, wantKind: bmc.ErrTimeout},
		"slower than RequestTimeout":  {global: redfishmock.Faults{Latency: time.Hour}, opts: bmc.Options{RequestTimeout: short}, noDeadline: true, op: powerState, wantKind: bmc.ErrTimeout},
		"login refused":               {global: redfishmock.Faults{RejectAuth: true}, op: powerState, wantKind: bmc.ErrAuthentication},
		"session refused on a system": {system: redfishmock.Faults{RejectAuth: true}, op: powerOff, wantKind: bmc.ErrAuthentication},
		"forbidden":                   {system: redfishmock.Faults{Status: 403}, op: powerState, wantKind: bmc.ErrAuthentication},
		"wrong password":              {creds: &bmc.Credentials{Username: "admin", Password: password + "x"}, op: powerState, wantKind: bmc.ErrAuthentication},
		"unknown user":                {creds: &bmc.Credentials{Username: "root", Password: password}, op: powerOn, wantKind: bmc.ErrAuthentication},
		"no such resource":            {system: redfishmock.Faults{Status: 404}, op: powerState, wantKind: bmc.ErrUnsupported},
		"not implemented":             {system: redfishmock.Faults{Status: 501}, op: powerOff, wantKind: bmc.ErrUnsupported},
		"power-off refused":           {system: redfishmock.Faults{RefusePowerOff: true}, op: powerOff, wantKind: bmc.ErrUnreachable},
		"stuck power is accepted":     {system: redfishmock.Faults{StuckPower: true}, op: powerOff},
		"a fault that clears in time": {system: redfishmock.Faults{Status: 401, Count: 1}, op: powerOff},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := startMock(t, redfishmock.New().WithSystems(1).WithClock(fakeClock()))
			g.Expect(m.SetGlobalFaults(tc.global)).To(Succeed())
			g.Expect(m.SetFaults("1", tc.system)).To(Succeed())
			c := creds
			if tc.creds != nil {
				c = *tc.creds
			}
			d := newDriver(t, m.URL(), m.SystemPath("1"), c, tc.opts)

			deadline := 5 * time.Second
			if tc.wantKind == bmc.ErrTimeout {
				deadline = short
			}
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			if tc.noDeadline {
				ctx = t.Context()
			}
			done := make(chan error, 1)
			go func() { done <- tc.op(ctx, d) }()
			var err error
			g.Eventually(done, deadline+2*time.Second).Should(Receive(&err), "the call returns about the deadline")

			if tc.wantKind == nil {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var be *bmc.Error
			g.Expect(errors.As(err, &be)).To(BeTrue(), "a *bmc.Error: %v", err)
			g.Expect(be.Driver).To(Equal("redfish"))
			g.Expect(err).To(MatchError(tc.wantKind))
			for _, other := range []error{bmc.ErrUnreachable, bmc.ErrAuthentication, bmc.ErrUnsupported, bmc.ErrTimeout} {
				if other != tc.wantKind {
					g.Expect(errors.Is(err, other)).To(BeFalse(), "exactly one kind: %v", err)
				}
			}
			if tc.wantKind != bmc.ErrTimeout {
				g.Expect(ctx.Err()).NotTo(HaveOccurred(), "failed fast, before the deadline")
			}
			g.Expect(err.Error()).NotTo(ContainSubstring(password))
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1))
	m.Close()
	d := newDriver(t, m.URL(), "", creds, bmc.Options{})

	_, err := d.PowerState(t.Context())
	g.Expect(err).To(MatchError(bmc.ErrUnreachable))
	g.Expect(err).To(MatchError(ContainSubstring("dial tcp")))
}

// TestPasswordNeverInErrors puts the driver in front of a BMC that echoes the login request in its error,
// as some do: the password must not come back in the error string.
func TestPasswordNeverInErrors(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1))
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == sessionsPath {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "cannot parse " + string(body)}})
			return
		}
		m.ServeHTTP(w, r)
	}))
	defer echo.Close()
	d := newDriver(t, echo.URL, "", creds, bmc.Options{})

	_, err := d.PowerState(t.Context())
	g.Expect(err).To(MatchError(bmc.ErrUnsupported))
	g.Expect(err.Error()).To(ContainSubstring(`cannot parse {"UserName":"admin","Password":"<redacted>"}`), "the echo is there, scrubbed")
	g.Expect(err.Error()).NotTo(ContainSubstring("s3cr3t"))
	g.Expect(bmc.Reason(err)).To(Equal("Unsupported"))
}
