package redfishmock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

const (
	eventServicePath = "/redfish/v1/EventService"
	ssePath          = "/redfish/v1/EventService/SSE"
)

// sseItem is what a stream carried: an event (its id and data) or a comment.
type sseItem struct {
	id, data, comment string
}

// record is an Event record as the mock sends it.
type record struct {
	ODataType string `json:"@odata.type"`
	ID        string `json:"Id"`
	Events    []struct {
		EventType, EventID, EventTimestamp, MessageID, Message string
		OriginOfCondition                                      struct {
			ODataID string `json:"@odata.id"`
		}
	}
}

// stream is an open event stream, read by a goroutine of its own.
type stream struct {
	items <-chan sseItem
	done  <-chan error // the read's end: io.EOF for a stream that ended cleanly
}

// openStream opens the mock's event stream with r's credentials and reads it until the test ends.
func openStream(t *testing.T, client *http.Client, base string, r req) stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, base+ssePath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.user != "" {
		hr.SetBasicAuth(r.user, r.pass)
	}
	if r.token != "" {
		hr.Header.Set("X-Auth-Token", r.token)
	}
	resp, err := client.Do(hr)
	if err != nil {
		t.Fatalf("open event stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("open event stream: %s, %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	items, done := make(chan sseItem, 1024), make(chan error, 1)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseItem
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.data != "" {
					items <- ev
				}
				ev = sseItem{}
			case strings.HasPrefix(line, ":"):
				items <- sseItem{comment: strings.TrimSpace(line[1:])}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data += line[len("data: "):]
			}
		}
		err := sc.Err()
		if err == nil {
			err = io.EOF
		}
		done <- err
	}()
	return stream{items: items, done: done}
}

// wait is the longest a test waits for something that should come at once: a guard against a hang, never
// the thing tested.
const wait = 30 * time.Second

// next returns the stream's next item; it fails the test if the stream ends first.
func (s stream) next(t *testing.T) sseItem {
	t.Helper()
	select {
	case it := <-s.items:
		return it
	case err := <-s.done:
		t.Fatalf("the stream ended: %v", err)
	case <-time.After(wait):
		t.Fatalf("nothing on the stream for %s", wait)
	}
	return sseItem{}
}

// event returns the stream's next item, which must be an event, decoded.
func (s stream) event(t *testing.T) record {
	t.Helper()
	it := s.next(t)
	var r record
	if err := json.Unmarshal([]byte(it.data), &r); err != nil {
		t.Fatalf("event %+v: %v", it, err)
	}
	if r.ID != it.id || len(r.Events) != 1 {
		t.Fatalf("event %+v: want its Id as the SSE id, and one record", it)
	}
	return r
}

// end waits for the stream to end and returns how.
func (s stream) end(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(wait):
		t.Fatalf("the stream is still open after %s", wait)
	}
	return nil
}

// power is a record's system and message, "2 ResourceEvent.1.3.0.ResourcePoweredOff".
func power(r record) string {
	e := r.Events[0]
	return strings.TrimPrefix(e.OriginOfCondition.ODataID, "/redfish/v1/Systems/") + " " + e.MessageID
}

func TestEventService(t *testing.T) {
	tests := map[string]struct {
		state      redfishmock.EventService
		linked     bool // the service root links it
		status     int  // of GET /EventService
		enabled    bool
		sseURI     bool
		streamCode int // of GET on the SSE URI
	}{
		"enabled":     {state: redfishmock.EventServiceEnabled, linked: true, status: 200, enabled: true, sseURI: true, streamCode: 200},
		"disabled":    {state: redfishmock.EventServiceDisabled, linked: true, status: 200, sseURI: true, streamCode: 503},
		"without SSE": {state: redfishmock.EventServiceNoSSE, linked: true, status: 200, enabled: true, streamCode: 404},
		"absent":      {state: redfishmock.EventServiceAbsent, status: 404, streamCode: 404},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := start(t, redfishmock.New().WithSystems(1).WithEventService(tc.state))
			root := send(t, http.DefaultClient, m.URL(), req{path: "/redfish/v1"})
			if tc.linked {
				g.Expect(root.json).To(HaveKeyWithValue("EventService", HaveKeyWithValue("@odata.id", eventServicePath)))
			} else {
				g.Expect(root.json).NotTo(HaveKey("EventService"))
			}
			svc := send(t, http.DefaultClient, m.URL(), admin(http.MethodGet, eventServicePath, ""))
			g.Expect(svc.status).To(Equal(tc.status))
			if tc.status == http.StatusOK {
				g.Expect(svc.json).To(HaveKeyWithValue("@odata.type", HavePrefix("#EventService.v1_")))
				g.Expect(svc.json).To(HaveKeyWithValue("ServiceEnabled", tc.enabled))
				if tc.sseURI {
					g.Expect(svc.json).To(HaveKeyWithValue("ServerSentEventUri", ssePath))
				} else {
					g.Expect(svc.json).NotTo(HaveKey("ServerSentEventUri"))
				}
			}
			g.Expect(streamStatus(t, m)).To(Equal(tc.streamCode))
		})
	}
}

// streamStatus opens the event stream with the default account, closes it at once, and returns the
// status of the answer. A refusal must be a Redfish error (JSON).
func streamStatus(t *testing.T, m *redfishmock.Mock) int {
	t.Helper()
	hr, _ := http.NewRequest(http.MethodGet, m.URL()+ssePath, nil)
	hr.SetBasicAuth("admin", "password")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK && ct != "application/json" {
		t.Errorf("a refusal (%s) is sent as %q, not as a Redfish error", resp.Status, ct)
	}
	return resp.StatusCode
}

// The stream is authenticated like every other resource: a session token or basic auth, nothing else.
func TestEventStreamAuthentication(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1))
	for name, r := range map[string]req{
		"none":           {path: ssePath},
		"wrong password": {path: ssePath, user: "admin", pass: "nope"},
		"unknown token":  {path: ssePath, token: "nope"},
	} {
		g.Expect(send(t, http.DefaultClient, m.URL(), r).status).To(Equal(http.StatusUnauthorized), name)
	}
	g.Expect(m.OpenEventStreams()).To(BeZero())
	openStream(t, http.DefaultClient, m.URL(), admin(http.MethodGet, ssePath, ""))
	openStream(t, http.DefaultClient, m.URL(), req{token: login(t, m)})
	g.Expect(m.OpenEventStreams()).To(Equal(2))
}

// Every way a system's power changes is told on the stream, each step as it happens, with the
// ResourceEvent message for the state it reached.
func TestEventStreamTellsEveryPowerChange(t *testing.T) {
	const (
		poweredOff  = "1 ResourceEvent.1.3.0.ResourcePoweredOff"
		poweredOn   = "1 ResourceEvent.1.3.0.ResourcePoweredOn"
		poweringOff = "1 ResourceEvent.1.3.0.ResourcePoweringOff"
		poweringOn  = "1 ResourceEvent.1.3.0.ResourcePoweringOn"
	)
	tests := map[string]struct {
		delay  time.Duration
		host   redfishmock.Host
		from   redfishmock.PowerState
		change func(t *testing.T, m *redfishmock.Mock)
		step   time.Duration // the fake clock is stepped this far once the change is made
		want   []string
	}{
		"a ForceOff reset": {from: redfishmock.PowerOn, change: reset("ForceOff"), want: []string{poweredOff}},
		"an On reset":      {from: redfishmock.PowerOff, change: reset("On"), want: []string{poweredOn}},
		"a PowerCycle":     {from: redfishmock.PowerOn, change: reset("PowerCycle"), want: []string{poweredOff, poweredOn}},
		"a ForceOff reset that takes time: the transition's end too": {delay: time.Minute, from: redfishmock.PowerOn,
			change: reset("ForceOff"), step: time.Minute, want: []string{poweringOff, poweredOff}},
		"an On reset that takes time": {delay: time.Minute, from: redfishmock.PowerOff,
			change: reset("On"), step: time.Minute, want: []string{poweringOn, poweredOn}},
		"the control API cuts the power": {from: redfishmock.PowerOn, change: control(`{"powerState":"Off"}`), want: []string{poweredOff}},
		"the control API restores it":    {from: redfishmock.PowerOff, change: control(`{"powerState":"On"}`), want: []string{poweredOn}},
		"the host powers off on its own after an NMI": {host: redfishmock.Host{PowerOffAfterNMI: time.Minute}, from: redfishmock.PowerOn,
			change: reset("Nmi"), step: time.Minute, want: []string{poweredOff}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			clk := fakeClock()
			t0 := clk.Now()
			m := start(t, redfishmock.New().WithSystems(2).WithClock(clk).WithPowerDelay(tc.delay).WithHost(tc.host).
				WithControlEndpoint().WithEventKeepAlive(0))
			g.Expect(m.SetPowerState("1", tc.from)).To(Succeed())
			s := openStream(t, http.DefaultClient, m.URL(), admin(http.MethodGet, ssePath, ""))
			tc.change(t, m)
			clk.Step(tc.step)
			g.Expect(m.SetPowerState("2", redfishmock.PowerOff)).To(Succeed()) // the end marker

			var got []string
			var last record
			for last.ID == "" || power(last) != "2 ResourceEvent.1.3.0.ResourcePoweredOff" {
				if last.ID != "" {
					got = append(got, power(last))
				}
				last = s.event(t)
				e := last.Events[0]
				g.Expect(last.ODataType).To(HavePrefix("#Event.v1_"))
				g.Expect(e.EventID).To(Equal(last.ID))
				g.Expect(e.EventType).To(Equal("Other"))
				g.Expect(e.Message).To(HavePrefix("The resource `" + e.OriginOfCondition.ODataID + "` "))
				at, err := time.Parse(time.RFC3339, e.EventTimestamp)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(at).To(BeTemporally(">=", t0), "the mock's clock, when it happened")
				g.Expect(at).To(BeTemporally("<=", clk.Now()), "the mock's clock, when it happened")
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func reset(resetType string) func(t *testing.T, m *redfishmock.Mock) {
	return func(t *testing.T, m *redfishmock.Mock) {
		t.Helper()
		NewWithT(t).Expect(send(t, http.DefaultClient, m.URL(), admin(http.MethodPost, resetPath, resetBody(resetType))).status).
			To(Equal(http.StatusNoContent))
	}
}

func control(body string) func(t *testing.T, m *redfishmock.Mock) {
	return func(t *testing.T, m *redfishmock.Mock) {
		t.Helper()
		NewWithT(t).Expect(send(t, http.DefaultClient, m.URL(), req{method: http.MethodPost, path: "/mock/systems/1/power", body: body}).status).
			To(Equal(http.StatusNoContent))
	}
}

// A stream carries the changes of every system its account reaches, and of no other: a system with an
// account of its own stands for a BMC of its own.
func TestEventStreamCarriesTheAccountsSystems(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(3).WithSystemCredentials("3", "other", "pw").WithEventKeepAlive(0))
	admins := openStream(t, http.DefaultClient, m.URL(), admin(http.MethodGet, ssePath, ""))
	others := openStream(t, http.DefaultClient, m.URL(), req{user: "other", pass: "pw"})
	for _, id := range []string{"3", "2", "1"} {
		g.Expect(m.SetPowerState(id, redfishmock.PowerOff)).To(Succeed())
	}
	g.Expect(power(admins.event(t))).To(Equal("2 ResourceEvent.1.3.0.ResourcePoweredOff"))
	g.Expect(power(admins.event(t))).To(Equal("1 ResourceEvent.1.3.0.ResourcePoweredOff"))
	g.Expect(power(others.event(t))).To(Equal("3 ResourceEvent.1.3.0.ResourcePoweredOff"))
}

// An idle stream carries a keep-alive comment each interval of the mock's clock; an event puts the next
// one off.
func TestEventStreamKeepAlive(t *testing.T) {
	g := NewWithT(t)
	clk := fakeClock()
	m := start(t, redfishmock.New().WithSystems(1).WithClock(clk).WithEventKeepAlive(10*time.Second))
	s := openStream(t, http.DefaultClient, m.URL(), admin(http.MethodGet, ssePath, ""))
	clk.Step(10 * time.Second)
	g.Expect(s.next(t)).To(Equal(sseItem{comment: "keep-alive"}))
	clk.Step(10 * time.Second)
	g.Expect(s.next(t)).To(Equal(sseItem{comment: "keep-alive"}))

	clk.Step(5 * time.Second)
	g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
	g.Expect(power(s.event(t))).To(Equal("1 ResourceEvent.1.3.0.ResourcePoweredOff"))
	clk.Step(9 * time.Second) // past when the next comment was due before the event
	g.Expect(m.SetPowerState("1", redfishmock.PowerOn)).To(Succeed())
	g.Expect(power(s.event(t))).To(Equal("1 ResourceEvent.1.3.0.ResourcePoweredOn"), "no comment in between")
	clk.Step(10 * time.Second)
	g.Expect(s.next(t)).To(Equal(sseItem{comment: "keep-alive"}))
}

func TestEventStreamFaults(t *testing.T) {
	tests := map[string]struct {
		fault      string // a control API request, "METHOD /path body"
		wantStream int    // the SSE URI's status after the fault
	}{
		"every stream dropped":      {fault: "DELETE /mock/eventstreams", wantStream: http.StatusOK},
		"the service disabled":      {fault: `POST /mock/eventservice {"state":"Disabled"}`, wantStream: http.StatusServiceUnavailable},
		"the stream URI taken away": {fault: `POST /mock/eventservice {"state":"NoSSE"}`, wantStream: http.StatusNotFound},
		"the service removed":       {fault: `POST /mock/eventservice {"state":"Absent"}`, wantStream: http.StatusNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := start(t, redfishmock.New().WithSystems(1).WithControlEndpoint().WithEventKeepAlive(0))
			client := &http.Client{Transport: &http.Transport{}}
			streams := []stream{
				openStream(t, client, m.URL(), admin(http.MethodGet, ssePath, "")),
				openStream(t, client, m.URL(), req{token: login(t, m)}),
			}
			g.Expect(send(t, http.DefaultClient, m.URL(), req{path: "/mock/eventstreams"}).json).To(Equal(map[string]any{"open": 2.0, "slow": 0.0}))

			method, rest, _ := strings.Cut(tc.fault, " ")
			path, body, _ := strings.Cut(rest, " ")
			g.Expect(send(t, http.DefaultClient, m.URL(), req{method: method, path: path, body: body}).status).To(Equal(http.StatusNoContent))
			for _, s := range streams {
				g.Expect(s.end(t)).To(MatchError(io.ErrUnexpectedEOF), "the connection closed mid-stream, not the stream's clean end")
			}
			g.Expect(m.OpenEventStreams()).To(BeZero())
			g.Expect(streamStatus(t, m)).To(Equal(tc.wantStream))
		})
	}
}

// The mock serves a thousand streams at once, and a power change reaches every one.
func TestThousandEventStreams(t *testing.T) {
	const n = 1000
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(2).WithEventKeepAlive(0))
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport}
	token := login(t, m)
	streams := make([]stream, n)
	for i := range streams {
		streams[i] = openStream(t, client, m.URL(), req{token: token})
	}
	g.Expect(m.OpenEventStreams()).To(Equal(n))

	g.Expect(m.SetPowerState("2", redfishmock.PowerOff)).To(Succeed())
	heard := 0
	for _, s := range streams {
		if power(s.event(t)) == "2 ResourceEvent.1.3.0.ResourcePoweredOff" {
			heard++
		}
	}
	g.Expect(heard).To(Equal(n))
	g.Expect(m.OpenEventStreams()).To(Equal(n))
	g.Expect(m.SlowEventStreams()).To(BeZero())
}

// A reader that stops reading never holds a power change back: once its stream's buffer is full the mock
// drops it (and closes its connection), and the other streams go on.
func TestStuckEventReaderIsDropped(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1).WithEventKeepAlive(0))

	// The stuck reader sends its request by hand, and reads nothing until the mock has dropped it.
	conn, err := net.Dial("tcp", strings.TrimPrefix(m.URL(), "http://"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: mock\r\nAuthorization: Basic YWRtaW46cGFzc3dvcmQ=\r\n\r\n", ssePath)
	g.Expect(err).NotTo(HaveOccurred())

	healthy := openStream(t, http.DefaultClient, m.URL(), admin(http.MethodGet, ssePath, ""))
	// The stuck reader reads no answer: wait for its stream to be counted.
	g.Eventually(m.OpenEventStreams, wait).Should(Equal(2))

	// Power changes until the stuck stream is dropped: its buffer and the sockets' fill first. Each
	// change returns at once; the healthy reader hears every one.
	changes, states := 0, []redfishmock.PowerState{redfishmock.PowerOff, redfishmock.PowerOn}
	for m.SlowEventStreams() == 0 {
		g.Expect(changes).To(BeNumerically("<", 1_000_000), "the stuck stream was never dropped")
		g.Expect(m.SetPowerState("1", states[changes%2])).To(Succeed())
		changes++
		if changes%32 == 0 { // keep the healthy reader well within its buffer
			for range 32 {
				healthy.event(t)
			}
		}
	}
	g.Expect(m.OpenEventStreams()).To(Equal(1), "the stuck stream is gone, the healthy one open")
	t.Logf("the stuck stream was dropped after %d power changes", changes)

	// The stuck reader's connection is closed: once it reads, what the mock had sent ends, without the
	// chunked body's end.
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	_, err = io.Copy(io.Discard, conn)
	var netErr net.Error
	g.Expect(errors.As(err, &netErr) && netErr.Timeout()).To(BeFalse(), "the mock closed the connection, rather than leave it open: %v", err)

	g.Expect(m.SetPowerState("1", states[changes%2])).To(Succeed())
	for range changes % 32 {
		healthy.event(t)
	}
	g.Expect(healthy.event(t).Events[0].MessageID).To(HaveSuffix(map[redfishmock.PowerState]string{
		redfishmock.PowerOff: "ResourcePoweredOff", redfishmock.PowerOn: "ResourcePoweredOn"}[states[changes%2]]))
}
