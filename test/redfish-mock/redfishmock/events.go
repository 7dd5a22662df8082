package redfishmock

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Paths of the EventService and its Server-Sent Events stream.
const (
	eventServicePath = rootPath + "/EventService"
	ssePath          = eventServicePath + "/SSE"
)

// DefaultEventKeepAlive is how often an idle event stream carries a keep-alive comment.
const DefaultEventKeepAlive = 30 * time.Second

// eventBuffer is how many events a stream holds for a reader that has fallen behind. A power change never
// waits for a reader: the stream of one whose buffer is full is dropped (its connection closed), as a BMC
// drops a subscriber it cannot serve, and the reader must open a new one.
const eventBuffer = 64

// EventService is what the mock's EventService offers (see WithEventService).
type EventService string

// The EventService's states.
const (
	// EventServiceEnabled: ServiceEnabled, with a ServerSentEventUri that streams every power change.
	EventServiceEnabled EventService = "Enabled"
	// EventServiceDisabled: ServiceEnabled is false; the ServerSentEventUri is still listed, and answers 503.
	EventServiceDisabled EventService = "Disabled"
	// EventServiceNoSSE: enabled, without a ServerSentEventUri (a BMC that only pushes to subscribers).
	EventServiceNoSSE EventService = "NoSSE"
	// EventServiceAbsent: the service root links no EventService, and its URI answers 404.
	EventServiceAbsent EventService = "Absent"
)

func (s EventService) validate() error {
	switch s {
	case EventServiceEnabled, EventServiceDisabled, EventServiceNoSSE, EventServiceAbsent:
		return nil
	}
	return fmt.Errorf("event service %q: want Enabled, Disabled, NoSSE or Absent", s)
}

// eventHub holds the open event streams and hands them every power change.
type eventHub struct {
	mu      sync.Mutex
	service EventService
	streams map[*eventStream]struct{}
	lastID  int64 // the Id of the last event
	slow    int   // streams dropped because their reader fell behind
}

// eventStream is one open SSE response. Its handler's goroutine is its only writer; publishers hand it
// events through its buffered channel and never block.
type eventStream struct {
	user   string // the account that opened it: it hears of that account's systems only
	events chan []byte
	gone   chan struct{} // closed when the mock drops the stream
	rc     *http.ResponseController
}

// dropLocked removes s and makes its handler close its connection, now, even if the handler is stuck
// writing to a reader that does not read. Call with the hub's lock, for a stream still in the hub (its
// handler has not returned, so its connection serves nothing else yet).
func (h *eventHub) dropLocked(s *eventStream) {
	delete(h.streams, s)
	close(s.gone)
	// A deadline in the past fails a write that is blocked, and every later one.
	_ = s.rc.SetWriteDeadline(time.Unix(1, 0))
}

// publish sends an event about c to the streams of the system's owner.
func (h *eventHub) publish(c change, owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastID++
	if len(h.streams) == 0 {
		return
	}
	payload := sseEvent(h.lastID, c)
	for s := range h.streams {
		if s.user != owner {
			continue
		}
		select {
		case s.events <- payload:
		default:
			h.slow++
			h.dropLocked(s)
		}
	}
}

// The ResourceEvent registry's messages for a system's PowerState (ResourceEvent 1.3.0 introduced them).
var powerMessages = map[PowerState]struct{ key, verb string }{
	PowerOn:     {"ResourcePoweredOn", "has powered on"},
	PowerOff:    {"ResourcePoweredOff", "has powered off"},
	PoweringOn:  {"ResourcePoweringOn", "is powering on"},
	PoweringOff: {"ResourcePoweringOff", "is powering off"},
}

// sseEvent is the SSE form of an Event record telling of c: an id field, and the record as one data line.
func sseEvent(id int64, c change) []byte {
	path := systemsPath + "/" + c.id
	msg := powerMessages[c.to]
	eventID := strconv.FormatInt(id, 10)
	record, _ := json.Marshal(obj{
		"@odata.type": "#Event.v1_4_0.Event",
		"Id":          eventID,
		"Name":        "Power event",
		"Events": []obj{{
			"EventType":         "Other",
			"EventId":           eventID,
			"EventTimestamp":    c.at.UTC().Format(time.RFC3339),
			"MemberId":          "0",
			"MessageId":         "ResourceEvent.1.3.0." + msg.key,
			"MessageArgs":       []string{path},
			"Message":           fmt.Sprintf("The resource `%s` %s.", path, msg.verb),
			"OriginOfCondition": link(path),
		}},
	})
	return fmt.Appendf(nil, "id: %s\ndata: %s\n\n", eventID, record)
}

// WithEventService sets what the EventService offers at start (Enabled by default); SetEventService
// changes it later.
func (m *Mock) WithEventService(s EventService) *Mock {
	if err := s.validate(); err != nil {
		m.fail(fmt.Errorf("WithEventService: %w", err))
		return m
	}
	m.events.service = s
	return m
}

// WithEventKeepAlive sets how often an event stream with nothing to say carries a keep-alive comment, on
// the Mock's clock (DefaultEventKeepAlive by default); zero or less sends none.
func (m *Mock) WithEventKeepAlive(d time.Duration) *Mock {
	m.keepAlive = d
	return m
}

// SetEventService changes what the EventService offers. Leaving Enabled drops every open stream, as a BMC
// whose service is switched off does.
func (m *Mock) SetEventService(s EventService) error {
	if err := s.validate(); err != nil {
		return err
	}
	m.events.mu.Lock()
	defer m.events.mu.Unlock()
	m.events.service = s
	if s != EventServiceEnabled {
		for st := range m.events.streams {
			m.events.dropLocked(st)
		}
	}
	return nil
}

// OpenEventStreams is how many event streams are open.
func (m *Mock) OpenEventStreams() int {
	m.events.mu.Lock()
	defer m.events.mu.Unlock()
	return len(m.events.streams)
}

// SlowEventStreams is how many event streams the mock dropped because their reader fell behind by more
// than the stream's buffer (64 events).
func (m *Mock) SlowEventStreams() int {
	m.events.mu.Lock()
	defer m.events.mu.Unlock()
	return m.events.slow
}

// DropEventStreams closes the connection of every open event stream mid-stream, as a BMC that reboots or
// loses its network does, and says how many there were.
func (m *Mock) DropEventStreams() int {
	m.events.mu.Lock()
	defer m.events.mu.Unlock()
	n := len(m.events.streams)
	for s := range m.events.streams {
		m.events.dropLocked(s)
	}
	return n
}

func (m *Mock) eventServiceState() EventService {
	m.events.mu.Lock()
	defer m.events.mu.Unlock()
	return m.events.service
}

func (m *Mock) eventService(w http.ResponseWriter, r *http.Request, _ string) {
	state := m.eventServiceState()
	if state == EventServiceAbsent {
		notFound(w, r.URL.Path)
		return
	}
	body := obj{
		"@odata.id":        eventServicePath,
		"@odata.type":      "#EventService.v1_7_0.EventService",
		"Id":               "EventService",
		"Name":             "Event Service",
		"ServiceEnabled":   state != EventServiceDisabled,
		"Status":           obj{"State": "Enabled", "Health": "OK"},
		"EventFormatTypes": []string{"Event"},
		"RegistryPrefixes": []string{"ResourceEvent"},
		"ResourceTypes":    []string{"ComputerSystem"},
	}
	if state == EventServiceDisabled {
		body["Status"] = obj{"State": "Disabled", "Health": "OK"}
	}
	if state != EventServiceNoSSE {
		body["ServerSentEventUri"] = ssePath
	}
	writeJSON(w, http.StatusOK, body)
}

// serveEventStream serves the ServerSentEventUri: every power change of the account's systems as an Event
// record, and a keep-alive comment when there has been nothing to say for the keep-alive interval.
func (m *Mock) serveEventStream(w http.ResponseWriter, r *http.Request, user string) {
	s := &eventStream{user: user, events: make(chan []byte, eventBuffer), gone: make(chan struct{}), rc: http.NewResponseController(w)}
	m.events.mu.Lock()
	state := m.events.service
	if state == EventServiceEnabled {
		m.events.streams[s] = struct{}{}
	}
	m.events.mu.Unlock()
	switch state {
	case EventServiceEnabled:
	case EventServiceDisabled:
		writeError(w, http.StatusServiceUnavailable, "Base.1.11.ServiceDisabled", "the event service is disabled")
		return
	default:
		notFound(w, r.URL.Path)
		return
	}
	defer func() {
		m.events.mu.Lock()
		delete(m.events.streams, s)
		m.events.mu.Unlock()
	}()

	// The keep-alive timer runs again after every write: a comment goes out after keepAlive of silence. It
	// starts before the answer does, so that a reader that has the answer may step a fake clock past it.
	var keepAlive <-chan time.Time
	rearm := func() {}
	if m.keepAlive > 0 {
		t := m.clock.NewTimer(m.keepAlive)
		defer t.Stop()
		keepAlive = t.C()
		rearm = func() {
			if !t.Stop() {
				select { // drain a tick that fired while an event was written
				case <-t.C():
				default:
				}
			}
			t.Reset(m.keepAlive)
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if s.rc.Flush() != nil {
		return
	}
	for {
		var err error
		select {
		case ev := <-s.events:
			_, err = w.Write(ev)
			rearm()
		case <-keepAlive:
			_, err = io.WriteString(w, ": keep-alive\n")
			rearm()
		case <-s.gone:
			// Closed mid-stream, without the chunked body's end: the reader sees its connection drop.
			if conn, _, err := s.rc.Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		case <-r.Context().Done():
			return
		}
		if err == nil {
			err = s.rc.Flush()
		}
		if err != nil {
			return
		}
	}
}
