package kindwatch

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var (
	t0       = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	fooKind  = schema.GroupVersionKind{Group: "foo.example.com", Version: "v1", Kind: "FooRemediation"}
	barKind  = schema.GroupVersionKind{Group: "bar.example.com", Version: "v1", Kind: "BarRemediation"}
	checkA   = reconcile.Request{NamespacedName: types.NamespacedName{Name: "a"}}
	checkB   = reconcile.Request{NamespacedName: types.NamespacedName{Name: "b"}}
	forbid   = apierrors.NewForbidden(schema.GroupResource{Group: "foo.example.com", Resource: "fooremediations"}, "", nil)
	eventual = 5 * time.Second
)

// fakeCache hands out fake informers, which sync when the test says so, and records removals.
type fakeCache struct {
	mu        sync.Mutex
	informers map[schema.GroupVersionKind]*controllertest.FakeInformer
	started   map[schema.GroupVersionKind]int
	removed   map[schema.GroupVersionKind]int
	err       error
}

func newFakeCache() *fakeCache {
	return &fakeCache{informers: map[schema.GroupVersionKind]*controllertest.FakeInformer{},
		started: map[schema.GroupVersionKind]int{}, removed: map[schema.GroupVersionKind]int{}}
}

func (c *fakeCache) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if inf, ok := c.informers[gvk]; ok {
		return inf, nil
	}
	inf := controllertest.NewFakeInformer()
	c.informers[gvk] = inf
	c.started[gvk]++
	return inf, nil
}

func (c *fakeCache) RemoveInformer(_ context.Context, obj client.Object) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	gvk := obj.GetObjectKind().GroupVersionKind()
	delete(c.informers, gvk)
	c.removed[gvk]++
	return nil
}

// sync makes the kind's current informer synced.
func (c *fakeCache) sync(gvk schema.GroupVersionKind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.informers[gvk].Synced()
}

func (c *fakeCache) counts(gvk schema.GroupVersionKind) (started, removed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started[gvk], c.removed[gvk]
}

// probeReader answers every list with err.
type probeReader struct {
	client.Reader
	err error
}

func (p probeReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return p.err
}

type fixture struct {
	g     *WithT
	ctx   context.Context
	clk   *clocktesting.FakeClock
	cache *fakeCache
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
	w     *Watcher
}

func newFixture(t *testing.T, probeErr error) *fixture {
	f := &fixture{g: NewWithT(t), ctx: t.Context(), clk: clocktesting.NewFakeClock(t0), cache: newFakeCache(),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())}
	t.Cleanup(f.queue.ShutDown)
	f.w = f.watcher(probeErr)
	return f
}

// watcher builds a Watcher on the fixture's cache and clock, started like a controller's source.
func (f *fixture) watcher(probeErr error) *Watcher {
	w, err := New(Options{Name: "test", Cache: f.cache, Probe: probeReader{err: probeErr}, Clock: f.clk,
		Mapper: meta.NewDefaultRESTMapper(nil)})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(w.Source().Start(f.ctx, f.queue)).To(Succeed())
	return w
}

func (f *fixture) state(w *Watcher, user reconcile.Request, gvks ...schema.GroupVersionKind) func() State {
	return func() State {
		kinds := make([]Kind, len(gvks))
		for i, g := range gvks {
			kinds[i] = Kind{GVK: g}
		}
		return w.Want(f.ctx, user, kinds)[gvks[0]].State
	}
}

// queued drains the queue and returns what was in it.
func (f *fixture) queued() []reconcile.Request {
	var out []reconcile.Request
	for f.queue.Len() > 0 {
		r, _ := f.queue.Get()
		f.queue.Done(r)
		f.queue.Forget(r)
		out = append(out, r)
	}
	return out
}

func TestAnInformerThatDoesNotSyncFailsAtItsBoundAndIsStopped(t *testing.T) {
	f := newFixture(t, forbid)
	got := f.w.Want(f.ctx, checkA, []Kind{{GVK: fooKind}})[fooKind]
	f.g.Expect(got.State).To(Equal(Pending))
	f.g.Expect(got.Until).To(Equal(t0.Add(DefaultSyncTimeout)))

	f.clk.Step(DefaultSyncTimeout - time.Nanosecond)
	f.g.Expect(f.state(f.w, checkA, fooKind)()).To(Equal(Pending), "not before its bound")

	f.clk.Step(time.Nanosecond)
	f.g.Eventually(f.state(f.w, checkA, fooKind)).WithTimeout(eventual).Should(Equal(Failed))
	st := f.w.Want(f.ctx, checkA, []Kind{{GVK: fooKind}})[fooKind]
	f.g.Expect(st.Until).To(Equal(t0.Add(DefaultSyncTimeout + DefaultRetryMin)))
	var nw *NotWatchableError
	f.g.Expect(st.Err).To(BeAssignableToTypeOf(nw))
	f.g.Expect(st.Err.Error()).To(And(ContainSubstring("not synced within 30s"), ContainSubstring("forbidden"),
		ContainSubstring(AggregationLabel)))
	f.g.Expect(f.queued()).To(Equal([]reconcile.Request{checkA}), "its check is told")
	_, removed := f.cache.counts(fooKind)
	f.g.Expect(removed).To(Equal(1), "a failed informer is stopped: it would fail in the log until the retry")

	// The check is deleted: its kind is never tried again.
	f.w.Forget(f.ctx, checkA)
	f.clk.Step(DefaultRetryMax)
	f.g.Consistently(func() int { s, _ := f.cache.counts(fooKind); return s }).WithTimeout(200 * time.Millisecond).Should(Equal(1))
}

func TestAFailedKindIsTriedAgainWithBackoffAndRecovers(t *testing.T) {
	f := newFixture(t, forbid)
	f.w.Want(f.ctx, checkA, []Kind{{GVK: fooKind}})
	f.clk.Step(DefaultSyncTimeout)
	f.g.Eventually(f.state(f.w, checkA, fooKind)).WithTimeout(eventual).Should(Equal(Failed))

	// The first retry fails too: the next waits twice as long.
	f.clk.Step(DefaultRetryMin)
	f.g.Eventually(func() int { s, _ := f.cache.counts(fooKind); return s }).WithTimeout(eventual).Should(Equal(2))
	f.g.Expect(f.state(f.w, checkA, fooKind)()).To(Equal(Pending))
	f.clk.Step(DefaultSyncTimeout)
	f.g.Eventually(f.state(f.w, checkA, fooKind)).WithTimeout(eventual).Should(Equal(Failed))
	st := f.w.Want(f.ctx, checkA, []Kind{{GVK: fooKind}})[fooKind]
	f.g.Expect(st.Until).To(Equal(f.clk.Now().Add(2 * DefaultRetryMin)))

	// The permission is granted: the next attempt syncs, and the check is told.
	f.queued()
	f.clk.Step(2 * DefaultRetryMin)
	f.g.Eventually(func() int { s, _ := f.cache.counts(fooKind); return s }).WithTimeout(eventual).Should(Equal(3))
	f.cache.sync(fooKind)
	f.g.Eventually(f.state(f.w, checkA, fooKind)).WithTimeout(eventual).Should(Equal(Synced))
	f.g.Expect(f.queued()).To(ContainElement(checkA))
}

func TestAKindNoCheckNamesIsStoppedOnlyWhenNoWatcherUsesIt(t *testing.T) {
	f := newFixture(t, nil)
	other := f.watcher(nil) // another controller on the same cache
	f.w.Want(f.ctx, checkA, []Kind{{GVK: fooKind}, {GVK: barKind}})
	f.w.Want(f.ctx, checkB, []Kind{{GVK: fooKind}})
	other.Want(f.ctx, checkA, []Kind{{GVK: barKind}})
	f.cache.sync(fooKind)
	f.cache.sync(barKind)
	f.g.Eventually(f.state(f.w, checkA, fooKind, barKind)).WithTimeout(eventual).Should(Equal(Synced))

	// Check a no longer names foo, b still does; bar is still used by the other controller.
	f.w.Want(f.ctx, checkA, nil)
	_, fooRemoved := f.cache.counts(fooKind)
	_, barRemoved := f.cache.counts(barKind)
	f.g.Expect([]int{fooRemoved, barRemoved}).To(Equal([]int{0, 0}))

	f.w.Forget(f.ctx, checkB)
	other.Forget(f.ctx, checkA)
	_, fooRemoved = f.cache.counts(fooKind)
	_, barRemoved = f.cache.counts(barKind)
	f.g.Expect([]int{fooRemoved, barRemoved}).To(Equal([]int{1, 1}))
}

func TestAKindThatCannotBeLookedUpFailsAtOnce(t *testing.T) {
	f := newFixture(t, nil)
	f.cache.err = &meta.NoKindMatchError{GroupKind: fooKind.GroupKind(), SearchedVersions: []string{"v1"}}
	st := f.w.Want(f.ctx, checkA, []Kind{{GVK: fooKind}})[fooKind]
	f.g.Expect(st.State).To(Equal(Failed))
	f.g.Expect(st.Err.Error()).To(ContainSubstring("is its CRD installed?"))
	f.g.Expect(st.Until).To(Equal(t0.Add(DefaultRetryMin)))

	// The CRD is installed: the retry starts the informer.
	f.cache.mu.Lock()
	f.cache.err = nil
	f.cache.mu.Unlock()
	f.clk.Step(DefaultRetryMin)
	f.g.Eventually(f.state(f.w, checkA, fooKind)).WithTimeout(eventual).Should(Equal(Pending))
	f.cache.sync(fooKind)
	f.g.Eventually(f.state(f.w, checkA, fooKind)).WithTimeout(eventual).Should(Equal(Synced))
}

func TestRetriesWaitAtMostRetryMax(t *testing.T) {
	f := newFixture(t, nil)
	f.cache.err = forbid
	f.w.Want(f.ctx, checkA, []Kind{{GVK: fooKind}})
	wait := DefaultRetryMin
	for range 6 {
		st := f.w.Want(f.ctx, checkA, []Kind{{GVK: fooKind}})[fooKind]
		f.g.Expect(st.Until.Sub(f.clk.Now())).To(Equal(min(wait, DefaultRetryMax)))
		before := st.Until
		f.clk.Step(min(wait, DefaultRetryMax))
		f.g.Eventually(func() time.Time {
			return f.w.Want(f.ctx, checkA, []Kind{{GVK: fooKind}})[fooKind].Until
		}).WithTimeout(eventual).ShouldNot(Equal(before))
		wait *= 2
	}
}
