package mhc

import (
	"context"
	"reflect"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
)

// laggingCache is a reconciler whose cache of PowerCycleRemediations freezes at its next list once freeze
// is called (as an informer behind the check's own writes), while its writes reach the API server; it
// counts the creates and deletes of PowerCycleRemediations it attempts.
type laggingCache struct {
	r                *Reconciler
	mu               sync.Mutex
	freezeNext       bool
	frozen           client.ObjectList
	creates, deletes int
}

func (w *world) laggingCache() *laggingCache {
	GinkgoHelper()
	l := &laggingCache{}
	base, err := client.NewWithWatch(mgmtCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	count := func(c client.Client, obj client.Object, n *int) {
		if gvk, err := apiutil.GVKForObject(obj, c.Scheme()); err == nil && gvk.Kind == "PowerCycleRemediation" {
			l.mu.Lock()
			*n++
			l.mu.Unlock()
		}
	}
	reader := interceptor.NewClient(base, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if gvk, err := apiutil.GVKForObject(list, c.Scheme()); err != nil || gvk.Kind != "PowerCycleRemediationList" {
				return c.List(ctx, list, opts...)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.frozen != nil && reflect.TypeOf(l.frozen) == reflect.TypeOf(list) {
				reflect.ValueOf(list).Elem().Set(reflect.ValueOf(l.frozen.DeepCopyObject()).Elem())
				return nil
			}
			err := c.List(ctx, list, opts...)
			if err == nil && l.freezeNext {
				l.frozen, l.freezeNext = list.DeepCopyObject().(client.ObjectList), false
			}
			return err
		}})
	writer := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count(c, obj, &l.creates)
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			count(c, obj, &l.deletes)
			return c.Delete(ctx, obj, opts...)
		}})
	l.r, err = New(Options{Client: writer, Reader: reader, APIReader: base, Recorder: w.rec, Clock: w.clock, Discovery: mgmtDiscovery,
		ResyncPeriod: worldResync})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { l.r.remotes.StopAll() })
	return l
}

func (l *laggingCache) freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.freezeNext = true
}

func (l *laggingCache) counts() (creates, deletes int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.creates, l.deletes
}

// A check whose cache lags behind its own writes, as an informer does for a moment after each, creates a
// Machine's request once and deletes it once, saying so once each: it remembers what it has just written
// (engine.RecentWrites), as a NodeHealthCheck does. Before, three passes over a cache that did not show the
// new request made three creates; over one that still showed the deleted request, three deletes and three
// RemediationRequestDeleted events.
var _ = Describe("A request cache behind the check's own writes", func() {
	It("creates a Machine's request once and deletes it once", func(ctx SpecContext) {
		w := newWorld(ctx)
		l := w.laggingCache()
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", func(mhc *v1alpha1.MachineHealthCheck) { mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot")) })
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, time.Hour)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		pass := func() {
			GinkgoHelper()
			_, err := l.r.Reconcile(ctx, reconcileRequest(w.ns, "workers"))
			Expect(err).NotTo(HaveOccurred())
		}

		By("the cache shows no request, before or after the create")
		l.freeze()
		for range 3 {
			pass()
		}
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))
		creates, _ := l.counts()
		Expect(creates).To(Equal(1), "one create, though the cache never showed the request")
		Expect(w.rec.With(EventRemediationRequestCreated)).To(HaveLen(1))

		By("the cache shows the request as it was before its delete")
		l.mu.Lock()
		l.frozen, l.freezeNext = nil, true
		l.mu.Unlock()
		pass()
		w.setReady(ctx, k8s, node, corev1.ConditionTrue, 0)
		for range 3 {
			pass()
		}
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty())
		_, deletes := l.counts()
		Expect(deletes).To(Equal(1), "one delete of a request just deleted")
		Expect(w.rec.With(EventRemediationRequestDeleted)).To(HaveLen(1))
	})
})
