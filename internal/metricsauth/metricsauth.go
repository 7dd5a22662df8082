// Package metricsauth guards the manager's /metrics the way the API server guards its own endpoints: a
// caller is who the API server says its bearer token belongs to (a TokenReview), and may read the path if
// the API server's authorizer says so (a SubjectAccessReview of a non-resource URL; the
// metalheal-metrics-reader ClusterRole grants it). It is what controller-runtime's
// filters.WithAuthenticationAndAuthorization does, with the two typed clients alone: that filter links
// k8s.io/apiserver into the manager, 32 MB of binary and 17 MiB of resident memory before the manager
// has read a single object (BENCHMARKS.md).
//
// Answers are cached for a short while, keyed by a hash of the token (never the token itself): a scraper
// every 15 s costs the API server one TokenReview and one SubjectAccessReview a minute, not one of each per
// scrape. No token, a token the API server does not accept, or a caller it does not authorize gets 401
// or 403 and nothing else; the token never appears in a log line or an answer.
//
// Anyone who can reach the metrics port can send tokens, and every review is a request in the manager's
// own API priority level, beside its power-cycle writes and lease renewals. So a refused token is
// remembered (by its hash) for half a minute, and at most maxReviews reviews are in flight at once: a
// caller who would need one more is answered 429 at once rather than queued. A reader whose answers are
// cached needs no review, and is served whatever the flood.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long answers are kept: who a token is, a minute (as the API server's own delegated
// authentication); an allowed request, five minutes; a denied one, thirty seconds, so that a freshly
// bound reader is let in soon.
const (
	authnTTL      = time.Minute
	allowTTL      = 5 * time.Minute
	denyTTL       = 30 * time.Second
	refuseTTL     = 30 * time.Second
	reviewTimeout = 10 * time.Second
	// maxReviews bounds the reviews (TokenReviews and SubjectAccessReviews) in flight at once, whoever
	// calls: a flood of made-up tokens holds at most this many of the manager's requests to the API server.
	maxReviews = 4
	// maxCached bounds each cache: a flood of made-up tokens empties it rather than growing it.
	maxCached = 1024
)

// Filter returns a metricsserver.Options.FilterProvider whose caches keep time by clk.
func Filter(clk clock.PassiveClock) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
		return newGuard(cfg, httpClient, clk)
	}
}

func newGuard(cfg *rest.Config, httpClient *http.Client, clk clock.PassiveClock) (metricsserver.Filter, error) {
	authn, err := authnclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("making the TokenReview client: %w", err)
	}
	authz, err := authzclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("making the SubjectAccessReview client: %w", err)
	}
	g := &guard{
		review: func(ctx context.Context, token string) (authnv1.TokenReviewStatus, error) {
			tr, err := authn.TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
			if err != nil {
				return authnv1.TokenReviewStatus{}, err
			}
			return tr.Status, nil
		},
		access: func(ctx context.Context, spec authzv1.SubjectAccessReviewSpec) (authzv1.SubjectAccessReviewStatus, error) {
			sar, err := authz.SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				return authzv1.SubjectAccessReviewStatus{}, err
			}
			return sar.Status, nil
		},
		now: clk.Now,
	}
	return g.wrap, nil
}

// guard asks the API server and remembers its answers.
type guard struct {
	review func(context.Context, string) (authnv1.TokenReviewStatus, error)
	access func(context.Context, authzv1.SubjectAccessReviewSpec) (authzv1.SubjectAccessReviewStatus, error)
	now    func() time.Time

	users   ttlCache[[sha256.Size]byte, authnv1.UserInfo] // by token hash; accepted tokens
	refused ttlCache[[sha256.Size]byte, struct{}]         // by token hash; tokens the API server refused
	allowed ttlCache[string, bool]                        // by user and request
	slots   slots                                         // the reviews in flight
}

// errBusy: maxReviews reviews are in flight already.
var errBusy = errors.New("too many reviews in flight")

func (g *guard) wrap(log logr.Logger, next http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), reviewTimeout)
		defer cancel()
		token, ok := bearer(req)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		user, ok, err := g.authenticate(ctx, token)
		if errors.Is(err, errBusy) {
			busy(log, w)
			return
		}
		if err != nil {
			log.Error(err, "Reviewing a metrics caller's token failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if !ok {
			log.V(4).Info("Metrics caller's token not accepted")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		allowed, err := g.authorize(ctx, user, strings.ToLower(req.Method), req.URL.Path)
		if errors.Is(err, errBusy) {
			busy(log, w)
			return
		}
		if err != nil {
			log.Error(err, "Authorizing a metrics caller failed", "user", user.Username)
			http.Error(w, "Authorization failed for user "+user.Username, http.StatusInternalServerError)
			return
		}
		if !allowed {
			log.V(4).Info("Metrics caller not authorized", "user", user.Username)
			http.Error(w, "Authorization denied for user "+user.Username, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, req)
	}), nil
}

// busy turns a caller away while maxReviews reviews are in flight.
func busy(log logr.Logger, w http.ResponseWriter) {
	log.V(4).Info("Metrics caller turned away: too many reviews in flight")
	w.Header().Set("Retry-After", "1")
	http.Error(w, "Too many requests", http.StatusTooManyRequests)
}

// bearer reads the request's bearer token.
func bearer(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// authenticate says who token belongs to, and whether the API server accepts it at all.
func (g *guard) authenticate(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	key := sha256.Sum256([]byte(token))
	if user, hit := g.users.get(key, g.now()); hit {
		return user, true, nil
	}
	if _, hit := g.refused.get(key, g.now()); hit {
		return authnv1.UserInfo{}, false, nil
	}
	if !g.slots.take() {
		return authnv1.UserInfo{}, false, errBusy
	}
	st, err := g.review(ctx, token)
	g.slots.give()
	if err != nil {
		return authnv1.UserInfo{}, false, fmt.Errorf("TokenReview: %w", err)
	}
	if !st.Authenticated {
		g.refused.put(key, struct{}{}, g.now().Add(refuseTTL))
		return authnv1.UserInfo{}, false, nil
	}
	g.users.put(key, st.User, g.now().Add(authnTTL))
	return st.User, true, nil
}

// authorize says whether user may do verb on the non-resource path.
func (g *guard) authorize(ctx context.Context, user authnv1.UserInfo, verb, path string) (bool, error) {
	key := authzKey(user, verb, path)
	if allowed, hit := g.allowed.get(key, g.now()); hit {
		return allowed, nil
	}
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	if !g.slots.take() {
		return false, errBusy
	}
	st, err := g.access(ctx, authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	})
	g.slots.give()
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	allowed := st.Allowed && !st.Denied
	ttl := denyTTL
	if allowed {
		ttl = allowTTL
	}
	g.allowed.put(key, allowed, g.now().Add(ttl))
	return allowed, nil
}

// authzKey is everything a SubjectAccessReview of user's request is made of.
func authzKey(user authnv1.UserInfo, verb, path string) string {
	extra := make([]string, 0, len(user.Extra))
	for k, v := range user.Extra {
		extra = append(extra, k+"="+strings.Join(v, ","))
	}
	slices.Sort(extra)
	return strings.Join([]string{user.UID, user.Username, strings.Join(user.Groups, ","), strings.Join(extra, ";"), verb, path}, "\x00")
}

// slots counts the reviews in flight, at most maxReviews. A caller who finds none free is not queued: a
// flood would hold the manager's goroutines and, once they are let through, its API requests.
type slots struct {
	mu sync.Mutex
	n  int
}

// take claims a slot, and says whether one was free.
func (s *slots) take() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= maxReviews {
		return false
	}
	s.n++
	return true
}

// give frees a slot taken.
func (s *slots) give() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
}

// ttlCache keeps answers until a time each, at most maxCached of them: a flood of made-up keys empties it
// rather than growing it.
type ttlCache[K comparable, V any] struct {
	mu      sync.Mutex
	entries map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	value V
	until time.Time
}

// get returns k's value if it is kept and still valid at now.
func (c *ttlCache[K, V]) get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !now.Before(e.until) {
		var zero V
		return zero, false
	}
	return e.value, true
}

// put keeps v under k until until, starting afresh when the cache is full.
func (c *ttlCache[K, V]) put(k K, v V, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxCached {
		c.entries = map[K]ttlEntry[V]{}
	}
	c.entries[k] = ttlEntry[V]{value: v, until: until}
}
