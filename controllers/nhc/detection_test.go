package nhc

// Detection waits for no other write of the same reconcile: the new requests go out before its deletions
// and lease writes.

import (
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/pkg/leases"
)

// writeOrder makes w's reconciler write through a client that records every create and delete, as
// "create Kind name" or "delete Kind name", in order.
func (w *world) writeOrder() *[]string {
	GinkgoHelper()
	var mu sync.Mutex
	var writes []string
	w.writeThrough(recordWrites(func(verb string, c client.Client, obj client.Object) {
		if verb == "update" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		writes = append(writes, verb+" "+kindOf(c, obj)+" "+obj.GetName())
	}))
	return &writes
}

// A reconcile that both requests a Node that has just failed and deletes the request of one that
// recovered sends the new request first: detection waits for no other write.
var _ = Describe("Write order", func() {
	It("sends a new request before the deletions and lease writes of the same reconcile", func(ctx SpecContext) {
		w := newWorld(ctx)
		pc := w.pcTemplate(ctx, "pc")
		check := w.check(ctx, "nhc", &pc)
		recovered := w.node(ctx, "w1", corev1.ConditionFalse, t0)
		failed := w.node(ctx, "w2", corev1.ConditionFalse, t0.Add(time.Minute))
		w.clk.SetTime(t0.Add(5 * time.Minute))
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(ConsistOf(recovered.Name))

		w.setReady(ctx, recovered, corev1.ConditionTrue, t0.Add(5*time.Minute+30*time.Second))
		w.clk.SetTime(t0.Add(6 * time.Minute))
		writes := w.writeOrder()
		w.reconcile(ctx, check)
		Expect(names(w.remediations(ctx, pcRemediation, check))).To(ConsistOf(failed.Name))
		Expect(*writes).To(HaveLen(3))
		Expect((*writes)[0]).To(Equal("create PowerCycleRemediation "+failed.Name), "the new request goes out first")
		Expect((*writes)[1:]).To(ConsistOf("delete PowerCycleRemediation "+recovered.Name, "create Lease "+leases.LeaseName(failed.Name)))
	})
})
