package bmc

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestOrigin(t *testing.T) {
	tests := map[string]string{
		"https://bmc.example.com/redfish/v1": "https://bmc.example.com:443",
		"https://BMC.Example.com:443/x":      "https://bmc.example.com:443",
		"HTTP://bmc":                         "http://bmc:80",
		"http://bmc:8000":                    "http://bmc:8000",
		"https://[fd00::1]/redfish/v1":       "https://[fd00::1]:443",
		"https://[fd00::1]:8443":             "https://[fd00::1]:8443",
		"http://user:pw@bmc:8000/":           "http://bmc:8000",
		"/redfish/v1/Systems/1":              "",
		"//bmc/redfish":                      "",
	}
	for raw, want := range tests {
		t.Run(raw, func(t *testing.T) {
			NewWithT(t).Expect(Origin(mustURL(t, raw))).To(Equal(want))
		})
	}
	NewWithT(t).Expect(Origin(nil)).To(BeEmpty())
}

// TestCheckRedirect: a redirect is followed only within the BMC's origin, at most maxRedirects times.
func TestCheckRedirect(t *testing.T) {
	tests := map[string]struct {
		endpoint, location string
		hops               int
		wantTo             string // the origin named by the *RedirectError; "" when followed
		wantErr            string // another refusal
	}{
		"same origin":                        {endpoint: "https://bmc:8443", location: "https://bmc:8443/redfish/v1/Systems/uuid"},
		"same origin, default port spelled":  {endpoint: "https://bmc", location: "https://BMC:443/redfish/v1/Systems/uuid"},
		"another port":                       {endpoint: "https://bmc", location: "https://bmc:8443/x", wantTo: "https://bmc:8443"},
		"another scheme, same host and port": {endpoint: "https://bmc:8000", location: "http://bmc:8000/x", wantTo: "http://bmc:8000"},
		"a subdomain":                        {endpoint: "https://bmc", location: "https://evil.bmc/x", wantTo: "https://evil.bmc:443"},
		"another host":                       {endpoint: "http://10.0.0.1", location: "http://10.0.0.2/x", wantTo: "http://10.0.0.2:80"},
		"too many hops within the BMC":       {endpoint: "https://bmc", location: "https://bmc/x", hops: maxRedirects, wantErr: "stopped after 10 redirects"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			first := &http.Request{Method: http.MethodPost, URL: mustURL(t, tc.endpoint+"/redfish/v1/Systems/node-a")}
			via := []*http.Request{first}
			for len(via) < max(tc.hops, 1) {
				via = append(via, first)
			}
			err := CheckRedirect(mustURL(t, tc.endpoint))(&http.Request{Method: http.MethodPost, URL: mustURL(t, tc.location)}, via)
			switch {
			case tc.wantTo != "":
				var redirect *RedirectError
				g.Expect(errors.As(err, &redirect)).To(BeTrue(), "a *RedirectError: %v", err)
				g.Expect(*redirect).To(Equal(RedirectError{Method: http.MethodPost, Path: "/redfish/v1/Systems/node-a",
					BMC: Origin(mustURL(t, tc.endpoint)), To: tc.wantTo}))
				g.Expect(err.Error()).To(ContainSubstring("the BMC redirected POST /redfish/v1/Systems/node-a to another host (" + tc.wantTo + ")"))
				g.Expect(err.Error()).To(ContainSubstring("metalheal does not follow redirects that leave the BMC"))
			case tc.wantErr != "":
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
			default:
				g.Expect(err).NotTo(HaveOccurred())
			}
		})
	}
}

// TestLimitResponse: a body is read up to the limit and no further; a declared length above it fails
// before anything is read.
func TestLimitResponse(t *testing.T) {
	const limit = 10
	tests := map[string]struct {
		body          string
		contentLength int64
		wantErr       string
	}{
		"under the limit":         {body: "0123456", contentLength: -1},
		"exactly the limit":       {body: "0123456789", contentLength: -1},
		"one byte over":           {body: "0123456789a", contentLength: -1, wantErr: "larger than 10 bytes, the most"},
		"far over, streamed":      {body: strings.Repeat("x", 1<<20), contentLength: -1, wantErr: "larger than 10 bytes, the most"},
		"declared over the limit": {body: "", contentLength: 300 << 20, wantErr: "larger than 10 bytes (it declares 300 MiB)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			body := &countingBody{r: strings.NewReader(tc.body)}
			resp := &http.Response{Body: body, ContentLength: tc.contentLength,
				Request: &http.Request{Method: http.MethodGet, URL: mustURL(t, "https://bmc/redfish/v1/Systems/1")}}
			err := LimitResponse(resp, limit)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(resp.Body)
				g.Expect(resp.Body.Close()).To(Succeed())
			}
			g.Expect(body.closed).To(BeTrue())
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(got)).To(Equal(tc.body))
				return
			}
			var tooLarge *ResponseTooLargeError
			g.Expect(errors.As(err, &tooLarge)).To(BeTrue(), "a *ResponseTooLargeError: %v", err)
			g.Expect(err.Error()).To(ContainSubstring("the BMC's answer to GET /redfish/v1/Systems/1 is " + tc.wantErr))
			g.Expect(len(got)).To(BeNumerically("<=", limit), "no more than the limit is handed on")
			g.Expect(body.read).To(BeNumerically("<=", limit+1), "no more than one byte beyond the limit is read")
		})
	}
}

type countingBody struct {
	r      io.Reader
	read   int
	closed bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *countingBody) Close() error { b.closed = true; return nil }

func TestByteSize(t *testing.T) {
	tests := map[int64]string{
		MaxResponseBytes: "4 MiB",
		300 << 20:        "300 MiB",
		(4 << 20) + 1:    "4096 KiB",
		1500:             "1500 bytes",
		64 << 10:         "64 KiB",
		10:               "10 bytes",
	}
	for n, want := range tests {
		NewWithT(t).Expect(byteSize(n)).To(Equal(want), "%d", n)
	}
}
