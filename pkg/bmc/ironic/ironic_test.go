package ironic

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/ironic/ironictest"
)

const (
	nodeUUID = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"
	user     = "ironic-user"
	password = "ironic-s3cret-pw"
)

var creds = bmc.Credentials{Username: user, Password: password}

func newTestDriver(g Gomega, address string, creds bmc.Credentials, clk clock.Clock) *Driver {
	addr, err := bmc.ParseAddress(address)
	g.Expect(err).NotTo(HaveOccurred())
	d, err := newDriver(addr, creds, bmc.Options{}, clk)
	g.Expect(err).NotTo(HaveOccurred())
	return d
}

func TestPowerState(t *testing.T) {
	for _, tc := range []struct {
		name    string
		power   string
		node    string
		want    bmc.PowerState
		wantErr error
	}{
		{name: "on", power: ironictest.PowerOn, node: nodeUUID, want: bmc.PowerStateOn},
		{name: "off", power: ironictest.PowerOff, node: nodeUUID, want: bmc.PowerStateOff},
		{name: "unknown to ironic", power: "error", node: nodeUUID, want: bmc.PowerStateUnknown},
		{name: "no such node", power: ironictest.PowerOn, node: "no-such-node", wantErr: bmc.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			srv := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(nodeUUID, tc.power)
			d := newTestDriver(g, srv.Address(tc.node), creds, clock.RealClock{})
			got, err := d.PowerState(context.Background())
			if tc.wantErr != nil {
				g.Expect(err).To(MatchError(tc.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
			g.Expect(srv.Requests()).To(Equal([]ironictest.Request{
				{Method: http.MethodGet, Path: "/v1/nodes/" + nodeUUID, APIVersion: "1.27", Status: http.StatusOK},
			}))
		})
	}
}

func TestChangePower(t *testing.T) {
	for _, tc := range []struct {
		name       string
		initial    string
		call       func(context.Context, *Driver) error
		wantTarget string
		wantPower  string
	}{
		{name: "power off", initial: ironictest.PowerOn, call: func(ctx context.Context, d *Driver) error { return d.PowerOff(ctx, true) }, wantTarget: "power off", wantPower: ironictest.PowerOff},
		{name: "soft power off", initial: ironictest.PowerOn, call: func(ctx context.Context, d *Driver) error { return d.PowerOff(ctx, false) }, wantTarget: "soft power off", wantPower: ironictest.PowerOff},
		{name: "power on", initial: ironictest.PowerOff, call: func(ctx context.Context, d *Driver) error { return d.PowerOn(ctx) }, wantTarget: "power on", wantPower: ironictest.PowerOn},
		{name: "power on when on", initial: ironictest.PowerOn, call: func(ctx context.Context, d *Driver) error { return d.PowerOn(ctx) }, wantTarget: "power on", wantPower: ironictest.PowerOn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			srv := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(nodeUUID, tc.initial)
			d := newTestDriver(g, srv.Address(nodeUUID), creds, clock.RealClock{})
			g.Expect(tc.call(context.Background(), d)).To(Succeed())
			g.Expect(srv.PowerState(nodeUUID)).To(Equal(tc.wantPower))
			g.Expect(srv.Requests()).To(Equal([]ironictest.Request{{
				Method: http.MethodPut, Path: "/v1/nodes/" + nodeUUID + "/states/power", APIVersion: "1.27",
				Target: tc.wantTarget, Status: http.StatusAccepted,
			}}))
			g.Expect(d.Close(context.Background())).To(Succeed())
		})
	}
}

func TestAuthentication(t *testing.T) {
	for _, tc := range []struct {
		name    string
		creds   bmc.Credentials
		wantErr error
	}{
		{name: "right credentials", creds: creds},
		{name: "wrong password", creds: bmc.Credentials{Username: user, Password: "wrong-pw-1234"}, wantErr: bmc.ErrAuthentication},
		{name: "wrong user", creds: bmc.Credentials{Username: "mallory", Password: password}, wantErr: bmc.ErrAuthentication},
		{name: "noauth against http_basic", creds: bmc.Credentials{}, wantErr: bmc.ErrAuthentication},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			srv := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(nodeUUID, ironictest.PowerOn)
			d := newTestDriver(g, srv.Address(nodeUUID), tc.creds, clock.RealClock{})
			err := d.PowerOff(context.Background(), true)
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(srv.PowerState(nodeUUID)).To(Equal(ironictest.PowerOff))
				return
			}
			g.Expect(err).To(MatchError(tc.wantErr))
			if tc.creds.Password != "" {
				g.Expect(err.Error()).NotTo(ContainSubstring(tc.creds.Password))
			}
			g.Expect(srv.PowerState(nodeUUID)).To(Equal(ironictest.PowerOn))
		})
	}
}

func TestNoAuth(t *testing.T) {
	g := NewWithT(t)
	srv := ironictest.NewServer(t).WithNode(nodeUUID, ironictest.PowerOff)
	d := newTestDriver(g, srv.Address(nodeUUID), bmc.Credentials{}, clock.RealClock{})
	g.Expect(d.PowerOn(context.Background())).To(Succeed())
	g.Expect(srv.PowerState(nodeUUID)).To(Equal(ironictest.PowerOn))
}

func TestHalfCredentialsRefused(t *testing.T) {
	g := NewWithT(t)
	addr, err := bmc.ParseAddress("ironic://10.0.0.1/" + nodeUUID)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = New(addr, bmc.Credentials{Username: user}, bmc.Options{})
	g.Expect(err).To(MatchError(bmc.ErrAuthentication))
}

func TestRetriesWhileNodeLocked(t *testing.T) {
	g := NewWithT(t)
	srv := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(nodeUUID, ironictest.PowerOn)
	srv.LockNode(nodeUUID, 3)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := newTestDriver(g, srv.Address(nodeUUID), creds, clk)
	var reports []string
	d.opts.Report = func(reason, _ string) { reports = append(reports, reason) }

	done := make(chan error, 1)
	go func() { done <- d.PowerOff(context.Background(), true) }()

	// Each 409 puts the driver to sleep on the clock: nothing more is sent until the backoff elapses,
	// and the backoff doubles.
	for i, backoff := range []time.Duration{initialBackoff, 2 * initialBackoff, 4 * initialBackoff} {
		g.Eventually(clk.HasWaiters).Should(BeTrue())
		g.Expect(srv.Requests()).To(HaveLen(i+1), "a request per attempt, none while waiting")
		clk.Step(backoff - time.Millisecond)
		g.Expect(clk.HasWaiters()).To(BeTrue(), "attempt %d: woke up before the backoff of %s", i+1, backoff)
		clk.Step(time.Millisecond)
	}
	g.Eventually(done).Should(Receive(BeNil()))

	statuses := []int{}
	for _, r := range srv.Requests() {
		statuses = append(statuses, r.Status)
	}
	g.Expect(statuses).To(Equal([]int{http.StatusConflict, http.StatusConflict, http.StatusConflict, http.StatusAccepted}))
	g.Expect(srv.PowerState(nodeUUID)).To(Equal(ironictest.PowerOff))
	g.Expect(reports).To(Equal([]string{"NodeLocked"}), "reported once per call")
}

func TestGivesUpWhenNodeStaysLocked(t *testing.T) {
	g := NewWithT(t)
	srv := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(nodeUUID, ironictest.PowerOn)
	srv.LockNode(nodeUUID, 1000)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := newTestDriver(g, srv.Address(nodeUUID), creds, clk)

	// The fake clock never moves: only the context's deadline can end the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := d.PowerOff(ctx, true)
	g.Expect(err).To(MatchError(bmc.ErrTimeout))
	g.Expect(err).To(MatchError(ContainSubstring("stayed locked")))
	g.Expect(srv.Requests()).To(HaveLen(1))
	g.Expect(srv.PowerState(nodeUUID)).To(Equal(ironictest.PowerOn))
}

func TestServerFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		closed  bool
		want    error
	}{
		{name: "connection refused", closed: true, want: bmc.ErrUnreachable},
		{name: "service unavailable", handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, want: bmc.ErrUnreachable},
		{name: "forbidden", handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) }, want: bmc.ErrAuthentication},
		{name: "microversion refused", handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotAcceptable) }, want: bmc.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			if tc.closed {
				srv.Close()
			}
			d := newTestDriver(g, "ironic://"+srv.Listener.Addr().String()+"/"+nodeUUID, creds, clock.RealClock{})
			_, err := d.PowerState(context.Background())
			g.Expect(err).To(MatchError(tc.want))
			g.Expect(err.Error()).NotTo(ContainSubstring(password))
		})
	}
}

func TestUsesGivenTransport(t *testing.T) {
	g := NewWithT(t)
	srv := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(nodeUUID, ironictest.PowerOn)
	counting := &countingTransport{next: http.DefaultTransport}
	addr, err := bmc.ParseAddress(srv.Address(nodeUUID))
	g.Expect(err).NotTo(HaveOccurred())
	d, err := New(addr, creds, bmc.Options{Transport: counting})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.PowerState(context.Background())).To(Equal(bmc.PowerStateOn))
	g.Expect(counting.n).To(Equal(1))
}

type countingTransport struct {
	next http.RoundTripper
	n    int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n++
	return c.next.RoundTrip(r)
}

// The diagnostic interrupt is Ironic's inject_nmi, at the microversion that brought it (1.29); every other
// request keeps the driver's own. A node whose Ironic driver cannot inject one, or an Ironic too old to
// know the request, is unsupported; a locked node is waited for, as for a power change.
func TestDiagnose(t *testing.T) {
	nmi := ironictest.Request{Method: http.MethodPut, Path: "/v1/nodes/" + nodeUUID + "/management/inject_nmi", APIVersion: "1.29"}
	for _, tc := range []struct {
		name         string
		noNMI        bool
		locked       int
		wantErr      error
		wantStatuses []int
		wantNMIs     int
	}{
		{name: "injected", wantStatuses: []int{http.StatusNoContent}, wantNMIs: 1},
		{name: "a driver that cannot", noNMI: true, wantErr: bmc.ErrUnsupported, wantStatuses: []int{http.StatusBadRequest}},
		{name: "a locked node is waited for", locked: 1, wantStatuses: []int{http.StatusConflict, http.StatusNoContent}, wantNMIs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			srv := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(nodeUUID, ironictest.PowerOn)
			if tc.noNMI {
				srv.WithoutNMI(nodeUUID)
			}
			srv.LockNode(nodeUUID, tc.locked)
			d := newTestDriver(g, srv.Address(nodeUUID), creds, clocktesting.NewFakeClock(time.Now()))
			done := make(chan error, 1)
			go func() { done <- bmc.Diagnose(context.Background(), d) }()
			if tc.locked > 0 {
				g.Eventually(d.clock.(*clocktesting.FakeClock).HasWaiters).Should(BeTrue())
				d.clock.(*clocktesting.FakeClock).Step(initialBackoff)
			}
			var err error
			g.Eventually(done).Should(Receive(&err))
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(err).To(MatchError(ContainSubstring("does not support inject NMI")))
			}
			var want []ironictest.Request
			for _, status := range tc.wantStatuses {
				r := nmi
				r.Status = status
				want = append(want, r)
			}
			g.Expect(srv.Requests()).To(Equal(want))
			g.Expect(srv.NMIs(nodeUUID)).To(Equal(tc.wantNMIs))
			g.Expect(srv.PowerState(nodeUUID)).To(Equal(ironictest.PowerOn), "an NMI is no power change")

			g.Expect(d.PowerState(context.Background())).To(Equal(bmc.PowerStateOn))
			g.Expect(srv.Requests()[len(srv.Requests())-1].APIVersion).To(Equal("1.27"), "the driver's own microversion is left as it was")
		})
	}
}

func TestDiagnoseOnAnIronicTooOld(t *testing.T) {
	g := NewWithT(t)
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-OpenStack-Ironic-API-Version") != "1.27" {
			w.WriteHeader(http.StatusNotAcceptable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(old.Close)
	d := newTestDriver(g, "ironic://"+old.Listener.Addr().String()+"/"+nodeUUID, creds, clock.RealClock{})
	g.Expect(bmc.Diagnose(context.Background(), d)).To(MatchError(bmc.ErrUnsupported))
	g.Expect(d.PowerOff(context.Background(), true)).To(Succeed(), "it still powers hosts")
}
