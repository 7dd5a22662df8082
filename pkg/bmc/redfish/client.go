package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/stmcginnis/gofish/common"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// client is the common.Client gofish's models use to reach the BMC. It lives for one driver call: every
// request is bound to that call's context and carries the driver's current credentials.
type client struct {
	ctx context.Context //nolint:containedctx // gofish's Client interface has no context parameter
	d   *driver
}

var _ common.Client = client{}

// errNoTarget: gofish asked for a resource the BMC never linked (a reset action without a target, say).
var errNoTarget = errors.New("the BMC links no such resource")

func (c client) Get(url string) (*http.Response, error) {
	return c.do(http.MethodGet, url, nil, nil)
}

func (c client) GetWithHeaders(url string, h map[string]string) (*http.Response, error) {
	return c.do(http.MethodGet, url, nil, h)
}

func (c client) Post(url string, payload any) (*http.Response, error) {
	return c.do(http.MethodPost, url, payload, nil)
}

func (c client) PostWithHeaders(url string, payload any, h map[string]string) (*http.Response, error) {
	return c.do(http.MethodPost, url, payload, h)
}

func (c client) PostMultipart(string, map[string]io.Reader) (*http.Response, error) {
	return nil, errors.New("multipart requests are not used by this driver")
}

func (c client) PostMultipartWithHeaders(string, map[string]io.Reader, map[string]string) (*http.Response, error) {
	return nil, errors.New("multipart requests are not used by this driver")
}

func (c client) Patch(url string, payload any) (*http.Response, error) {
	return c.do(http.MethodPatch, url, payload, nil)
}

func (c client) PatchWithHeaders(url string, payload any, h map[string]string) (*http.Response, error) {
	return c.do(http.MethodPatch, url, payload, h)
}

func (c client) Put(url string, payload any) (*http.Response, error) {
	return c.do(http.MethodPut, url, payload, nil)
}

func (c client) PutWithHeaders(url string, payload any, h map[string]string) (*http.Response, error) {
	return c.do(http.MethodPut, url, payload, h)
}

func (c client) Delete(url string) (*http.Response, error) {
	return c.DeleteWithHeaders(url, nil)
}

func (c client) DeleteWithHeaders(url string, h map[string]string) (*http.Response, error) {
	resp, err := c.do(http.MethodDelete, url, nil, h)
	if err == nil {
		_ = resp.Body.Close()
	}
	return resp, err
}

// do sends one request. A status of 300 or more comes back as a *statusError, a redirect that leaves the
// BMC as a *bmc.RedirectError (before anything is sent there), and an answer larger than
// bmc.MaxResponseBytes as a *bmc.ResponseTooLargeError (as soon as that much has been read).
func (c client) do(method, path string, payload any, headers map[string]string) (*http.Response, error) {
	target, err := c.d.resolve(path)
	if err != nil {
		return nil, err
	}
	var body io.Reader
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		if k != "" {
			req.Header.Set(k, v)
		}
	}
	c.d.authenticate(req)

	resp, err := c.d.http.Do(req)
	if err != nil {
		// The redirect error on its own: its *url.Error would quote the whole Location the BMC sent.
		var redirect *bmc.RedirectError
		if errors.As(err, &redirect) {
			return nil, redirect
		}
		return nil, err
	}
	if err := bmc.LimitResponse(resp, bmc.MaxResponseBytes); err != nil {
		return nil, err
	}
	resp.Body = drainingBody{resp.Body}
	if resp.StatusCode >= http.StatusMultipleChoices {
		defer resp.Body.Close()
		return nil, newStatusError(method, path, resp)
	}
	return resp, nil
}

// resolve returns the URL of path on the BMC. Paths come from the BMC itself (the links in its answers:
// the systems it lists, an action's target), so one that is not a path on the BMC is refused rather than
// sent our credentials: an absolute URL of another origin, "//host/...", or "@host/...", which appended
// to the BMC's scheme://host:port would name another host. An absolute URL of the BMC itself is fine.
func (d *driver) resolve(path string) (string, error) {
	if path == "" {
		return "", errNoTarget
	}
	if strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "//") {
		return d.endpoint + path, nil
	}
	if u, err := url.Parse(path); err == nil && u.IsAbs() && bmc.Origin(u) == d.origin {
		return d.endpoint + u.RequestURI(), nil
	}
	const maxQuoted = 120
	if len(path) > maxQuoted {
		path = path[:maxQuoted] + "..."
	}
	return "", unsupportedError(fmt.Sprintf("the BMC links %q, which is not a path on the BMC (%s); metalheal sends "+
		"nothing to other hosts", path, d.origin))
}

// maxDrain bounds what is read and thrown away of a response body left unread.
const maxDrain = 64 << 10

// drainingBody reads what is left of a response body (up to maxDrain) before closing it, so that its
// connection goes back to the pool: a body closed before its end closes the connection, and a JSON
// decoder (ours, gofish's) stops at the end of the value, which may come before the end of the body.
type drainingBody struct{ io.ReadCloser }

func (b drainingBody) Close() error {
	_, _ = io.CopyN(io.Discard, b.ReadCloser, maxDrain)
	return b.ReadCloser.Close()
}

// statusError is a BMC's answer with an error status. It keeps the Redfish error's message, never the
// request body.
type statusError struct {
	method, path string
	code         int
	message      string
}

func newStatusError(method, path string, resp *http.Response) *statusError {
	e := &statusError{method: method, path: path, code: resp.StatusCode}
	var body struct {
		Error struct {
			Message string `json:"message"`
			Info    []struct {
				Message string
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body) == nil {
		e.message = body.Error.Message
		if len(body.Error.Info) > 0 && body.Error.Info[0].Message != e.message {
			e.message = strings.TrimSpace(e.message + " " + body.Error.Info[0].Message)
		}
	}
	return e
}

func (e *statusError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.method, e.path, e.code, http.StatusText(e.code))
	if e.message != "" {
		s += ": " + e.message
	}
	return s
}

// hasStatus reports whether err is the BMC answering code.
func hasStatus(err error, code int) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == code
}
