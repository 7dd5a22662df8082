package nhc

// Detection waits for no other write: not for a reconcile's writes in flight (the side lane), nor for the
// deletions and lease writes of the same reconcile.

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/pkg/leases"
)

// holdStatusWrites makes w's reconciler write through a client whose status updates wait until release is
// called, as on a busy API server; held is closed when the first one is waiting.
func (w *world) holdStatusWrites() (held <-chan struct{}, release func()) {
	w.t.Helper()
	waiting, released := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	w.writeThrough(interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			once.Do(func() { close(waiting) })
			select {
			case <-released:
			case <-ctx.Done():
				return ctx.Err()
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	release = func() { releaseOnce.Do(func() { close(released) }) }
	w.t.Cleanup(release)
	return waiting, release
}

// A Node whose condition expires while a reconcile is still writing (here its status, held back) is
// requested at its expiry, by the side lane, not once the writes are done. A control-plane Node expiring
// at the same instant is left to the reconcile that comes next, as is the status.
func TestExpiryDuringTheWritesIsRequestedAtOnce(t *testing.T) {
	w := newWorld(t)
	g := w.g
	held, release := w.holdStatusWrites()
	pc := w.pcTemplate("pc")
	check := w.check("nhc", &pc)
	first := w.node("w1", corev1.ConditionFalse, t0)
	second := w.node("w2", corev1.ConditionFalse, t0.Add(time.Minute))
	cp := w.node("cp", corev1.ConditionFalse, t0.Add(time.Minute), labelControlPlane, "")
	w.clk.SetTime(t0.Add(5 * time.Minute)) // first expires now, second and cp a minute later

	type outcome struct {
		res ctrl.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := w.r.Reconcile(w.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: check.Name}})
		done <- outcome{res, err}
	}()
	g.Eventually(held, 10*time.Second).Should(BeClosed(), "the reconcile writes its status")
	g.Expect(names(w.remediations(pcRemediation, check))).To(ConsistOf(first.Name))

	// Whether or not the side lane's timer is set yet, it fires at this instant.
	w.clk.SetTime(t0.Add(6 * time.Minute))
	g.Eventually(func() []string { return names(w.remediations(pcRemediation, check)) }, 10*time.Second).
		Should(ConsistOf(first.Name, second.Name), "requested while the status write is still held")
	g.Eventually(func() string { return w.leaseHolder(second) }, 10*time.Second).Should(Equal(leaseHolder(check.Name)))
	g.Consistently(done, 200*time.Millisecond).ShouldNot(Receive(), "the status write is still held")
	g.Expect(names(w.remediations(pcRemediation, check))).NotTo(ContainElement(cp.Name), "control-plane Nodes are the reconcile's alone")

	release()
	var out outcome
	g.Eventually(done, 10*time.Second).Should(Receive(&out))
	g.Expect(out.err).NotTo(HaveOccurred())
	g.Expect(out.res.RequeueAfter).To(Equal(time.Millisecond), "the side lane acted: look again at once")
	g.Expect(w.rec.with(EventRemediationCreated)).To(HaveLen(2))

	// The next reconcile records the side lane's request and requests the control-plane Node.
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(ConsistOf(first.Name, second.Name, cp.Name))
	g.Expect(entry(check, second).Remediations).To(HaveLen(1))
	g.Expect(w.rec.with(EventRemediationCreated)).To(HaveLen(3), "the side lane's request is not announced twice")
}

// writeOrder makes w's reconciler write through a client that records every create and delete, as
// "create Kind name" or "delete Kind name", in order.
func (w *world) writeOrder() *[]string {
	w.t.Helper()
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
func TestNewRequestsGoBeforeTheDeletions(t *testing.T) {
	w := newWorld(t)
	g := w.g
	pc := w.pcTemplate("pc")
	check := w.check("nhc", &pc)
	recovered := w.node("w1", corev1.ConditionFalse, t0)
	failed := w.node("w2", corev1.ConditionFalse, t0.Add(time.Minute))
	w.clk.SetTime(t0.Add(5 * time.Minute))
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(ConsistOf(recovered.Name))

	w.setReady(recovered, corev1.ConditionTrue, t0.Add(5*time.Minute+30*time.Second))
	w.clk.SetTime(t0.Add(6 * time.Minute))
	writes := w.writeOrder()
	w.reconcile(check)
	g.Expect(names(w.remediations(pcRemediation, check))).To(ConsistOf(failed.Name))
	g.Expect(*writes).To(HaveLen(3))
	g.Expect((*writes)[0]).To(Equal("create PowerCycleRemediation "+failed.Name), "the new request goes out first")
	g.Expect((*writes)[1:]).To(ConsistOf("delete PowerCycleRemediation "+recovered.Name, "create Lease "+leases.LeaseName(failed.Name)))
}
