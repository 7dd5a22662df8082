package redfish_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/metalheal/metalheal/internal/testca"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/redfish"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

const ssePath = "/redfish/v1/EventService/SSE"

// guard is the longest a test waits for what should come at once: it catches a hang, it is never what is
// tested.
const guard = 30 * time.Second

// watch runs WatchPower on d until the test ends (or stop is called).
type watch struct {
	changed chan struct{} // one per call of changed
	done    chan error    // WatchPower's result
	stop    context.CancelFunc
}

func startWatch(t *testing.T, d bmc.Driver, onChange func()) *watch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{changed: make(chan struct{}, 1000), done: make(chan error, 1), stop: cancel}
	go func() {
		w.done <- bmc.WatchPower(ctx, d, func() {
			if onChange != nil {
				onChange()
			}
			w.changed <- struct{}{}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

// next waits for a call of changed; it fails the test if WatchPower returns first.
func (w *watch) next(t *testing.T) {
	t.Helper()
	select {
	case <-w.changed:
	case err := <-w.done:
		w.done <- err
		t.Fatalf("WatchPower returned %v before changed was called", err)
	case <-time.After(guard):
		t.Fatalf("changed was not called within %s", guard)
	}
}

// result waits for WatchPower to return.
func (w *watch) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-w.done:
		w.done <- err // for the cleanup
		return err
	case <-time.After(guard):
		t.Fatalf("WatchPower did not return within %s", guard)
	}
	return nil
}

// control sends a request to the mock's control endpoint.
func control(t *testing.T, m *redfishmock.Mock, method, path, body string) {
	t.Helper()
	req, err := http.NewRequest(method, m.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: m.CertPool(), MinVersion: tls.VersionTLS12}}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
}

// A power cut through the mock's control endpoint reaches the driver of the system as a call of changed;
// another system's power change on the same stream does not. PowerState answers from within changed.
func TestWatchPower(t *testing.T) {
	tests := map[string]struct {
		mock       *redfishmock.Mock
		systemPath string // the address's; the service's only system when empty
	}{
		"a session":                     {mock: redfishmock.New().WithSystems(2), systemPath: "/redfish/v1/Systems/1"},
		"basic auth":                    {mock: redfishmock.New().WithSystems(2).WithoutSessionService(), systemPath: "/redfish/v1/Systems/1"},
		"HTTPS":                         {mock: redfishmock.New().WithSystems(2).WithTLS(), systemPath: "/redfish/v1/Systems/1"},
		"the address names no system":   {mock: redfishmock.New().WithSystems(1)},
		"the address ends with a slash": {mock: redfishmock.New().WithSystems(2), systemPath: "/redfish/v1/Systems/1/"},
		"the other system has its own account": {mock: redfishmock.New().WithSystems(2).WithSystemCredentials("2", "other", "pw"),
			systemPath: "/redfish/v1/Systems/1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := startMock(t, tc.mock.WithControlEndpoint().WithEventKeepAlive(0))
			opts := bmc.Options{}
			if pool := m.CertPool(); pool != nil {
				opts.CABundle = m.CertPEM()
			}
			d := newDriver(t, m.URL(), tc.systemPath, creds, opts)
			states := make(chan string, 10)
			w := startWatch(t, d, func() {
				state, err := d.PowerState(t.Context())
				states <- fmt.Sprintf("%s %v", state, err)
			})
			g.Eventually(m.OpenEventStreams, guard).Should(Equal(1))
			if len(m.SystemIDs()) == 1 { // a second system, after the driver found the only one
				g.Expect(m.AddSystems("2")).To(Succeed())
			}

			control(t, m, http.MethodPost, "/mock/systems/2/power", `{"powerState":"Off"}`)
			control(t, m, http.MethodPost, "/mock/systems/1/power", `{"powerState":"Off"}`)
			w.next(t)
			g.Expect(<-states).To(Equal("Off <nil>"))
			g.Expect(w.changed).To(BeEmpty(), "system 2's event came first on the stream, and was ignored")

			control(t, m, http.MethodPost, "/mock/systems/1/power", `{"powerState":"On"}`)
			w.next(t)
			g.Expect(<-states).To(Equal("On <nil>"))
			g.Expect(count(m, http.MethodGet, ssePath)).To(Equal(1), "one stream")

			w.stop()
			g.Expect(w.result(t)).To(Succeed(), "nil once ctx ends")
		})
	}
}

// PowerState goes on while a stream is open, and the stream keeps its own connection: the driver's calls
// share one, before and after the stream; a stream that ended is not put back in the pool.
func TestWatchPowerBesideCalls(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1).WithEventKeepAlive(0))
	d := newDriver(t, m.URL(), "", creds, bmc.Options{})
	_, err := d.PowerState(t.Context())
	g.Expect(err).NotTo(HaveOccurred())

	w := startWatch(t, d, nil)
	g.Eventually(m.OpenEventStreams, guard).Should(Equal(1))
	for range 3 {
		_, err := d.PowerState(t.Context())
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
	w.next(t)
	g.Expect(m.Connections()).To(Equal(2), "one for the calls, one for the stream")

	w.stop()
	g.Expect(w.result(t)).To(Succeed())
	g.Eventually(m.OpenEventStreams, guard).Should(BeZero(), "the stream's connection is closed")
	for range 3 {
		_, err := d.PowerState(t.Context())
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(m.Connections()).To(Equal(2), "the calls kept their connection")
}

// A session the BMC dropped is opened again for the stream, as for any call.
func TestWatchPowerAfterTheSessionExpired(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1).WithEventKeepAlive(0))
	d := newDriver(t, m.URL(), "", creds, bmc.Options{})
	_, err := d.PowerState(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	m.ExpireSessions()

	w := startWatch(t, d, nil)
	g.Eventually(m.OpenEventStreams, guard).Should(Equal(1))
	g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
	w.next(t)
	g.Expect(count(m, http.MethodPost, sessionsPath)).To(Equal(2))
}

// A stream the BMC drops, or takes away, ends WatchPower with an error the caller reconnects on: not
// unsupported, and without credentials.
func TestWatchPowerStreamDropped(t *testing.T) {
	tests := map[string]struct {
		fault string // a control endpoint request, "METHOD /path body"
		want  error
	}{
		"every stream dropped": {fault: "DELETE /mock/eventstreams", want: bmc.ErrUnreachable},
		"the service disabled": {fault: `POST /mock/eventservice {"state":"Disabled"}`, want: bmc.ErrUnreachable},
		"the whole BMC goes":   {want: bmc.ErrUnreachable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := startMock(t, redfishmock.New().WithSystems(1).WithControlEndpoint().WithEventKeepAlive(0))
			d := newDriver(t, m.URL(), "", creds, bmc.Options{})
			w := startWatch(t, d, nil)
			g.Eventually(m.OpenEventStreams, guard).Should(Equal(1))
			if tc.fault == "" {
				m.Close()
			} else {
				method, rest, _ := strings.Cut(tc.fault, " ")
				path, body, _ := strings.Cut(rest, " ")
				control(t, m, method, path, body)
			}
			err := w.result(t)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err).To(MatchError(tc.want))
			g.Expect(err).NotTo(MatchError(bmc.ErrUnsupported))
			g.Expect(err).To(MatchError(ContainSubstring("redfish WatchPower: bmc unreachable: event stream " + ssePath)))
			g.Expect(err.Error()).NotTo(ContainSubstring("s3cr3t"))
			t.Log(err)
		})
	}
}

// A BMC without an event stream to offer is unsupported, at once, and the caller polls.
func TestWatchPowerUnsupported(t *testing.T) {
	tests := map[string]struct {
		state redfishmock.EventService
		want  string
	}{
		"no EventService":       {state: redfishmock.EventServiceAbsent, want: "the BMC offers no EventService"},
		"the service disabled":  {state: redfishmock.EventServiceDisabled, want: "the BMC's EventService is disabled"},
		"no ServerSentEventUri": {state: redfishmock.EventServiceNoSSE, want: "no ServerSentEventUri"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := startMock(t, redfishmock.New().WithSystems(1).WithEventService(tc.state))
			d := newDriver(t, m.URL(), "", creds, bmc.Options{})
			err := bmc.WatchPower(t.Context(), d, func() { t.Error("changed called") })
			g.Expect(err).To(MatchError(bmc.ErrUnsupported))
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(count(m, http.MethodGet, ssePath)).To(BeZero(), "the stream is not asked for")
		})
	}
}

// A context that ends ends the watch with nil, whether the stream is open or not yet.
func TestWatchPowerContextEnds(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1))
	d := newDriver(t, m.URL(), "", creds, bmc.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	g.Expect(bmc.WatchPower(ctx, d, func() {})).To(Succeed())

	w := startWatch(t, d, nil)
	g.Eventually(m.OpenEventStreams, guard).Should(Equal(1))
	w.stop()
	g.Expect(w.result(t)).To(Succeed())
}

// sseBMC serves the mock, with its event stream answered by stream instead.
func sseBMC(t *testing.T, m *redfishmock.Mock, stream http.HandlerFunc, useTLS bool) string {
	t.Helper()
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ssePath {
			stream(w, r)
			return
		}
		m.ServeHTTP(w, r)
	}), useTLS)
	return srv.URL
}

// eventLine is an event about system 1, as data.
const eventLine = `data: {"Events":[{"OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/1"}}]}` + "\n\n"

// streamHeaders starts an event stream's answer.
func streamHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
}

// A hostile stream is dropped with an error, and costs its bound at most: an event too large, a line
// without end, a redirect to another host (which receives nothing), an answer that is no event stream, an
// error that echoes the password and the session token.
func TestWatchPowerHostileStreams(t *testing.T) {
	other := &recorder{next: http.NotFoundHandler()}
	otherSrv := serve(t, other, false)
	huge := strings.Repeat("x", 1<<10)
	tests := map[string]struct {
		stream    http.HandlerFunc
		basicAuth bool
		changes   int // calls of changed before the error
		want      error
		wantMsg   string
	}{
		"an event of many lines, larger than the bound": {stream: func(w http.ResponseWriter, r *http.Request) {
			streamHeaders(w)
			_, _ = io.WriteString(w, eventLine)
			for r.Context().Err() == nil {
				if _, err := io.WriteString(w, "data: "+huge+"\n"); err != nil {
					return
				}
			}
		}, changes: 1, want: bmc.ErrUnreachable, wantMsg: "an event or a line is larger than 64 KiB"},
		"a line without end": {stream: func(w http.ResponseWriter, r *http.Request) {
			streamHeaders(w)
			_, _ = io.WriteString(w, eventLine+": ")
			for r.Context().Err() == nil {
				if _, err := io.WriteString(w, huge); err != nil {
					return
				}
			}
		}, changes: 1, want: bmc.ErrUnreachable, wantMsg: "an event or a line is larger than 64 KiB"},
		"a redirect to another host": {stream: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, otherSrv.URL+ssePath, http.StatusTemporaryRedirect)
		}, want: bmc.ErrUnsupported, wantMsg: "the BMC redirected GET " + ssePath + " to another host"},
		"a redirect to another host, basic auth": {basicAuth: true, stream: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, otherSrv.URL+ssePath, http.StatusTemporaryRedirect)
		}, want: bmc.ErrUnsupported, wantMsg: "the BMC redirected GET " + ssePath + " to another host"},
		"JSON, not an event stream": {stream: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{}`)
		}, want: bmc.ErrUnsupported, wantMsg: `answers GET ` + ssePath + ` with "application/json", not an event stream`},
		"no content type": {stream: func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Content-Type"] = nil
			_, _ = io.WriteString(w, eventLine)
		}, want: bmc.ErrUnsupported, wantMsg: "not an event stream"},
		"an error that echoes the session token and the password": {stream: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			msg, _ := json.Marshal("busy: token " + r.Header.Get("X-Auth-Token") + ", password " + password)
			_, _ = fmt.Fprintf(w, `{"error":{"message":%s}}`, msg)
		}, want: bmc.ErrUnreachable, wantMsg: "busy: token <redacted>, password <redacted>"},
		"an error that echoes the basic credentials": {basicAuth: true, stream: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"error":{"message":"cannot use %s"}}`, r.Header.Get("Authorization"))
		}, want: bmc.ErrUnsupported, wantMsg: "cannot use Basic "},
		"the stream refuses the credentials": {stream: func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusForbidden)
		}, want: bmc.ErrAuthentication, wantMsg: "GET " + ssePath + ": 403 Forbidden"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			mock := redfishmock.New().WithSystems(1)
			if tc.basicAuth {
				mock = mock.WithoutSessionService()
			}
			m := startMock(t, mock)
			base := sseBMC(t, m, tc.stream, false)
			d := newDriver(t, base, "/redfish/v1/Systems/1", creds, bmc.Options{})
			w := startWatch(t, d, nil)
			err := w.result(t)
			g.Expect(w.changed).To(HaveLen(tc.changes))
			g.Expect(err).To(MatchError(tc.want))
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantMsg)))
			g.Expect(err.Error()).NotTo(ContainSubstring("s3cr3t"))
			g.Expect(err.Error()).NotTo(ContainSubstring(basicAuthValue()))
			for _, r := range other.requests() {
				g.Expect(r.secrets()).To(BeEmpty())
			}
			g.Expect(other.requests()).To(BeEmpty(), "nothing reaches the other host")
			t.Log(err)
		})
	}
}

// basicAuthValue is the Authorization header's credentials for creds.
func basicAuthValue() string {
	r, _ := http.NewRequest(http.MethodGet, "http://bmc", nil)
	r.SetBasicAuth(creds.Username, creds.Password)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// An event just under the bound is read whole.
func TestWatchPowerLargeEvent(t *testing.T) {
	m := startMock(t, redfishmock.New().WithSystems(1))
	pad := strings.Repeat(" ", redfish.MaxEventBytes-200)
	base := sseBMC(t, m, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		_, _ = fmt.Fprintf(w, "data: {\"Events\":[{%s\"OriginOfCondition\":{\"@odata.id\":\"/redfish/v1/Systems/1\"}}]}\n\n", pad)
		<-r.Context().Done()
	}, false)
	d := newDriver(t, base, "/redfish/v1/Systems/1", creds, bmc.Options{})
	startWatch(t, d, nil).next(t)
}

// Opening the stream is bounded by the request timeout; reading it is not.
func TestWatchPowerTimeouts(t *testing.T) {
	const timeout = 200 * time.Millisecond
	t.Run("headers that never come", func(t *testing.T) {
		g := NewWithT(t)
		m := startMock(t, redfishmock.New().WithSystems(1))
		base := sseBMC(t, m, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, false)
		d := newDriver(t, base, "/redfish/v1/Systems/1", creds, bmc.Options{RequestTimeout: timeout})
		err := startWatch(t, d, nil).result(t)
		g.Expect(err).To(MatchError(bmc.ErrTimeout))
		t.Log(err)
	})
	t.Run("a stream open past the request timeout", func(t *testing.T) {
		g := NewWithT(t)
		m := startMock(t, redfishmock.New().WithSystems(1).WithEventKeepAlive(0))
		d := newDriver(t, m.URL(), "", creds, bmc.Options{RequestTimeout: timeout})
		w := startWatch(t, d, nil)
		g.Eventually(m.OpenEventStreams, guard).Should(Equal(1))
		<-time.After(5 * timeout) // not what is tested: the time the stream must outlive
		g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
		w.next(t)
	})
}

// A stream that carries nothing for the idle bound is dropped as timed out; whatever arrives, a keep-alive
// comment or an event, puts the bound off.
func TestWatchPowerIdleStream(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1))
	send := make(chan string)
	base := sseBMC(t, m, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		for {
			select {
			case s := <-send:
				_, _ = io.WriteString(w, s)
				_ = http.NewResponseController(w).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}, false)
	d := newDriver(t, base, "/redfish/v1/Systems/1", creds, bmc.Options{})
	clk := &resetClock{FakeClock: fakeClock(), resets: make(chan struct{}, 10)}
	redfish.SetClock(d, clk)
	w := startWatch(t, d, nil)
	g.Eventually(clk.HasWaiters, guard).Should(BeTrue(), "the stream is open: its idle timer runs")

	clk.Step(redfish.StreamIdleTimeout - time.Second)
	send <- ": keep-alive\n"
	<-clk.resets                                      // the comment has been read
	clk.Step(redfish.StreamIdleTimeout - time.Second) // longer than the bound since the stream opened
	send <- eventLine
	w.next(t)
	clk.Step(redfish.StreamIdleTimeout - time.Second) // longer than the bound since the comment
	send <- eventLine
	w.next(t)
	g.Expect(w.done).To(BeEmpty())

	clk.Step(redfish.StreamIdleTimeout)
	err := w.result(t)
	g.Expect(err).To(MatchError(bmc.ErrTimeout))
	g.Expect(err).To(MatchError(ContainSubstring("the BMC sent nothing, not even a keep-alive, for 5m0s")))
	g.Expect(err).NotTo(MatchError(bmc.ErrUnsupported))
}

// resetClock is a fake clock whose AfterFunc timers tell each Reset: the moment a stream's reader has
// read something.
type resetClock struct {
	*clocktesting.FakeClock
	resets chan struct{}
}

func (c *resetClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return resetTimer{Timer: c.FakeClock.AfterFunc(d, f), resets: c.resets}
}

type resetTimer struct {
	clock.Timer
	resets chan struct{}
}

func (t resetTimer) Reset(d time.Duration) bool {
	ok := t.Timer.Reset(d)
	t.resets <- struct{}{}
	return ok
}

// A BMC that redirects the stream within itself is followed, with its credentials.
func TestWatchPowerSameHostRedirect(t *testing.T) {
	g := NewWithT(t)
	m := startMock(t, redfishmock.New().WithSystems(1).WithEventKeepAlive(0))
	srv := serve(t, redirecting(m, map[string]string{"GET /redfish/v1/SSE": ssePath}), false)
	moved := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redfish/v1/EventService" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ServiceEnabled":true,"ServerSentEventUri":"/redfish/v1/SSE"}`)
			return
		}
		srv.Config.Handler.ServeHTTP(w, r)
	})
	base := serve(t, moved, false)
	d := newDriver(t, base.URL, "", creds, bmc.Options{})
	w := startWatch(t, d, nil)
	g.Eventually(m.OpenEventStreams, guard).Should(Equal(1))
	g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
	w.next(t)
}

// A BMC that floods its stream costs the manager the event bound, not the flood: the stream is dropped
// once 64 KiB of one line, or of one event's data, have arrived, and what was allocated meanwhile is a
// small fraction of what the BMC had to send.
func TestWatchPowerFloodCostsItsBound(t *testing.T) {
	const (
		flood     = 300 << 20
		maxGrowth = 4 << 20
	)
	chunk := []byte(strings.Repeat("x", 64<<10))
	dataLine := []byte("data: " + strings.Repeat("x", 1<<10) + "\n")
	tests := map[string][]byte{
		"one line without end":          chunk,
		"data lines, never a blank one": bytes.Repeat(dataLine, 64),
	}
	for name, piece := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := startMock(t, redfishmock.New().WithSystems(1))
			sent := make(chan int, 1)
			base := sseBMC(t, m, func(w http.ResponseWriter, _ *http.Request) {
				streamHeaders(w)
				n := 0
				for n < flood {
					k, err := w.Write(piece)
					n += k
					if err != nil {
						break
					}
				}
				sent <- n
			}, false)
			d := newDriver(t, base, "/redfish/v1/Systems/1", creds, bmc.Options{})

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := bmc.WatchPower(t.Context(), d, func() {})
			runtime.ReadMemStats(&after)

			g.Expect(err).To(MatchError(ContainSubstring("an event or a line is larger than 64 KiB")))
			growth := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d KiB while the stream was read", growth>>10)
			g.Expect(growth).To(BeNumerically("<", maxGrowth))
			select {
			case n := <-sent:
				t.Logf("the BMC sent %d KiB before its connection closed", n>>10)
				g.Expect(n).To(BeNumerically("<", flood), "the BMC could not send it all")
			case <-time.After(guard):
				t.Fatal("the BMC is still sending: its connection was not closed")
			}
		})
	}
}

// Over HTTP/2 (a BMC that offers it, through the shared transport) the stream is one HTTP/2 stream beside
// the driver's calls on one connection: they go on while it is open, and its events arrive.
func TestWatchPowerOverHTTP2(t *testing.T) {
	g := NewWithT(t)
	ca, err := testca.New("BMC CA")
	g.Expect(err).NotTo(HaveOccurred())
	cert, err := ca.ServerCertificate()
	g.Expect(err).NotTo(HaveOccurred())
	m := startMock(t, redfishmock.New().WithSystems(1).WithEventKeepAlive(0))
	var mu sync.Mutex
	protos := map[string]int{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos[r.Proto]++
		mu.Unlock()
		m.ServeHTTP(w, r)
	}))
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	d := newDriver(t, srv.URL, "", creds, bmc.Options{CABundle: ca.PEM})
	w := startWatch(t, d, nil)
	g.Eventually(m.OpenEventStreams, guard).Should(Equal(1))
	for range 3 {
		_, err := d.PowerState(t.Context())
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
	w.next(t)
	w.stop()
	g.Expect(w.result(t)).To(Succeed())
	mu.Lock()
	defer mu.Unlock()
	g.Expect(protos).To(HaveKey("HTTP/2.0"))
	g.Expect(protos).To(HaveLen(1), "every request over HTTP/2: %v", protos)
	g.Expect(conns.Load()).To(BeEquivalentTo(1), "one connection")
}
