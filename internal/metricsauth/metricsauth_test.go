package metricsauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
)

// The real API server's side (TokenReview, SubjectAccessReview, the reader role) is exercised by
// test/harness's TestWhoMayDoWhatUnderDeployedRBAC and the e2e Prometheus scrape; this table covers
// the answers and the cache.

const (
	readerToken   = "reader-token-s3cret"
	strangerToken = "stranger-token-s3cret"
)

type fakeAPIServer struct {
	now           time.Time
	reviews, sars int
	fail          bool
}

func (f *fakeAPIServer) guard() *guard {
	return &guard{
		review: func(_ context.Context, token string) (authnv1.TokenReviewStatus, error) {
			f.reviews++
			if f.fail {
				return authnv1.TokenReviewStatus{}, errors.New("connection refused")
			}
			switch token {
			case readerToken:
				return authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus", UID: "1"}}, nil
			case strangerToken:
				return authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:default:default", UID: "2"}}, nil
			}
			return authnv1.TokenReviewStatus{Authenticated: false, Error: "invalid bearer token"}, nil
		},
		access: func(_ context.Context, spec authzv1.SubjectAccessReviewSpec) (authzv1.SubjectAccessReviewStatus, error) {
			f.sars++
			ok := spec.User == "system:serviceaccount:monitoring:prometheus" && spec.NonResourceAttributes != nil &&
				spec.NonResourceAttributes.Path == "/metrics" && spec.NonResourceAttributes.Verb == "get"
			return authzv1.SubjectAccessReviewStatus{Allowed: ok}, nil
		},
		now: func() time.Time { return f.now },
	}
}

func TestMetricsCallers(t *testing.T) {
	api := &fakeAPIServer{now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	var logs bytes.Buffer
	log := funcr.New(func(prefix, args string) { logs.WriteString(prefix + args + "\n") }, funcr.Options{Verbosity: 10})
	h, err := api.guard().wrap(log, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	if err != nil {
		t.Fatal(err)
	}
	get := func(auth, path string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusOK && rec.Body.String() != "metrics" {
			t.Errorf("200 without the metrics: %q", rec.Body.String())
		}
		return rec.Code
	}

	for _, tc := range []struct {
		name, auth, path string
		want             int
		reviews, sars    int // the API server's reviews so far
		advance          time.Duration
		fail             bool
	}{
		{name: "no token", want: 401, path: "/metrics"},
		{name: "not a bearer token", auth: "Basic YWRtaW46YWRtaW4=", path: "/metrics", want: 401},
		{name: "a token the API server does not accept", auth: "Bearer made-up", path: "/metrics", want: 401, reviews: 1},
		{name: "a caller without the reader role", auth: "Bearer " + strangerToken, path: "/metrics", want: 403, reviews: 2, sars: 1},
		{name: "the same caller again: both answers cached", auth: "Bearer " + strangerToken, path: "/metrics", want: 403, reviews: 2, sars: 1},
		{name: "the reader", auth: "Bearer " + readerToken, path: "/metrics", want: 200, reviews: 3, sars: 2},
		{name: "the reader again: both answers cached", auth: "bearer " + readerToken, path: "/metrics", want: 200, reviews: 3, sars: 2},
		{name: "the reader, another path", auth: "Bearer " + readerToken, path: "/debug", want: 403, reviews: 3, sars: 3},
		{name: "30 s on, the caller without the role: its denial asked again", auth: "Bearer " + strangerToken, path: "/metrics", want: 403, reviews: 3, sars: 4, advance: denyTTL},
		{name: "a minute on, the reader: who the token is asked again", auth: "Bearer " + readerToken, path: "/metrics", want: 200, reviews: 4, sars: 4, advance: authnTTL - denyTTL},
		{name: "the API server unreachable", auth: "Bearer other", path: "/metrics", want: 500, reviews: 5, sars: 4, fail: true},
		{name: "a made-up token, its refusal forgotten a minute on: reviewed again", auth: "Bearer made-up", path: "/metrics", want: 401, reviews: 6, sars: 4},
	} {
		api.now = api.now.Add(tc.advance)
		api.fail = tc.fail
		if got := get(tc.auth, tc.path); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
		if api.reviews != tc.reviews || api.sars != tc.sars {
			t.Errorf("%s: the API server was asked %d TokenReviews and %d SubjectAccessReviews so far, want %d and %d", tc.name, api.reviews, api.sars, tc.reviews, tc.sars)
		}
	}
	for _, secret := range []string{readerToken, strangerToken, "made-up"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("a token is in the log:\n%s", logs.String())
		}
	}
}

func TestCacheIsBounded(t *testing.T) {
	var c ttlCache[int, int]
	until := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for i := range 3 * maxCached {
		c.put(i, i, until)
	}
	if len(c.entries) > maxCached {
		t.Fatalf("%d entries kept, at most %d allowed", len(c.entries), maxCached)
	}
}

// floodAPIServer is a TokenReview and SubjectAccessReview endpoint that can hold its answers back, to see
// how many reviews a flood of callers keeps in flight at once. It counts what it received.
type floodAPIServer struct {
	mu                 sync.Mutex
	reviews            int // TokenReviews received
	inFlight, maxFlown int // reviews of either kind being answered now, and the most at once
	started            chan struct{}
	hold               chan struct{} // while open, reviews wait for it to close
}

func newFloodAPIServer() *floodAPIServer {
	return &floodAPIServer{started: make(chan struct{}, 10000), hold: make(chan struct{})}
}

func (f *floodAPIServer) begin() {
	f.mu.Lock()
	f.inFlight++
	f.maxFlown = max(f.maxFlown, f.inFlight)
	f.mu.Unlock()
	f.started <- struct{}{}
	<-f.hold
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
}

func (f *floodAPIServer) counts() (reviews, maxInFlight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reviews, f.maxFlown
}

func (f *floodAPIServer) guard(now func() time.Time) *guard {
	return &guard{
		review: func(_ context.Context, token string) (authnv1.TokenReviewStatus, error) {
			f.mu.Lock()
			f.reviews++
			f.mu.Unlock()
			f.begin()
			if token == readerToken {
				return authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus", UID: "1"}}, nil
			}
			return authnv1.TokenReviewStatus{Authenticated: false, Error: "invalid bearer token"}, nil
		},
		access: func(_ context.Context, spec authzv1.SubjectAccessReviewSpec) (authzv1.SubjectAccessReviewStatus, error) {
			f.begin()
			return authzv1.SubjectAccessReviewStatus{Allowed: spec.User == "system:serviceaccount:monitoring:prometheus"}, nil
		},
		now: now,
	}
}

// TestTokenReviewFlood: seen from anyone who can reach the metrics port. Every bearer token the guard does
// not know becomes a TokenReview in the manager's own API priority level, beside its power-cycle writes and
// lease renewals. A refused token must be remembered for a while, and however many callers come at once,
// only a few reviews may be in flight: callers beyond them are turned away at once (429), not queued. A
// reader whose answer is cached is served throughout.
func TestTokenReviewFlood(t *testing.T) {
	const callers = 300
	for _, tc := range []struct {
		name string
		// token is the flood's i-th bearer token.
		token func(i int) string
		// at once: the callers come together, while the API server holds its answers back; otherwise
		// one after another, each answered at once.
		atOnce      bool
		wantReviews int // at most
	}{
		{name: "one bad token, again and again", token: func(int) string { return "stolen-looking-token" }, wantReviews: 1},
		{name: "one bad token, all at once", token: func(int) string { return "stolen-looking-token" }, atOnce: true, wantReviews: maxReviews},
		{name: "distinct bad tokens, all at once", token: func(i int) string { return fmt.Sprintf("made-up-%d", i) }, atOnce: true, wantReviews: maxReviews},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			api := newFloodAPIServer()
			guard := api.guard(func() time.Time { return now })
			h, err := guard.wrap(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
			g.Expect(err).NotTo(HaveOccurred())
			get := func(token string) int {
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				req.Header.Set("Authorization", "Bearer "+token)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec.Code
			}
			// The reader scraped a moment ago: its answers are cached.
			close(api.hold)
			g.Expect(get(readerToken)).To(Equal(http.StatusOK))
			readerReviews, _ := api.counts()
			api.hold, api.maxFlown = make(chan struct{}), 0
			for len(api.started) > 0 {
				<-api.started
			}

			release := sync.OnceFunc(func() { close(api.hold) })
			t.Cleanup(release)
			type answer struct{ caller, code int }
			answers := make(chan answer, callers)
			if !tc.atOnce {
				release()
				for i := range callers {
					answers <- answer{i, get(tc.token(i))}
				}
			} else {
				for i := range callers {
					go func() { answers <- answer{i, get(tc.token(i))} }()
				}
				// Wait until every caller has been answered or waits on a review the API server holds, or
				// until more reviews are in flight than allowed.
				var early []answer
				for started := 0; started+len(early) < callers && started <= tc.wantReviews; {
					select {
					case <-api.started:
						started++
					case a := <-answers:
						early = append(early, a)
					}
				}
				_, inFlight := api.counts()
				g.Expect(inFlight).To(BeNumerically("<=", tc.wantReviews), "TokenReviews in flight at once")
				for _, a := range early {
					g.Expect(a.code).To(Equal(http.StatusTooManyRequests), "callers beyond the reviews in flight are turned away at once")
				}
				g.Expect(get(readerToken)).To(Equal(http.StatusOK), "the reader, during the flood")
				release()
				for _, a := range early {
					answers <- a
				}
			}
			var refused []int
			for range callers {
				a := <-answers
				g.Expect(a.code).To(BeElementOf(http.StatusUnauthorized, http.StatusTooManyRequests))
				if a.code == http.StatusUnauthorized {
					refused = append(refused, a.caller)
				}
			}
			reviews, _ := api.counts()
			g.Expect(reviews-readerReviews).To(BeNumerically("<=", tc.wantReviews), "TokenReviews the API server received for the flood")

			// The refused tokens again, within the refusal's lifetime: no review at all.
			for _, i := range refused {
				g.Expect(get(tc.token(i))).To(Equal(http.StatusUnauthorized))
			}
			again, _ := api.counts()
			g.Expect(again).To(Equal(reviews), "bad tokens refused a moment ago are not reviewed again")
			// Once the refusals are forgotten, a token is reviewed again (the API server may accept it now).
			now = now.Add(refuseTTL)
			g.Expect(get(tc.token(0))).To(Equal(http.StatusUnauthorized))
			again, _ = api.counts()
			g.Expect(again).To(Equal(reviews + 1))
			g.Expect(get(readerToken)).To(Equal(http.StatusOK), "the reader, after the flood")
		})
	}
}
