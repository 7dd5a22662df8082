package mhc

import (
	"context"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/gates"
)

// write is one write the reconciler made to the management cluster: a create (a request, a Lease) or a
// Machine's status patch, with the object's name (a Lease: its Node's).
type write struct{ Kind, Name string }

// writeSpy records the reconciler's writes, in the order the API server stored them.
type writeSpy struct {
	mu     sync.Mutex
	writes []write
}

func (s *writeSpy) all() []write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

// index is the position of the first write of kind about name, -1 when there is none.
func (s *writeSpy) index(kind, name string) int {
	return slices.Index(s.all(), write{Kind: kind, Name: name})
}

// spyOnWrites makes the world's reconciler write to the management cluster through a client that records
// its creates and Machine status patches; after, when set, runs once each is stored, before the writer
// sees its answer (as a busy API server would hold it).
func (w *world) spyOnWrites(after func(ctx context.Context, wr write)) *writeSpy {
	GinkgoHelper()
	spy := &writeSpy{}
	base, err := client.NewWithWatch(mgmtCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	stored := func(ctx context.Context, wr write) {
		spy.mu.Lock()
		spy.writes = append(spy.writes, wr)
		spy.mu.Unlock()
		if after != nil {
			after(ctx, wr)
		}
	}
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			switch o := obj.(type) {
			case *unstructured.Unstructured:
				stored(ctx, write{Kind: o.GetKind(), Name: o.GetName()})
			case *coordinationv1.Lease:
				stored(ctx, write{Kind: "Lease", Name: o.Name[len("node-"):]})
			}
			return nil
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			if m, ok := obj.(*clusterv1.Machine); ok {
				stored(ctx, write{Kind: "Machine", Name: m.Name})
			}
			return nil
		},
	})
	w.r.remotes.StopAll()
	w.r, err = New(Options{Client: c, Reader: k8s, APIReader: k8s, Recorder: w.rec, Clock: w.clock, Discovery: mgmtDiscovery,
		ResyncPeriod: worldResync})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { w.r.remotes.StopAll() })
	return spy
}

// A new PowerCycleRemediation of a worker Machine goes out before its Node's lease, and before the
// Machine's conditions, as the NodeHealthCheck sends its requests (engine.LeaseAfter): its remediator takes
// the lease, or finds it held by the check, before it touches the host. In a burst every request goes out
// before any of their leases. A control-plane Machine's lease still comes first.
var _ = Describe("The order of a new request's writes", func() {
	It("sends every PowerCycleRemediation of a burst before any of their leases, and each before its Machine's conditions", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", withTemplate("reboot"))
		names := []string{"m-0", "m-1", "m-2", "m-3"}
		nodes := map[string]string{}
		for _, name := range names {
			n := w.createNode(ctx, k8s, w.nodeName(name), corev1.ConditionUnknown, 10*time.Minute)
			w.createMachine(ctx, name, withNodeRef(n.Name))
			nodes[name] = n.Name
		}
		// The requests after the first hold their answer for a moment: a lease written meanwhile (say, the
		// first request's, were it taken at once) would land between them.
		var mu sync.Mutex
		requests := 0
		leaseWritten := make(chan struct{})
		var once sync.Once
		spy := w.spyOnWrites(func(_ context.Context, wr write) {
			switch wr.Kind {
			case "Lease":
				once.Do(func() { close(leaseWritten) })
			case "PowerCycleRemediation":
				mu.Lock()
				requests++
				first := requests == 1
				mu.Unlock()
				if !first {
					select {
					case <-leaseWritten:
					case <-time.After(300 * time.Millisecond):
					}
				}
			}
		})

		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(len(names)))
		check := w.check(ctx, "workers")
		lastRequest, firstLease := -1, len(spy.all())
		for _, name := range names {
			Expect(leaseHolder(ctx, nodes[name])).To(Equal(checkLeaseHolder("workers")), "every lease ends up the check's")
			Expect(entryOf(check, name).Remediations).To(HaveLen(1))
			Expect(entryOf(check, name).SkipReason).To(BeEmpty())
			req, lease, conds := spy.index("PowerCycleRemediation", name), spy.index("Lease", nodes[name]), spy.index("Machine", name)
			Expect(req).To(BeNumerically(">=", 0))
			Expect(conds).To(BeNumerically(">", req), "the Machine's conditions after its request: %v", spy.all())
			Expect(condition(w.machine(ctx, name), clusterv1.MachineHealthCheckSucceededCondition)).To(
				haveCondition("False", clusterv1.MachineHealthCheckUnhealthyNodeReason))
			lastRequest, firstLease = max(lastRequest, req), min(firstLease, lease)
		}
		Expect(lastRequest).To(BeNumerically("<", firstLease), "every request before any lease: %v", spy.all())
		Expect(w.rec.all()).To(HaveEach(HaveField("Reason", Not(Equal(EventRemediationSkipped)))))
	})

	It("deletes a request again when someone takes its Node's lease between the request and the check's lease, and reports the skip", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "workers", withTemplate("reboot"))
		node := w.createNode(ctx, k8s, w.nodeName("n"), corev1.ConditionUnknown, 10*time.Minute)
		w.createMachine(ctx, "m", withNodeRef(node.Name))
		maintenance := w.leaseManager("node-maintenance")
		var taken error
		var once sync.Once
		w.spyOnWrites(func(ctx context.Context, wr write) {
			if wr.Kind == "PowerCycleRemediation" {
				// Node maintenance, a moment after the check looked.
				once.Do(func() { taken = maintenance.RequestLease(ctx, node, time.Hour) })
			}
		})

		w.reconcile(ctx, "workers")
		Expect(taken).NotTo(HaveOccurred(), "node maintenance took the lease after the request went out")
		Expect(w.powerCycleRemediations(ctx)).To(BeEmpty(), "deleted again")
		Expect(leaseHolder(ctx, node.Name)).To(Equal("node-maintenance"), "nothing else acts on the Node")
		e := entryOf(w.check(ctx, "workers"), "m")
		Expect(e).NotTo(BeNil())
		Expect(e.SkipReason).To(Equal(v1alpha1.ReasonLeaseHeldByOther))
		Expect(e.SkipMessage).To(ContainSubstring(`"node-maintenance"`))
		Expect(e.Remediations).To(BeEmpty(), "no request recorded")
		Expect(w.rec.all()).To(ContainElement(And(HaveField("Kind", "Machine"), HaveField("Reason", EventRemediationSkipped),
			HaveField("Type", corev1.EventTypeWarning), HaveField("Note", ContainSubstring("node-maintenance")))))
		Expect(w.rec.all()).NotTo(ContainElement(HaveField("Reason", EventRemediationRequestCreated)))
		Expect(condition(w.machine(ctx, "m"), clusterv1.MachineOwnerRemediatedCondition)).To(BeNil())

		By("node maintenance lets go: the check remediates")
		Expect(maintenance.InvalidateLease(ctx, node.Name)).To(Succeed())
		w.reconcile(ctx, "workers")
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))
		Expect(leaseHolder(ctx, node.Name)).To(Equal(checkLeaseHolder("workers")))
		Expect(entryOf(w.check(ctx, "workers"), "m").SkipReason).To(BeEmpty())
	})

	It("takes a control-plane Machine's lease before its request", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.createTemplate(ctx, "reboot", "reboot")
		w.createCheck(ctx, "cp", withTemplate("reboot"))
		node := w.createNode(ctx, k8s, w.nodeName("cp-0"), corev1.ConditionUnknown, 10*time.Minute)
		node.Labels = map[string]string{gates.LabelControlPlane: ""}
		Expect(k8s.Update(ctx, node)).To(Succeed())
		w.createMachine(ctx, "cp-0", withNodeRef(node.Name), asControlPlane)
		// The check is deleted with the test, its lease is not: let it go, so that no later test finds a
		// control-plane Node held.
		DeferCleanup(func(ctx context.Context) {
			Expect(w.leaseManager(checkLeaseHolder("cp")).InvalidateLease(ctx, node.Name)).To(Succeed())
		})
		var atRequest string
		spy := w.spyOnWrites(func(ctx context.Context, wr write) {
			if wr.Kind == "PowerCycleRemediation" {
				atRequest = leaseHolder(ctx, node.Name)
			}
		})

		w.reconcile(ctx, "cp")
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1))
		Expect(atRequest).To(Equal(checkLeaseHolder("cp")), "the lease held when the request was stored")
		Expect(spy.index("Lease", node.Name)).To(BeNumerically("<", spy.index("PowerCycleRemediation", "cp-0")), "%v", spy.all())
	})
})
