package nhc

import (
	"context"
	"reflect"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// stalePCRs makes w's reconciler list PowerCycleRemediations from a cache frozen at the next list after
// freeze is called, while its writes and its live reads reach the API server. It returns how many
// deletes of a PowerCycleRemediation the reconciler attempts.
func (w *world) stalePCRs() (freeze func(), deletes func() int) {
	GinkgoHelper()
	var mu sync.Mutex
	var frozen client.ObjectList
	freezeNext, n := false, 0
	funcs := recordWrites(func(verb string, c client.Client, obj client.Object) {
		if verb == "delete" && kindOf(c, obj) == pcRemediation.Kind {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	funcs.List = func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if gvk, err := apiutil.GVKForObject(list, c.Scheme()); err != nil || gvk.Kind != pcRemediation.Kind+"List" {
			return c.List(ctx, list, opts...)
		}
		mu.Lock()
		defer mu.Unlock()
		if frozen != nil && reflect.TypeOf(frozen) == reflect.TypeOf(list) {
			reflect.ValueOf(list).Elem().Set(reflect.ValueOf(frozen.DeepCopyObject()).Elem())
			return nil
		}
		err := c.List(ctx, list, opts...)
		if err == nil && freezeNext {
			frozen, freezeNext = list.DeepCopyObject().(client.ObjectList), false
		}
		return err
	}
	w.writeThrough(funcs)
	freeze = func() {
		mu.Lock()
		defer mu.Unlock()
		freezeNext = true
	}
	deletes = func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
	return freeze, deletes
}

// The check deletes a recovered Node's request once, even while its cache goes on showing the request
// as it was before the delete: it waits for the request to go, as it does when the cache shows it being
// deleted.
var _ = Describe("Request deletion", func() {
	It("deletes a recovered Node's request once, though its cache goes on showing the request", func(ctx SpecContext) {
		w := newWorld(ctx)
		freeze, deletes := w.stalePCRs()
		check, sick := w.pcCheckWithSickNode(ctx)
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(Equal([]string{sick.Name}))

		freeze()
		w.reconcile(ctx, check) // the cache shows the request from now on
		w.setReady(ctx, sick, corev1.ConditionTrue, w.clk.Now())
		for range 3 {
			w.reconcile(ctx, check)
		}
		Expect(w.remediations(ctx, pcRemediation, check)).To(BeEmpty())
		Expect(deletes()).To(Equal(1), "one delete of a request just deleted")
		Expect(entry(check, sick)).NotTo(BeNil(), "the Node is remembered until its request is gone from the cache too")
	})
})
