package redfish

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// The bounds of an event stream (see WatchPower).
const (
	// maxEventBytes bounds one event: its data, and any one line of the stream. A Redfish Event record is
	// a few hundred bytes, a few KiB with OEM detail; a BMC that sends more, or a line without end, has its
	// stream dropped once this much has arrived.
	maxEventBytes = 64 << 10
	// streamIdleTimeout drops a stream that has carried nothing, not even a keep-alive comment, for this
	// long: a BMC that rebooted or lost its network without closing the connection looks like this. BMCs
	// that send keep-alives send one every few tens of seconds; one that sends none is opened again this
	// often, which costs the caller a request.
	streamIdleTimeout = 5 * time.Minute
)

var _ bmc.PowerWatcher = (*driver)(nil)

// WatchPower follows the EventService's Server-Sent Events stream (DSP0266): it reads the service root's
// EventService, opens its ServerSentEventUri with the driver's credentials, and calls changed for each
// event that has a record whose OriginOfCondition is the driver's system, or names none. Events about
// other resources (another system of a multi-system BMC, say) and those that are no Event record (a
// MetricReport) are ignored.
//
// A BMC without an EventService, with one that is disabled or that lists no ServerSentEventUri, or that
// answers its ServerSentEventUri with something other than an event stream, offers no stream: an error
// of kind ErrUnsupported. Opening the stream (the service root, the EventService and the stream's headers)
// is bounded by the request timeout, like any call, and holds the driver's lock for that long only;
// reading it has no overall bound. The stream is dropped with an error when one event (or one line) is
// larger than 64 KiB, or when nothing at all has arrived for 5 minutes.
func (d *driver) WatchPower(ctx context.Context, changed func()) error {
	st, err := d.openStream(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer st.close()
	err = readEvents(st.body, maxEventBytes, func(data []byte) {
		if aboutSystem(data, st.system) {
			changed()
		}
	})
	if ctx.Err() != nil {
		return nil
	}
	if cause := st.cause(); errors.As(cause, new(*streamIdleError)) {
		err = cause
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = errors.New("the BMC ended the event stream")
	}
	return d.failWith(ctx, bmc.OperationWatchPower, fmt.Errorf("event stream %s: %w", st.path, err), st.token)
}

// stream is an open event stream.
type stream struct {
	cause  func() error // why the request was cancelled: tells an idle stream from a drop
	cancel context.CancelCauseFunc
	body   io.ReadCloser // reset the idle timer with each byte
	idle   clock.Timer
	path   string // the ServerSentEventUri, for errors
	system string // the system's URI: the OriginOfCondition of the events that concern us
	token  string // the session token it was opened with, scrubbed from errors
}

// close ends the request: its connection is closed, not returned to the pool, as the stream did not end.
func (s *stream) close() {
	s.idle.Stop()
	s.cancel(nil)
	_ = s.body.Close()
}

// streamIdleError says the BMC sent nothing on its stream for too long. It is a timeout.
type streamIdleError struct{ idle time.Duration }

func (e *streamIdleError) Error() string {
	return fmt.Sprintf("the BMC sent nothing, not even a keep-alive, for %s", e.idle)
}

func (e *streamIdleError) Unwrap() error { return context.DeadlineExceeded }

// eventTooLargeError says an event, or a line, on a BMC's stream is larger than the driver reads.
type eventTooLargeError struct{ limit int }

func (e *eventTooLargeError) Error() string {
	size := fmt.Sprintf("%d bytes", e.limit)
	if e.limit%(1<<10) == 0 {
		size = fmt.Sprintf("%d KiB", e.limit>>10)
	}
	return fmt.Sprintf("an event or a line is larger than %s, the most metalheal reads of one event", size)
}

// openStream finds the stream's URI and opens it, under the driver's lock and within its request timeout
// (a call like any other: a session the BMC dropped is opened again). The stream's request lives on after
// the call, bound to ctx alone.
func (d *driver) openStream(ctx context.Context) (*stream, error) {
	var st *stream
	err := d.call(ctx, bmc.OperationWatchPower, func(c client) error {
		if err := d.findSystem(c); err != nil {
			return err
		}
		uri, err := d.eventStreamURI(c)
		if err != nil {
			return err
		}
		st, err = d.getStream(ctx, c.ctx, uri)
		return err
	})
	return st, err
}

// eventService is what the driver reads of the EventService.
type eventService struct {
	ServiceEnabled     *bool
	ServerSentEventURI string `json:"ServerSentEventUri"`
}

// eventStreamURI reads the EventService's ServerSentEventUri: unsupported when there is none to use.
func (d *driver) eventStreamURI(c client) (string, error) {
	if d.root.EventService == "" {
		return "", unsupportedError("the BMC offers no EventService")
	}
	resp, err := c.Get(d.root.EventService.String())
	if err != nil {
		return "", fmt.Errorf("read the EventService: %w", err)
	}
	defer resp.Body.Close()
	var svc eventService
	if err := json.NewDecoder(resp.Body).Decode(&svc); err != nil {
		return "", fmt.Errorf("read the EventService: %w", err)
	}
	switch {
	case svc.ServiceEnabled != nil && !*svc.ServiceEnabled:
		return "", unsupportedError("the BMC's EventService is disabled")
	case svc.ServerSentEventURI == "":
		return "", unsupportedError("the BMC's EventService offers no event stream (no ServerSentEventUri)")
	}
	return svc.ServerSentEventURI, nil
}

// getStream sends the stream's request, bound to ctx, and waits for its answer's headers no longer than
// openCtx. A redirect that leaves the BMC, an error status or an answer that is no event stream ends it.
func (d *driver) getStream(ctx, openCtx context.Context, uri string) (*stream, error) {
	target, err := d.resolve(uri)
	if err != nil {
		return nil, err
	}
	reqCtx, cancel := context.WithCancelCause(ctx)
	stopOpenBound := context.AfterFunc(openCtx, func() { cancel(context.Cause(openCtx)) })
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, target, nil)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	d.authenticate(req)

	resp, err := d.http.Do(req)
	if !stopOpenBound() {
		err = errors.Join(err, openCtx.Err()) // the headers took longer than the request timeout
	}
	if err != nil {
		if resp != nil {
			_ = resp.Body.Close()
		}
		cancel(nil)
		var redirect *bmc.RedirectError
		if errors.As(err, &redirect) {
			return nil, redirect
		}
		return nil, err
	}
	fail := func(err error) (*stream, error) {
		_ = resp.Body.Close()
		cancel(nil)
		return nil, err
	}
	if resp.StatusCode >= http.StatusMultipleChoices {
		return fail(newStatusError(http.MethodGet, pathOf(uri), resp))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		const maxQuoted = 60
		ct := resp.Header.Get("Content-Type")
		if len(ct) > maxQuoted {
			ct = ct[:maxQuoted] + "..."
		}
		return fail(unsupportedError(fmt.Sprintf("the BMC answers GET %s with %q, not an event stream (text/event-stream)", pathOf(uri), ct)))
	}

	st := &stream{cause: func() error { return context.Cause(reqCtx) }, cancel: cancel, path: pathOf(uri), system: d.system, token: d.token}
	st.idle = d.clock.AfterFunc(streamIdleTimeout, func() { cancel(&streamIdleError{idle: streamIdleTimeout}) })
	st.body = &idleBody{ReadCloser: resp.Body, timer: st.idle, idle: streamIdleTimeout}
	return st, nil
}

// pathOf is the path of a URI the BMC gave, for errors, cut short if the BMC made it long.
func pathOf(uri string) string {
	if u, err := url.Parse(uri); err == nil && u.Path != "" {
		uri = u.Path
	}
	const maxQuoted = 120
	if len(uri) > maxQuoted {
		uri = uri[:maxQuoted] + "..."
	}
	return uri
}

// idleBody puts off the idle timer each time a byte arrives.
type idleBody struct {
	io.ReadCloser
	timer clock.Timer
	idle  time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.timer.Reset(b.idle)
	}
	return n, err
}

// readEvents reads a text/event-stream (the HTML Server-Sent Events format, as DSP0266 uses it) and calls
// fn with the data of each event, its data lines joined by newlines, once a blank line ends it. Comments
// (lines that begin with a colon: keep-alives), the id, event and retry fields, and events without data
// are skipped. A line, or an event's data, longer than limit ends the read with an *eventTooLargeError;
// what is held is bounded by that. It returns the reader's error, io.EOF when the stream ends.
func readEvents(r io.Reader, limit int, fn func(data []byte)) error {
	br := bufio.NewReaderSize(r, 4<<10)
	var line, data []byte
	hasData := false
	for {
		var err error
		line, err = readLine(br, line[:0], limit)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			if hasData {
				fn(bytes.TrimSuffix(data, []byte("\n")))
			}
			data, hasData = data[:0], false
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if string(name) != "data" {
			continue // a comment, or a field that says nothing of what happened
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if len(data)+len(value)+1 > limit {
			return &eventTooLargeError{limit: limit}
		}
		data = append(append(data, value...), '\n')
		hasData = true
	}
}

// readLine reads one line into buf, without its end (LF or CRLF). A line longer than limit is an
// *eventTooLargeError, found once limit bytes of it have arrived.
func readLine(br *bufio.Reader, buf []byte, limit int) ([]byte, error) {
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > limit+2 { // the line's end is not its content
			return nil, &eventTooLargeError{limit: limit}
		}
		buf = append(buf, frag...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			return nil, err // a stream that ends mid-line has no event to give
		}
		buf = bytes.TrimSuffix(buf[:len(buf)-1], []byte("\r"))
		return buf, nil
	}
}

// eventRecord is what the driver reads of an event: its records' origins.
type eventRecord struct {
	Events []struct {
		OriginOfCondition json.RawMessage
	}
}

// aboutSystem reports whether an event's data is a Redfish Event with a record about system, or one that
// names no origin. Anything else (a MetricReport, what is not JSON) is not.
func aboutSystem(data []byte, system string) bool {
	var ev eventRecord
	if json.Unmarshal(data, &ev) != nil {
		return false
	}
	for _, rec := range ev.Events {
		origin, named := originOf(rec.OriginOfCondition)
		if !named || samePath(origin, system) {
			return true
		}
	}
	return false
}

// originOf reads an OriginOfCondition: a link ({"@odata.id": "..."}) as the schema has it, or a bare URI
// as some BMCs send it. named is false when it names nothing.
func originOf(raw json.RawMessage) (origin string, named bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	var link struct {
		ODataID string `json:"@odata.id"`
	}
	if json.Unmarshal(raw, &link) == nil {
		return link.ODataID, link.ODataID != ""
	}
	if json.Unmarshal(raw, &origin) == nil {
		return origin, origin != ""
	}
	return "", true // something we cannot read: not ours
}

// samePath reports whether a URI the BMC gave (a path, or an absolute URL) is the path p.
func samePath(uri, p string) bool {
	if u, err := url.Parse(uri); err == nil {
		uri = u.Path
	}
	return strings.TrimRight(uri, "/") == strings.TrimRight(p, "/")
}
