package metricsauth

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
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
		{name: "a made-up token is never cached", auth: "Bearer made-up", path: "/metrics", want: 401, reviews: 6, sars: 4},
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
