package bmc

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// MaxResponseBytes bounds what an HTTP-based driver reads of one BMC answer. A Redfish resource is a few
// KiB and a large collection a few hundred; an answer larger than this is a broken or hostile BMC, and
// reading it would cost the manager memory (a decoder buffers a value whole) and time (up to the request
// deadline, for a BMC that keeps sending).
const MaxResponseBytes = 4 << 20

// maxRedirects bounds the redirects followed within the BMC, as Go's default policy does.
const maxRedirects = 10

// RedirectError says the BMC redirected a request to another origin (scheme, host or port). Drivers do
// not follow such redirects: the request would carry the BMC's credentials or session token there.
type RedirectError struct {
	Method string // the redirected request's method
	Path   string // the redirected request's path on the BMC
	BMC    string // the BMC's origin, scheme://host:port
	To     string // the origin the BMC redirected to
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("the BMC redirected %s %s to another host (%s); metalheal does not follow redirects that "+
		"leave the BMC (%s), so that its credentials go nowhere else: if %s is the BMC, put it in the BMC's address",
		e.Method, e.Path, e.To, e.BMC, e.To)
}

// ResponseTooLargeError says a BMC's answer is larger than the driver reads (MaxResponseBytes).
type ResponseTooLargeError struct {
	Method   string // the request's method
	Path     string // the request's path on the BMC
	Limit    int64  // the most the driver reads of one answer
	Declared int64  // the length the BMC declared (Content-Length), or -1 when it declared none
}

func (e *ResponseTooLargeError) Error() string {
	declared := ""
	if e.Declared >= 0 {
		declared = fmt.Sprintf(" (it declares %s)", byteSize(e.Declared))
	}
	return fmt.Sprintf("the BMC's answer to %s %s is larger than %s%s, the most metalheal reads of one answer",
		e.Method, e.Path, byteSize(e.Limit), declared)
}

// byteSize spells n in the largest binary unit that keeps it readable: 4 MiB, 300 MiB, 1500 bytes.
func byteSize(n int64) string {
	switch {
	case n >= 10<<20 || (n >= 1<<20 && n%(1<<20) == 0):
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 10<<10 || (n >= 1<<10 && n%(1<<10) == 0):
		return strconv.FormatInt(n>>10, 10) + " KiB"
	default:
		return strconv.FormatInt(n, 10) + " bytes"
	}
}

// Origin returns u's origin as scheme://host:port, lower case, with the scheme's default port spelled
// out: two URLs reach the same server (and may share its credentials) exactly when their origins are
// equal. It returns "" for a URL with no scheme or no host.
func Origin(u *url.URL) string {
	if u == nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// CheckRedirect returns an http.Client CheckRedirect policy for a BMC at endpoint: it follows redirects
// that stay at the BMC's origin (sushy-tools answers a system addressed by name with a 307 to its UUID),
// at most maxRedirects of them, and refuses any other with a *RedirectError before it is sent. Go's
// client drops only the Authorization and Cookie headers on a redirect to another domain, and keeps them
// for another port or scheme of the same host name or a subdomain; it forwards every other header (a
// Redfish X-Auth-Token, say) everywhere: no redirect that leaves the BMC is safe to follow.
func CheckRedirect(endpoint *url.URL) func(req *http.Request, via []*http.Request) error {
	bmcOrigin := Origin(endpoint)
	return func(req *http.Request, via []*http.Request) error {
		if to := Origin(req.URL); to != bmcOrigin || to == "" {
			last := via[len(via)-1]
			return &RedirectError{Method: last.Method, Path: last.URL.Path, BMC: bmcOrigin, To: to}
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects within the BMC", maxRedirects)
		}
		return nil
	}
}

// LimitResponse makes resp's body fail with a *ResponseTooLargeError once more than limit bytes have
// been read from it, so that a BMC sending a huge or endless answer costs at most limit bytes and stops
// being read at once. An answer that declares a length above limit is refused without reading: its body
// is closed (with its connection) and the error returned.
func LimitResponse(resp *http.Response, limit int64) error {
	tooLarge := &ResponseTooLargeError{Limit: limit, Declared: -1}
	if req := resp.Request; req != nil && req.URL != nil {
		tooLarge.Method, tooLarge.Path = req.Method, req.URL.Path
	}
	if resp.ContentLength > limit {
		tooLarge.Declared = resp.ContentLength
		_ = resp.Body.Close()
		return tooLarge
	}
	resp.Body = &limitedBody{body: resp.Body, left: limit, tooLarge: tooLarge}
	return nil
}

// limitedBody is a response body that fails once it has given limit bytes and there are more.
type limitedBody struct {
	body     io.ReadCloser
	left     int64 // bytes that may still be read
	tooLarge *ResponseTooLargeError
	err      error // sticky: set once the answer has proved too large
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// One byte beyond what is left tells an answer of exactly limit bytes from a larger one.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.body.Read(p)
	if int64(n) > b.left {
		n, b.left, b.err = int(b.left), 0, b.tooLarge
		return n, b.err
	}
	b.left -= int64(n)
	return n, err
}

// Close closes the body. An answer cut off unread closes its connection: nothing more of it is read.
func (b *limitedBody) Close() error { return b.body.Close() }
