package ironic

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/ironic/ironictest"
)

// The tests here put the driver in front of an Ironic that misbehaves on purpose: it redirects elsewhere,
// or sends answers without end.

// seen is a request as a listener received it.
type seen struct {
	method, path string
	header       http.Header
}

// recorder records every request that reaches a listener, then hands it to next.
type recorder struct {
	mu   sync.Mutex
	reqs []seen
	next http.Handler
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.reqs = append(r.reqs, seen{method: req.Method, path: req.URL.Path, header: req.Header.Clone()})
	r.mu.Unlock()
	r.next.ServeHTTP(w, req)
}

func (r *recorder) requests() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.reqs...)
}

// serve starts an httptest server (HTTPS with useTLS) and stops it when the test ends.
func serve(t *testing.T, h http.Handler, useTLS bool) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	if useTLS {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// trusting returns a transport that trusts the certificates of servers (httptest's, for 127.0.0.1).
func trusting(servers ...*httptest.Server) http.RoundTripper {
	pool := x509.NewCertPool()
	for _, s := range servers {
		if c := s.Certificate(); c != nil {
			pool.AddCert(c)
		}
	}
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
}

// redirecting answers each request named in redirects ("METHOD /path") with a 307 to its location, and
// serves the others from next.
func redirecting(next http.Handler, redirects map[string]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loc, ok := redirects[r.Method+" "+r.URL.Path]; ok {
			http.Redirect(w, r, loc, http.StatusTemporaryRedirect)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// driverFor returns a driver for node at the Ironic listening at srv (ironic+https when it serves TLS).
func driverFor(t *testing.T, srv *httptest.Server, node string, c bmc.Credentials, opts bmc.Options) bmc.Driver {
	t.Helper()
	scheme := "ironic"
	if srv.TLS != nil {
		scheme = "ironic+https"
	}
	addr, err := bmc.ParseAddress(scheme + "://" + srv.Listener.Addr().String() + "/" + node)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(addr, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

var (
	powerState = func(ctx context.Context, d bmc.Driver) error { _, err := d.PowerState(ctx); return err }
	powerOff   = func(ctx context.Context, d bmc.Driver) error { return d.PowerOff(ctx, true) }
)

// TestRedirectsElsewhereCarryNothing: an Ironic that redirects a request to a second listener (another
// port, host name or scheme) gets a typed error back, and the second listener receives nothing: no basic
// credentials, and with noauth no request at all. The second listener serves the same Ironic API, so a
// driver that followed the redirect would succeed there (and, with http_basic, hand it the credentials).
func TestRedirectsElsewhereCarryNothing(t *testing.T) {
	const (
		// locationSecret stands for anything the Location carries beyond its origin: it is no business of
		// the error message.
		locationSecret = "loc-s3cr3t-token"
		read           = "GET /v1/nodes/" + nodeUUID
		powerRequest   = "PUT /v1/nodes/" + nodeUUID + "/states/power"
	)
	basicToken := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	tests := map[string]struct {
		noauth    bool
		ironicTLS bool
		otherTLS  bool
		otherHost string // the host name the redirect gives the second listener; 127.0.0.1 when empty
		redirect  string // the request ("METHOD /path") Ironic redirects to the second listener
		op        func(ctx context.Context, d bmc.Driver) error
	}{
		"noauth, a read, HTTP to HTTP on another port":              {noauth: true, redirect: read, op: powerState},
		"noauth, the power request, HTTP to HTTP on another port":   {noauth: true, redirect: powerRequest, op: powerOff},
		"noauth, a read, to another host name":                      {noauth: true, otherHost: "localhost", redirect: read, op: powerState},
		"http_basic, a read, HTTP to HTTP on another port":          {redirect: read, op: powerState},
		"http_basic, the power request, HTTP to HTTP, another port": {redirect: powerRequest, op: powerOff},
		"http_basic, a read, HTTPS to HTTPS on another port":        {ironicTLS: true, otherTLS: true, redirect: read, op: powerState},
		"http_basic, the power request, HTTPS to plain HTTP":        {ironicTLS: true, redirect: powerRequest, op: powerOff},
		"http_basic, a read, to another host name":                  {otherHost: "localhost", redirect: read, op: powerState},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			api := ironictest.NewServer(t).WithNode(nodeUUID, ironictest.PowerOn)
			c := bmc.Credentials{}
			if !tc.noauth {
				api.WithBasicAuth(user, password)
				c = creds
			}
			// Both listeners serve the same Ironic API: the second records what reaches it.
			other := &recorder{next: api}
			otherSrv := serve(t, other, tc.otherTLS)
			otherURL, err := url.Parse(otherSrv.URL)
			g.Expect(err).NotTo(HaveOccurred())
			if tc.otherHost != "" {
				otherURL.Host = tc.otherHost + ":" + otherURL.Port()
			}
			method, path, _ := strings.Cut(tc.redirect, " ")
			location := otherURL.String() + path + "?token=" + locationSecret
			ironicSrv := serve(t, redirecting(api, map[string]string{tc.redirect: location}), tc.ironicTLS)
			// Over plain HTTP the driver builds its own transport; over HTTPS it wraps the one given.
			opts := bmc.Options{}
			if tc.ironicTLS || tc.otherTLS {
				opts.Transport = trusting(ironicSrv, otherSrv)
			}
			d := driverFor(t, ironicSrv, nodeUUID, c, opts)

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err = tc.op(ctx, d)

			for _, r := range other.requests() {
				g.Expect(r.header.Get("Authorization")).To(BeEmpty(),
					"%s %s reached the second listener with the credentials", r.method, r.path)
			}
			g.Expect(other.requests()).To(BeEmpty(), "nothing reaches the second listener")
			g.Expect(api.PowerState(nodeUUID)).To(Equal(ironictest.PowerOn), "the node's power is untouched")

			var redirect *bmc.RedirectError
			g.Expect(errors.As(err, &redirect)).To(BeTrue(), "a *bmc.RedirectError: %v", err)
			g.Expect(redirect.Method).To(Equal(method))
			g.Expect(redirect.Path).To(Equal(path))
			g.Expect(redirect.To).To(Equal(bmc.Origin(otherURL)))
			g.Expect(err).To(MatchError(bmc.ErrUnsupported), "Ironic cannot be used as addressed")
			g.Expect(bmc.Reason(err)).To(Equal("Unsupported"))
			g.Expect(err).To(MatchError(ContainSubstring("the BMC redirected %s %s to another host (%s)",
				method, path, bmc.Origin(otherURL))))
			g.Expect(err).To(MatchError(ContainSubstring("metalheal does not follow redirects that leave the BMC")))
			for _, secret := range []string{password, basicToken, locationSecret} {
				g.Expect(err.Error()).NotTo(ContainSubstring(secret))
			}
			g.Expect(ctx.Err()).NotTo(HaveOccurred(), "failed at once, not at the deadline")
			t.Log(err)
		})
	}
}

// TestRedirectsWithinIronicAreFollowed: a redirect to the same origin (a proxy in front of Ironic that
// moves a path, a node addressed by another name) is followed with the credentials, for reads and power
// requests, whether the Location is a path or an absolute URL of Ironic itself. The test server refuses
// requests without the right credentials, so a request that arrives with 200 or 202 carried them.
func TestRedirectsWithinIronicAreFollowed(t *testing.T) {
	const byName = "/v1/nodes/worker-a1"
	tests := map[string]struct {
		noauth   bool
		useTLS   bool
		absolute bool // the Location is an absolute URL of Ironic itself, not a path
	}{
		"noauth, HTTP":                       {noauth: true},
		"noauth, HTTPS, an absolute URL":     {noauth: true, useTLS: true, absolute: true},
		"http_basic, HTTP":                   {},
		"http_basic, HTTP, an absolute URL":  {absolute: true},
		"http_basic, HTTPS":                  {useTLS: true},
		"http_basic, HTTPS, an absolute URL": {useTLS: true, absolute: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			api := ironictest.NewServer(t).WithNode(nodeUUID, ironictest.PowerOn)
			c := bmc.Credentials{}
			if !tc.noauth {
				api.WithBasicAuth(user, password)
				c = creds
			}
			redirects := map[string]string{}
			srv := serve(t, redirecting(api, redirects), tc.useTLS)
			prefix := ""
			if tc.absolute {
				prefix = srv.URL
			}
			redirects["GET "+byName] = prefix + "/v1/nodes/" + nodeUUID
			redirects["PUT "+byName+"/states/power"] = prefix + "/v1/nodes/" + nodeUUID + "/states/power"
			opts := bmc.Options{}
			if tc.useTLS {
				opts.Transport = trusting(srv)
			}
			d := driverFor(t, srv, strings.TrimPrefix(byName, "/v1/nodes/"), c, opts)

			g.Expect(d.PowerState(t.Context())).To(Equal(bmc.PowerStateOn))
			g.Expect(d.PowerOff(t.Context(), true)).To(Succeed())
			g.Expect(api.PowerState(nodeUUID)).To(Equal(ironictest.PowerOff))
			g.Expect(api.Requests()).To(Equal([]ironictest.Request{
				{Method: http.MethodGet, Path: "/v1/nodes/" + nodeUUID, APIVersion: apiVersion, Status: http.StatusOK},
				{Method: http.MethodPut, Path: "/v1/nodes/" + nodeUUID + "/states/power", APIVersion: apiVersion,
					Target: ironictest.PowerOff, Status: http.StatusAccepted},
			}), "both redirected requests arrive whole, with the credentials")
		})
	}
}

// hugeAnswer answers with status and a JSON object whose power_state is a string of size bytes, written
// from one small buffer, declaring its length when declare is set. A decoder that read it all would hold
// it whole, and gophercloud reads an error answer whole.
func hugeAnswer(status int, size int64, declare bool) http.HandlerFunc {
	const head, tail = `{"power_state":"`, `"}`
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if declare {
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		}
		w.WriteHeader(status)
		if _, err := io.WriteString(w, head); err != nil {
			return
		}
		for left := size - int64(len(head)+len(tail)); left > 0; {
			n, err := w.Write(chunk[:min(left, int64(len(chunk)))])
			if err != nil {
				return
			}
			left -= int64(n)
		}
		_, _ = io.WriteString(w, tail)
	}
}

// paddedAnswer serves next's answer preceded by spaces, to size bytes in all: valid JSON of that size,
// whose value ends at its last byte.
func paddedAnswer(next http.Handler, size int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		body := bytes.TrimSpace(rec.Body.Bytes())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-OpenStack-Ironic-API-Version", apiVersion)
		w.WriteHeader(rec.Code)
		_, _ = w.Write(bytes.Repeat([]byte(" "), size-len(body)))
		_, _ = w.Write(body)
	}
}

// stalledAnswer sends size bytes of an unfinished JSON string, then nothing more until the client goes
// away: an Ironic (or a proxy) that keeps a connection open past the cap.
func stalledAnswer(size int) http.HandlerFunc {
	body := []byte(`{"power_state":"` + strings.Repeat("a", size))
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}
}

// TestOversizedAnswers: an answer larger than bmc.MaxResponseBytes ends in a *bmc.ResponseTooLargeError
// as soon as the driver has read that much (or at once, when Ironic declares the length), whichever
// request it answers and whatever its status: the test's memory grows by well under 32 MiB for a 300 MB
// answer, the message quotes none of it, a 409 that large is not waited out as a lock, and an Ironic that
// stops sending after the cap does not hold the call until its deadline. An answer of exactly the cap is
// read.
func TestOversizedAnswers(t *testing.T) {
	const (
		huge      = 300 << 20
		maxGrowth = 32 << 20
		deadline  = 10 * time.Second
		read      = "GET /v1/nodes/" + nodeUUID
		power     = "PUT /v1/nodes/" + nodeUUID + "/states/power"
	)
	tests := map[string]struct {
		request  string // the request whose answer is replaced
		answer   func(api http.Handler) http.Handler
		op       func(ctx context.Context, d bmc.Driver) error
		declared bool // the answer declares its length
		wantOK   bool
	}{
		"300 MB power_state, streamed": {
			request: read, op: powerState,
			answer: func(http.Handler) http.Handler { return hugeAnswer(http.StatusOK, huge, false) },
		},
		"300 MB power_state, its length declared": {
			request: read, op: powerState, declared: true,
			answer: func(http.Handler) http.Handler { return hugeAnswer(http.StatusOK, huge, true) },
		},
		"300 MB error answer to a read": {
			request: read, op: powerState,
			answer: func(http.Handler) http.Handler { return hugeAnswer(http.StatusServiceUnavailable, huge, false) },
		},
		"300 MB answer accepting the power request": {
			request: power, op: powerOff,
			answer: func(http.Handler) http.Handler { return hugeAnswer(http.StatusAccepted, huge, false) },
		},
		"300 MB node-locked answer to the power request": {
			request: power, op: powerOff,
			answer: func(http.Handler) http.Handler { return hugeAnswer(http.StatusConflict, huge, false) },
		},
		"the cap and a little more, then a stall": {
			request: read, op: powerState,
			answer: func(http.Handler) http.Handler { return stalledAnswer(bmc.MaxResponseBytes + 64<<10) },
		},
		"one byte over the cap": {
			request: read, op: powerState,
			answer: func(api http.Handler) http.Handler { return paddedAnswer(api, bmc.MaxResponseBytes+1) },
		},
		"exactly the cap is read": {
			request: read, op: powerState, wantOK: true,
			answer: func(api http.Handler) http.Handler { return paddedAnswer(api, bmc.MaxResponseBytes) },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			api := ironictest.NewServer(t).WithBasicAuth(user, password).WithNode(nodeUUID, ironictest.PowerOn)
			var answered atomic.Int32
			answer := tc.answer(api)
			mux := http.NewServeMux()
			mux.Handle(tc.request, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				answered.Add(1)
				answer.ServeHTTP(w, r)
			}))
			mux.Handle("/", api)
			srv := serve(t, mux, false)
			d := driverFor(t, srv, nodeUUID, creds, bmc.Options{})
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := tc.op(ctx, d)
			runtime.ReadMemStats(&after)

			if tc.wantOK {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			// TotalAlloc counts every byte allocated meanwhile, freed or not: the decoder's buffer as it
			// grows, io.ReadAll's, the answer's copies in an error message.
			growth := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d KiB during the call", growth>>10)
			g.Expect(growth).To(BeNumerically("<", maxGrowth), "bytes allocated during the call")
			g.Expect(ctx.Err()).NotTo(HaveOccurred(), "failed before the deadline: %v", err)
			g.Expect(answered.Load()).To(BeEquivalentTo(1), "one answer that large ends the call: no retry")

			method, path, _ := strings.Cut(tc.request, " ")
			var tooLarge *bmc.ResponseTooLargeError
			g.Expect(errors.As(err, &tooLarge)).To(BeTrue(), "a *bmc.ResponseTooLargeError: %v", err)
			g.Expect(tooLarge.Limit).To(BeEquivalentTo(bmc.MaxResponseBytes))
			g.Expect(tooLarge.Method).To(Equal(method))
			g.Expect(tooLarge.Path).To(Equal(path))
			g.Expect(err).To(MatchError(bmc.ErrUnreachable), "a bad answer, like a garbled one")
			g.Expect(bmc.Reason(err)).To(Equal("Unreachable"))
			want := fmt.Sprintf("the BMC's answer to %s is larger than 4 MiB", tc.request)
			if tc.declared {
				want += " (it declares 300 MiB)"
			}
			g.Expect(err).To(MatchError(ContainSubstring(want)))
			g.Expect(len(err.Error())).To(BeNumerically("<", 1024), "the message quotes none of the answer")
			t.Log(err)
		})
	}
}
