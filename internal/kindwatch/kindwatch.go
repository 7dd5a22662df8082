package kindwatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Defaults for Options.
const (
	DefaultSyncTimeout = 30 * time.Second
	DefaultRetryMin    = 30 * time.Second
	DefaultRetryMax    = 5 * time.Minute
)

// probeTimeout bounds the direct list that tells why a kind did not sync.
const probeTimeout = 10 * time.Second

// Informers is what a Watcher needs of a cache (a cache.Cache is one).
type Informers interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
	RemoveInformer(ctx context.Context, obj client.Object) error
}

// Options configure a Watcher. Cache and Clock are required.
type Options struct {
	// Name names the controller in the log lines.
	Name string
	// Cache starts and stops the informers: the manager's cache, which then serves the kinds' reads.
	Cache Informers
	// Probe lists a kind directly when its informer did not sync, to say why (the manager's API reader).
	// Without it the message only says that the kind did not sync.
	Probe client.Reader
	// Mapper names a kind's resource in the messages (e.g. fooremediations); optional.
	Mapper meta.RESTMapper
	// Clock is the only source of time: the bound and the retries are timers of it.
	Clock clock.Clock
	// SyncTimeout is how long an informer may take to sync before its kind is reported Failed.
	SyncTimeout time.Duration
	// RetryMin and RetryMax bound the wait before a Failed kind is tried again: RetryMin after the first
	// failure, doubling with each further one, at most RetryMax.
	RetryMin, RetryMax time.Duration
}

// State is where a kind is.
type State int

const (
	// Pending: the informer is starting. Nothing of the kind may be read yet: a read would wait.
	Pending State = iota
	// Synced: the informer has synced; reads of the kind are served at once.
	Synced
	// Failed: the informer did not sync within SyncTimeout, or could not be started; it is stopped until
	// the next attempt.
	Failed
)

func (s State) String() string {
	switch s {
	case Pending:
		return "Pending"
	case Synced:
		return "Synced"
	case Failed:
		return "Failed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Status is a kind's state as Want reports it.
type Status struct {
	State State
	// Err says why a Failed kind cannot be watched: a *NotWatchableError.
	Err error
	// Until is when a Pending kind is given up on, or a Failed kind is tried again (zero when Synced). The
	// checks that name the kind are enqueued whenever its state changes; Until is a safety net for them.
	Until time.Time
}

// Kind is a kind to watch and how its events map to checks.
type Kind struct {
	GVK schema.GroupVersionKind
	// Object, when set, is an empty typed object of the kind: the kind is then watched through the typed
	// informer the manager's other controllers may already keep. Nil watches it as unstructured objects.
	Object client.Object
	// Handler maps the kind's events to checks; nil ignores them.
	Handler handler.EventHandler
	// Predicates filter the events before Handler sees them.
	Predicates []predicate.Predicate
	// Verbs are what the manager needs on the kind, for the message when it may not list it; get, list and
	// watch when empty.
	Verbs []string
}

// Watcher starts, bounds, retries and stops the informers of the kinds its controller's checks name.
// Build it with New and register Source with the controller (builder.WatchesRawSource).
type Watcher struct {
	opts   Options
	shared *sharedInformers

	mu    sync.Mutex
	ctx   context.Context // the controller's, from Source
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
	kinds map[schema.GroupVersionKind]*kindState
	wants map[reconcile.Request][]schema.GroupVersionKind
}

// kindState is one kind's informer and who needs it. Guarded by Watcher.mu.
type kindState struct {
	kind     Kind
	obj      client.Object // the object the informer is keyed by in the cache
	users    sets.Set[reconcile.Request]
	status   Status
	failures int // attempts failed in a row
	// attempt counts the starts; a goroutine acts only for the attempt it was started for.
	attempt  int
	informer cache.Informer // nil while stopped
	reg      toolscache.ResourceEventHandlerRegistration
	dropped  chan struct{} // closed when no check names the kind any more
}

// New returns a Watcher.
func New(opts Options) (*Watcher, error) {
	switch {
	case opts.Cache == nil:
		return nil, errors.New("kindwatch: a cache is required")
	case opts.Clock == nil:
		return nil, errors.New("kindwatch: a clock is required")
	case opts.SyncTimeout < 0 || opts.RetryMin < 0 || opts.RetryMax < 0:
		return nil, errors.New("kindwatch: durations must not be negative")
	}
	if opts.SyncTimeout == 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	if opts.RetryMin == 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax == 0 {
		opts.RetryMax = DefaultRetryMax
	}
	opts.RetryMax = max(opts.RetryMax, opts.RetryMin)
	return &Watcher{opts: opts, shared: sharedFor(opts.Cache), ctx: context.Background(),
		kinds: map[schema.GroupVersionKind]*kindState{}, wants: map[reconcile.Request][]schema.GroupVersionKind{}}, nil
}

// Source is the controller's end of the Watcher: it hands the Watcher the controller's queue, into which
// the kinds' events and state changes enqueue checks.
func (w *Watcher) Source() source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.ctx, w.queue = ctx, q
		return nil
	})
}

// Want records that user (a check) needs exactly these kinds now, starts the informers of those not
// watched yet, stops those no check needs any more, and returns the state of each kind wanted. It never
// waits: an informer that has not synced yet is Pending.
func (w *Watcher) Want(ctx context.Context, user reconcile.Request, kinds []Kind) map[schema.GroupVersionKind]Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[schema.GroupVersionKind]Status, len(kinds))
	wanted := make([]schema.GroupVersionKind, 0, len(kinds))
	for _, k := range kinds {
		ks := w.kinds[k.GVK]
		if ks == nil {
			ks = &kindState{kind: k, obj: objectFor(k), users: sets.New[reconcile.Request](), dropped: make(chan struct{})}
			w.kinds[k.GVK] = ks
			w.start(ctx, ks)
		}
		ks.users.Insert(user)
		out[k.GVK] = ks.status
		if !slices.Contains(wanted, k.GVK) {
			wanted = append(wanted, k.GVK)
		}
	}
	for _, gvk := range w.wants[user] {
		if !slices.Contains(wanted, gvk) {
			w.release(ctx, user, gvk)
		}
	}
	if len(wanted) == 0 {
		delete(w.wants, user)
	} else {
		w.wants[user] = wanted
	}
	return out
}

// Forget records that user is gone: the kinds only it named are stopped.
func (w *Watcher) Forget(ctx context.Context, user reconcile.Request) {
	w.Want(ctx, user, nil)
}

// objectFor is the object a kind's informer is keyed by.
func objectFor(k Kind) client.Object {
	if k.Object != nil {
		return k.Object
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.GVK)
	return u
}

func (w *Watcher) log() logr.Logger {
	return ctrl.LoggerFrom(w.ctx).WithName("kindwatch").WithValues("controller", w.opts.Name)
}

// start starts an attempt: it gets the kind's informer from the cache without waiting for it, and
// arms the bound. Called with w.mu held.
func (w *Watcher) start(ctx context.Context, ks *kindState) {
	ks.attempt++
	now := w.opts.Clock.Now()
	inf, err := w.shared.acquire(ctx, w.opts.Cache, ks.kind.GVK, ks.obj)
	if err != nil {
		// The kind cannot even be looked up (its CRD is gone, or it is not in the scheme).
		w.fail(ks, &NotWatchableError{GVK: ks.kind.GVK, Resource: w.resource(ks.kind.GVK), Verbs: ks.kind.Verbs, Err: err}, now)
		return
	}
	ks.informer = inf
	if ks.kind.Handler != nil && w.queue != nil {
		ks.reg, err = inf.AddEventHandler(eventHandler{ctx: w.ctx, queue: w.queue, handler: ks.kind.Handler, predicates: ks.kind.Predicates})
		if err != nil {
			w.fail(ks, &NotWatchableError{GVK: ks.kind.GVK, Resource: w.resource(ks.kind.GVK), Verbs: ks.kind.Verbs, Err: err}, now)
			return
		}
	}
	if inf.HasSynced() { // another controller's informer, or ours from an earlier attempt
		ks.status, ks.failures = Status{State: Synced}, 0
		w.log().V(2).Info("Watching kind", "kind", ks.kind.GVK.String())
		return
	}
	ks.status = Status{State: Pending, Until: now.Add(w.opts.SyncTimeout)}
	// The timer is armed here, under the lock, so that whoever sees the kind Pending also finds the timer.
	timer := w.opts.Clock.NewTimer(w.opts.SyncTimeout)
	go w.await(ks, ks.attempt, inf, timer)
	w.log().Info("Watching kind", "kind", ks.kind.GVK.String(), "attempt", ks.attempt)
}

// await waits for an attempt's informer to sync, at most SyncTimeout, and enqueues the kind's checks
// when it has, or when it has not in time.
func (w *Watcher) await(ks *kindState, attempt int, inf cache.Informer, timer clock.Timer) {
	defer timer.Stop()
	w.mu.Lock()
	done := w.ctx.Done()
	w.mu.Unlock()
	select {
	case <-inf.HasSyncedChecker().Done():
		w.synced(ks, attempt)
	case <-timer.C():
		if inf.HasSynced() {
			w.synced(ks, attempt)
			return
		}
		// Ask the API server why, outside the lock: the answer takes a round trip.
		probeErr := w.probe(ks.kind.GVK)
		w.mu.Lock()
		if ks.attempt != attempt || isClosed(ks.dropped) {
			w.mu.Unlock()
			return
		}
		w.fail(ks, &NotWatchableError{GVK: ks.kind.GVK, Resource: w.resource(ks.kind.GVK), Verbs: ks.kind.Verbs, Timeout: w.opts.SyncTimeout, Err: probeErr},
			w.opts.Clock.Now())
		users := ks.users.UnsortedList()
		w.mu.Unlock()
		w.enqueue(users)
	case <-ks.dropped:
	case <-done:
	}
}

func (w *Watcher) synced(ks *kindState, attempt int) {
	w.mu.Lock()
	if ks.attempt != attempt || isClosed(ks.dropped) {
		w.mu.Unlock()
		return
	}
	ks.status, ks.failures = Status{State: Synced}, 0
	users := ks.users.UnsortedList()
	w.log().V(2).Info("Kind synced", "kind", ks.kind.GVK.String())
	w.mu.Unlock()
	w.enqueue(users)
}

// fail stops the kind's informer, records why, and arms the next attempt. Called with w.mu held.
func (w *Watcher) fail(ks *kindState, err *NotWatchableError, now time.Time) {
	w.stop(ks)
	ks.failures++
	delay := w.opts.RetryMin
	for i := 1; i < ks.failures && delay < w.opts.RetryMax; i++ {
		delay *= 2
	}
	delay = min(delay, w.opts.RetryMax)
	ks.status = Status{State: Failed, Err: err, Until: now.Add(delay)}
	timer := w.opts.Clock.NewTimer(delay)
	go w.retry(ks, ks.attempt, timer)
	w.log().Error(err, "Kind not watchable: the checks naming it are disabled until it is", "kind", ks.kind.GVK.String(),
		"retryIn", delay.String(), "failures", ks.failures)
}

// retry starts the next attempt of a Failed kind when its backoff has passed.
func (w *Watcher) retry(ks *kindState, attempt int, timer clock.Timer) {
	defer timer.Stop()
	w.mu.Lock()
	done := w.ctx.Done()
	w.mu.Unlock()
	select {
	case <-timer.C():
	case <-ks.dropped:
		return
	case <-done:
		return
	}
	w.mu.Lock()
	if ks.attempt != attempt || isClosed(ks.dropped) {
		w.mu.Unlock()
		return
	}
	w.start(w.ctx, ks)
	var users []reconcile.Request
	if ks.status.State != Pending { // settled at once: synced already, or failed again
		users = ks.users.UnsortedList()
	}
	w.mu.Unlock()
	w.enqueue(users)
}

// stop removes the kind's handler and gives its informer back. Called with w.mu held.
func (w *Watcher) stop(ks *kindState) {
	if ks.informer == nil {
		return
	}
	if ks.reg != nil {
		if err := ks.informer.RemoveEventHandler(ks.reg); err != nil {
			w.log().Error(err, "Removing an event handler", "kind", ks.kind.GVK.String())
		}
	}
	if err := w.shared.release(w.ctx, w.opts.Cache, ks.kind.GVK, ks.obj); err != nil {
		w.log().Error(err, "Removing an informer", "kind", ks.kind.GVK.String())
	}
	ks.informer, ks.reg = nil, nil
}

// release removes user from a kind's users, and drops the kind when it was the last. Called with w.mu held.
func (w *Watcher) release(_ context.Context, user reconcile.Request, gvk schema.GroupVersionKind) {
	ks := w.kinds[gvk]
	if ks == nil {
		return
	}
	ks.users.Delete(user)
	if ks.users.Len() > 0 {
		return
	}
	close(ks.dropped)
	w.stop(ks)
	delete(w.kinds, gvk)
	w.log().Info("Stopped watching kind: no check names it", "kind", gvk.String())
}

func (w *Watcher) enqueue(users []reconcile.Request) {
	w.mu.Lock()
	q := w.queue
	w.mu.Unlock()
	if q == nil {
		return
	}
	for _, u := range users {
		q.Add(u)
	}
}

// probe lists one object of the kind directly, to learn why its informer did not sync.
func (w *Watcher) probe(gvk schema.GroupVersionKind) error {
	if w.opts.Probe == nil {
		return nil
	}
	w.mu.Lock()
	ctx := w.ctx
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return w.opts.Probe.List(ctx, list, client.Limit(1))
}

// resource is the kind's resource name for the messages, "" when unknown.
func (w *Watcher) resource(gvk schema.GroupVersionKind) string {
	if w.opts.Mapper == nil {
		return ""
	}
	m, err := w.opts.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return ""
	}
	return m.Resource.Resource
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// sharedInformers counts, for one cache, the Watchers using each informer they started, so that an
// informer is removed only when none uses it: every controller of a manager reads from the same cache,
// and removing an informer another controller watches would silently cut that controller off its events.
type sharedInformers struct {
	mu    sync.Mutex
	users map[informerKey]int
}

// informerKey identifies an informer in a cache, which keeps typed and unstructured ones apart.
type informerKey struct {
	gvk          schema.GroupVersionKind
	unstructured bool
}

// caches holds the counts of every cache a Watcher was built for. The counts belong to the cache, which
// is shared process-wide, not to any one controller; there is one cache per manager.
var caches = struct {
	sync.Mutex
	counts map[Informers]*sharedInformers
}{counts: map[Informers]*sharedInformers{}}

func sharedFor(c Informers) *sharedInformers {
	caches.Lock()
	defer caches.Unlock()
	s := caches.counts[c]
	if s == nil {
		s = &sharedInformers{users: map[informerKey]int{}}
		caches.counts[c] = s
	}
	return s
}

func keyOf(gvk schema.GroupVersionKind, obj client.Object) informerKey {
	_, u := obj.(runtime.Unstructured)
	return informerKey{gvk: gvk, unstructured: u}
}

// acquire gets obj's informer from the cache, starting it without waiting for it to sync.
func (s *sharedInformers) acquire(ctx context.Context, c Informers, gvk schema.GroupVersionKind, obj client.Object) (cache.Informer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, err
	}
	s.users[keyOf(gvk, obj)]++
	return inf, nil
}

// release gives obj's informer back, and removes it from the cache when no Watcher uses it any more.
// Typed informers stay: the manager's own kinds are watched by its other controllers too.
func (s *sharedInformers) release(ctx context.Context, c Informers, gvk schema.GroupVersionKind, obj client.Object) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := keyOf(gvk, obj)
	if s.users[k]--; s.users[k] > 0 {
		return nil
	}
	delete(s.users, k)
	if !k.unstructured {
		return nil
	}
	return c.RemoveInformer(ctx, obj)
}
