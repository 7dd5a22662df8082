package nhc

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// staleLeases makes w's reconciler read node leases from a cache frozen at the moment freeze is called
// (before the first call: a cache with no lease at all), while its writes and its live reads reach the
// API server. It returns the lease writes the reconciler attempts, by verb.
func (w *world) staleLeases() (freeze func(), writes func() map[string]int) {
	w.t.Helper()
	var mu sync.Mutex
	frozen := &coordinationv1.LeaseList{}
	counts := map[string]int{}
	funcs := recordWrites(func(verb string, _ client.Client, obj client.Object) {
		if _, ok := obj.(*coordinationv1.Lease); ok {
			mu.Lock()
			counts[verb]++
			mu.Unlock()
		}
	})
	funcs.Get = func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return c.Get(ctx, key, obj, opts...)
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range frozen.Items {
			if frozen.Items[i].Namespace == key.Namespace && frozen.Items[i].Name == key.Name {
				frozen.Items[i].DeepCopyInto(l)
				return nil
			}
		}
		return apierrors.NewNotFound(coordinationv1.Resource("leases"), key.Name)
	}
	funcs.List = func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		l, ok := list.(*coordinationv1.LeaseList)
		if !ok {
			return c.List(ctx, list, opts...)
		}
		mu.Lock()
		defer mu.Unlock()
		frozen.DeepCopyInto(l)
		return nil
	}
	w.writeThrough(funcs)
	freeze = func() {
		mu.Lock()
		defer mu.Unlock()
		frozen = &coordinationv1.LeaseList{}
		w.g.Expect(k8s.List(w.ctx, frozen, client.InNamespace(leaseNS))).To(Succeed())
	}
	writes = func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for verb, n := range counts {
			out[verb] = n
		}
		return out
	}
	return freeze, writes
}

// The check takes a Node's lease once, and lets it go once, even while its cache does not show its own
// lease writes yet: a reconcile right after the lease was taken does not take it again, and one right
// after it was released does not release it again.
func TestOwnLeaseWritesAreNotRepeatedWhileTheCacheLags(t *testing.T) {
	w := newWorld(t)
	g := w.g
	freeze, writes := w.staleLeases()
	fence := w.fenceTemplate("fence", map[string]any{"template": map[string]any{"spec": map[string]any{}}})
	check := w.check("nhc", &fence)
	sick := w.node("w1", corev1.ConditionFalse, t0)
	w.clk.SetTime(t0.Add(time.Hour))

	w.reconcile(check)
	g.Expect(names(w.remediations(fenceRemediation, check))).To(Equal([]string{sick.Name}))
	g.Expect(w.leaseHolder(sick)).To(Equal(leaseHolder(check.Name)))
	g.Expect(writes()).To(Equal(map[string]int{"create": 1}))

	w.reconcile(check) // the cache shows no lease yet
	w.reconcile(check)
	g.Expect(writes()).To(Equal(map[string]int{"create": 1}), "no second take of a lease just taken")

	freeze() // the cache shows the lease now, and will go on showing it after its release
	w.setReady(sick, corev1.ConditionTrue, w.clk.Now())
	for range 4 {
		w.reconcile(check)
	}
	g.Expect(w.remediations(fenceRemediation, check)).To(BeEmpty())
	g.Expect(w.leaseHolder(sick)).To(BeEmpty(), "released")
	g.Expect(writes()).To(Equal(map[string]int{"create": 1, "delete": 1}), "one release of a lease just released")

	// Once the lease is due for renewal, the check renews it, through the cache's copy.
	sick2 := w.node("w2", corev1.ConditionFalse, t0)
	w.reconcile(check)
	g.Expect(w.leaseHolder(sick2)).To(Equal(leaseHolder(check.Name)))
	freeze()
	w.clk.Step(DefaultLeaseDuration/2 + time.Second)
	w.reconcile(check)
	g.Expect(writes()).To(Equal(map[string]int{"create": 2, "delete": 1, "update": 1}), "renewed once, when due")
}

// The check takes a Node's lease over from its own request's remediator once, even while its cache goes
// on showing the remediator's lease, which runs out later than the check's own.
func TestTakeOverIsNotRepeatedWhileTheCacheLags(t *testing.T) {
	w := newWorld(t)
	g := w.g
	check, sick := w.pcCheckWithSickNode()
	w.reconcile(check)
	g.Expect(w.leaseHolder(sick)).To(Equal(leaseHolder(check.Name)))

	// The manager stopped before it took the lease, and the remediator took it, for longer than the
	// check takes it; the manager starts again, with a cache that goes on showing the remediator's lease.
	g.Expect(w.leaseManager(leaseHolder(check.Name)).InvalidateLease(w.ctx, sick.Name)).To(Succeed())
	g.Expect(w.leaseManager("PowerCycleRemediation-"+sick.Name).RequestLease(w.ctx, sick, time.Hour)).To(Succeed())
	freeze, writes := w.staleLeases()
	freeze()
	w.clk.Step(time.Minute)
	w.reconcile(check)
	g.Expect(w.leaseHolder(sick)).To(Equal(leaseHolder(check.Name)))
	w.reconcile(check)
	w.reconcile(check)
	g.Expect(writes()).To(Equal(map[string]int{"update": 1}), "one take-over")
}
