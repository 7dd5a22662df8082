package redfish_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The tests here put the driver in front of BMCs that misbehave on purpose: they redirect elsewhere, link
// to other hosts, or send answers without end.

// seen is a request as a listener received it.
type seen struct {
	method, path string
	header       http.Header
	body         string
}

// secrets names what of ours the request carries: a session token, basic credentials, a cookie, or the
// password in its body.
func (s seen) secrets() []string {
	var found []string
	for _, h := range []string{"X-Auth-Token", "Authorization", "Cookie"} {
		if s.header.Get(h) != "" {
			found = append(found, h)
		}
	}
	if strings.Contains(s.body, "s3cr3t") {
		found = append(found, "the password in the body")
	}
	return found
}

// recorder records every request that reaches a listener, then hands it to next.
type recorder struct {
	mu   sync.Mutex
	reqs []seen
	next http.Handler
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.reqs = append(r.reqs, seen{method: req.Method, path: req.URL.Path, header: req.Header.Clone(), body: string(body)})
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

// TestRedirectsToAnotherHostCarryNothing: a BMC that redirects a request to a second listener (another
// port, host name or scheme) gets a typed error back, and the second listener receives nothing: no
// session token, no basic credentials, no login body with the password. The second listener serves the
// same Redfish service, so a driver that followed the redirect would succeed there.
func TestRedirectsToAnotherHostCarryNothing(t *testing.T) {
	const (
		systemRead = "GET /redfish/v1/Systems/1"
		login      = "POST " + sessionsPath
		reset      = "POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
	)
	powerState := func(ctx context.Context, d bmc.Driver) error { _, err := d.PowerState(ctx); return err }
	powerOff := func(ctx context.Context, d bmc.Driver) error { return d.PowerOff(ctx, true) }
	tests := map[string]struct {
		bmcTLS, otherTLS bool
		basicAuth        bool   // the BMC has no SessionService
		otherHost        string // the host name the redirect gives the second listener; 127.0.0.1 when empty
		redirect         string // the request ("METHOD /path") the BMC redirects to the second listener
		viaName          bool   // the address names the system by name, which the BMC first redirects to its ID
		op               func(ctx context.Context, d bmc.Driver) error
	}{
		"session token, a read, HTTP to HTTP on another port":    {redirect: systemRead, op: powerState},
		"session token, a read, HTTPS to HTTPS on another port":  {bmcTLS: true, otherTLS: true, redirect: systemRead, op: powerState},
		"session token, a read, HTTPS to plain HTTP":             {bmcTLS: true, redirect: systemRead, op: powerState},
		"session token, a read, to another host name":            {otherHost: "localhost", redirect: systemRead, op: powerState},
		"session token, the power-off request":                   {redirect: reset, op: powerOff},
		"session token, after a redirect within the BMC":         {redirect: systemRead, viaName: true, op: powerState},
		"session login: the password in the body, HTTP":          {redirect: login, op: powerState},
		"session login: the password in the body, HTTPS":         {bmcTLS: true, otherTLS: true, redirect: login, op: powerState},
		"basic auth, a read, HTTP to HTTP on another port":       {basicAuth: true, redirect: systemRead, op: powerState},
		"basic auth, a read, HTTPS to HTTPS on another port":     {basicAuth: true, bmcTLS: true, otherTLS: true, redirect: systemRead, op: powerState},
		"basic auth, the power-off request, HTTPS to plain HTTP": {basicAuth: true, bmcTLS: true, redirect: reset, op: powerOff},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			mock := redfishmock.New().WithSystems(1)
			if tc.basicAuth {
				mock = mock.WithoutSessionService()
			}
			m := startMock(t, mock)
			// Both listeners serve the mock's Redfish service: the second records what reaches it.
			other := &recorder{next: m}
			otherSrv := serve(t, other, tc.otherTLS)
			otherURL, err := url.Parse(otherSrv.URL)
			g.Expect(err).NotTo(HaveOccurred())
			if tc.otherHost != "" {
				otherURL.Host = tc.otherHost + ":" + otherURL.Port()
			}
			method, path, _ := strings.Cut(tc.redirect, " ")
			redirects := map[string]string{tc.redirect: otherURL.String() + path}
			systemPath := m.SystemPath("1")
			if tc.viaName {
				systemPath = "/redfish/v1/Systems/node-a"
				redirects["GET "+systemPath] = m.SystemPath("1")
			}
			bmcSrv := serve(t, redirecting(m, redirects), tc.bmcTLS)
			d := newDriver(t, bmcSrv.URL, systemPath, creds, bmc.Options{Transport: trusting(bmcSrv, otherSrv)})

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err = tc.op(ctx, d)

			for _, r := range other.requests() {
				g.Expect(r.secrets()).To(BeEmpty(), "%s %s reached the second listener carrying these", r.method, r.path)
			}
			g.Expect(other.requests()).To(BeEmpty(), "nothing reaches the second listener")

			var redirect *bmc.RedirectError
			g.Expect(errors.As(err, &redirect)).To(BeTrue(), "a *bmc.RedirectError: %v", err)
			g.Expect(redirect.Method).To(Equal(method))
			g.Expect(redirect.Path).To(Equal(path))
			g.Expect(redirect.To).To(Equal(bmc.Origin(otherURL)))
			g.Expect(err).To(MatchError(bmc.ErrUnsupported), "the BMC cannot be used as addressed")
			g.Expect(bmc.Reason(err)).To(Equal("Unsupported"))
			g.Expect(err).To(MatchError(ContainSubstring("the BMC redirected %s %s to another host (%s)", method, path, bmc.Origin(otherURL))))
			g.Expect(err).To(MatchError(ContainSubstring("metalheal does not follow redirects that leave the BMC")))
			g.Expect(err.Error()).NotTo(ContainSubstring("s3cr3t"))
			g.Expect(ctx.Err()).NotTo(HaveOccurred(), "failed at once, not at the deadline")
			t.Log(err)
		})
	}
}

// TestSameHostRedirectsAreFollowed: sushy-tools answers a system addressed by name with a 307 to its
// UUID on the same host. The driver follows it, with its credentials, over HTTP and HTTPS.
func TestSameHostRedirectsAreFollowed(t *testing.T) {
	tests := map[string]struct {
		useTLS    bool
		basicAuth bool
		absolute  bool // the Location is an absolute URL of the BMC itself, not a path
	}{
		"session, HTTP":                      {},
		"session, HTTPS":                     {useTLS: true},
		"session, HTTPS, an absolute URL":    {useTLS: true, absolute: true},
		"basic auth, HTTP":                   {basicAuth: true},
		"basic auth, HTTPS, an absolute URL": {basicAuth: true, useTLS: true, absolute: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			mock := redfishmock.New().WithSystems(1)
			wantAuth := redfishmock.AuthSession
			if tc.basicAuth {
				mock, wantAuth = mock.WithoutSessionService(), redfishmock.AuthBasic
			}
			m := startMock(t, mock)
			const byName = "/redfish/v1/Systems/node-a"
			redirects := map[string]string{"GET " + byName: m.SystemPath("1")}
			srv := serve(t, redirecting(m, redirects), tc.useTLS)
			if tc.absolute {
				redirects["GET "+byName] = srv.URL + m.SystemPath("1")
			}
			d := newDriver(t, srv.URL, byName, creds, bmc.Options{Transport: trusting(srv)})

			g.Expect(d.PowerState(t.Context())).To(Equal(bmc.PowerStateOn))
			g.Expect(d.PowerOff(t.Context(), true)).To(Succeed())
			g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}))
			var reads []redfishmock.AuthKind
			for _, r := range m.Requests() {
				if r.Method == http.MethodGet && r.Path == m.SystemPath("1") {
					reads = append(reads, r.Auth)
				}
			}
			g.Expect(reads).To(Equal([]redfishmock.AuthKind{wantAuth, wantAuth}), "both redirected reads carry the credentials")
		})
	}
}

// TestLinksToOtherHostsAreNotFollowed: the driver follows links the BMC gives it (the systems it lists,
// the reset action's target). A link that is not a path on the BMC is refused, never sent our
// credentials: "@host:port/path" appended to the BMC's address would name another host.
func TestLinksToOtherHostsAreNotFollowed(t *testing.T) {
	tests := map[string]struct {
		link    func(bmcURL, otherURL string) string
		wantErr bool
	}{
		"user info that names another host": {link: func(_, o string) string { return "@" + strings.TrimPrefix(o, "http://") + "/redfish/v1/Systems/1" }, wantErr: true},
		"an absolute URL of another host":   {link: func(_, o string) string { return o + "/redfish/v1/Systems/1" }, wantErr: true},
		"a scheme-relative URL":             {link: func(_, o string) string { return strings.TrimPrefix(o, "http:") + "/redfish/v1/Systems/1" }, wantErr: true},
		"a path":                            {link: func(_, _ string) string { return "/redfish/v1/Systems/1" }},
		"an absolute URL of the BMC itself": {link: func(b, _ string) string { return b + "/redfish/v1/Systems/1" }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := startMock(t, redfishmock.New().WithSystems(1))
			other := &recorder{next: m}
			otherSrv := serve(t, other, false)
			var link string
			bmcSrv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && r.URL.Path == "/redfish/v1/Systems" {
					w.Header().Set("Content-Type", "application/json")
					_ = json.NewEncoder(w).Encode(map[string]any{"Members": []any{map[string]string{"@odata.id": link}}, "Members@odata.count": 1})
					return
				}
				m.ServeHTTP(w, r)
			}), false)
			link = tc.link(bmcSrv.URL, otherSrv.URL)
			d := newDriver(t, bmcSrv.URL, "", creds, bmc.Options{})

			state, err := d.PowerState(t.Context())
			g.Expect(other.requests()).To(BeEmpty(), "nothing reaches the other host")
			if !tc.wantErr {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(state).To(Equal(bmc.PowerStateOn))
				return
			}
			g.Expect(err).To(MatchError(bmc.ErrUnsupported))
			g.Expect(err).To(MatchError(ContainSubstring("not a path on the BMC")))
			t.Log(err)
		})
	}
}

// hugeAnswer serves a JSON object whose PowerState is a string of size bytes, from one small buffer, and
// declares its length when declare is set. A decoder that read it all would hold it whole.
func hugeAnswer(size int64, declare bool) http.HandlerFunc {
	const head, tail = `{"PowerState":"`, `"}`
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if declare {
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		}
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
		w.WriteHeader(rec.Code)
		_, _ = w.Write(bytes.Repeat([]byte(" "), size-len(body)))
		_, _ = w.Write(body)
	}
}

// stalledAnswer sends size bytes of an unfinished JSON string, then sends nothing more until the client
// goes away: a BMC that keeps a connection open past the cap.
func stalledAnswer(size int) http.HandlerFunc {
	body := []byte(`{"PowerState":"` + strings.Repeat("a", size))
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}
}

// TestOversizedAnswers: an answer larger than bmc.MaxResponseBytes ends in a *bmc.ResponseTooLargeError
// as soon as the driver has read that much (or at once, when the BMC declares the length), whichever
// request it answers: the test's memory grows by well under 32 MiB for a 300 MB answer, and a BMC that
// stops sending after the cap does not hold the call until its deadline. An answer of exactly the cap is
// read.
func TestOversizedAnswers(t *testing.T) {
	const (
		huge      = 300 << 20
		maxGrowth = 32 << 20
		deadline  = 10 * time.Second
	)
	powerState := func(ctx context.Context, d bmc.Driver) error { _, err := d.PowerState(ctx); return err }
	powerOff := func(ctx context.Context, d bmc.Driver) error { return d.PowerOff(ctx, true) }
	tests := map[string]struct {
		path     string // the resource whose answer is replaced
		answer   func(m http.Handler) http.Handler
		op       func(ctx context.Context, d bmc.Driver) error
		declared bool // the BMC declares the answer's length
		wantOK   bool
	}{
		"300 MB for the system, streamed": {
			path: "/redfish/v1/Systems/1", op: powerState,
			answer: func(http.Handler) http.Handler { return hugeAnswer(huge, false) },
		},
		"300 MB for the system, its length declared": {
			path: "/redfish/v1/Systems/1", op: powerState, declared: true,
			answer: func(http.Handler) http.Handler { return hugeAnswer(huge, true) },
		},
		"300 MB for the service root": {
			path: "/redfish/v1/", op: powerState,
			answer: func(http.Handler) http.Handler { return hugeAnswer(huge, false) },
		},
		"300 MB for the system read before a power-off": {
			path: "/redfish/v1/Systems/1", op: powerOff,
			answer: func(http.Handler) http.Handler { return hugeAnswer(huge, false) },
		},
		"the cap and a little more, then a stall": {
			path: "/redfish/v1/Systems/1", op: powerState,
			answer: func(http.Handler) http.Handler { return stalledAnswer(bmc.MaxResponseBytes + 64<<10) },
		},
		"one byte over the cap": {
			path: "/redfish/v1/Systems/1", op: powerState,
			answer: func(m http.Handler) http.Handler { return paddedAnswer(m, bmc.MaxResponseBytes+1) },
		},
		"exactly the cap is read": {
			path: "/redfish/v1/Systems/1", op: powerState, wantOK: true,
			answer: func(m http.Handler) http.Handler { return paddedAnswer(m, bmc.MaxResponseBytes) },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := startMock(t, redfishmock.New().WithSystems(1))
			mux := http.NewServeMux()
			pattern := "GET " + tc.path
			if strings.HasSuffix(pattern, "/") {
				pattern += "{$}" // the service root, not its subtree
			}
			mux.Handle(pattern, tc.answer(m))
			mux.Handle("/", m)
			srv := serve(t, mux, false)
			d := newDriver(t, srv.URL, m.SystemPath("1"), creds, bmc.Options{})
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
			// grows, the answer's copies. Reading 300 MB into memory allocates it (and more) whatever the
			// garbage collector does later.
			growth := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d KiB during the call", growth>>10)
			g.Expect(growth).To(BeNumerically("<", maxGrowth), "bytes allocated during the call")
			g.Expect(ctx.Err()).NotTo(HaveOccurred(), "failed before the deadline: %v", err)

			var tooLarge *bmc.ResponseTooLargeError
			g.Expect(errors.As(err, &tooLarge)).To(BeTrue(), "a *bmc.ResponseTooLargeError: %v", err)
			g.Expect(tooLarge.Limit).To(BeEquivalentTo(bmc.MaxResponseBytes))
			g.Expect(tooLarge.Path).To(Equal(tc.path))
			g.Expect(err).To(MatchError(bmc.ErrUnreachable), "a bad answer, like a garbled one")
			g.Expect(bmc.Reason(err)).To(Equal("Unreachable"))
			want := fmt.Sprintf("the BMC's answer to GET %s is larger than 4 MiB", tc.path)
			if tc.declared {
				want += " (it declares 300 MiB)"
			}
			g.Expect(err).To(MatchError(ContainSubstring(want)))
			t.Log(err)
		})
	}
}
