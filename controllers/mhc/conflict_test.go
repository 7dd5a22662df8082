package mhc

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
)

// A status write refused because the check changed since the copy the pass read (the cache behind the
// API server: often the check's own last write) is no error: the check looks again from a fresh copy at
// once, as a NodeHealthCheck does, not after the controller's growing backoff.
var _ = Describe("A status write that meets a newer check", func() {
	It("looks again in 50 ms, without an error", func(ctx SpecContext) {
		w := newWorld(ctx)
		refused := 0
		base, err := client.NewWithWatch(mgmtCfg, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		c := interceptor.NewClient(base, interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if _, ok := obj.(*v1alpha1.MachineHealthCheck); ok && refused == 0 {
					refused++
					return apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "machinehealthchecks"},
						obj.GetName(), nil)
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		})
		r, err := New(Options{Client: c, Reader: k8s, APIReader: k8s, Recorder: w.rec, Clock: w.clock, Discovery: mgmtDiscovery})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { r.remotes.StopAll() })
		w.createCheck(ctx, "workers")
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionTrue, time.Hour)
		w.createMachine(ctx, "m", withNodeRef(node.Name))

		res, err := r.Reconcile(ctx, reconcileRequest(w.ns, "workers"))
		Expect(err).NotTo(HaveOccurred())
		Expect(refused).To(Equal(1))
		Expect(res.RequeueAfter).To(Equal(engine.ConflictRetry))

		res, err = r.Reconcile(ctx, reconcileRequest(w.ns, "workers"))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(Equal(engine.DefaultResyncPeriod), "the next pass writes its status")
		Expect(w.check(ctx, "workers").Status.ExpectedMachines).NotTo(BeNil())
	})
})

// A check deleted without a finalizer is found gone (NotFound): nothing of its status writes stays
// remembered, however many checks come and go in the manager's lifetime.
var _ = Describe("A deleted check", func() {
	It("leaves nothing of its status writes remembered", func(ctx SpecContext) {
		w := newWorld(ctx)
		check := w.createCheck(ctx, "gone")
		_, err := w.r.Reconcile(ctx, reconcileRequest(w.ns, "gone"))
		Expect(err).NotTo(HaveOccurred())
		Expect(w.r.statuses.Remembers(client.ObjectKeyFromObject(check))).To(BeTrue(), "its status was written")

		Expect(k8s.Delete(ctx, check)).To(Succeed())
		_, err = w.r.Reconcile(ctx, reconcileRequest(w.ns, "gone"))
		Expect(err).NotTo(HaveOccurred())
		Expect(w.r.statuses.Remembers(client.ObjectKeyFromObject(check))).To(BeFalse())
	})
})
