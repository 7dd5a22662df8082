package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/pkg/leases"
)

// TestStarterSend: both kinds send a new request and its Node's lease in one order. The lease comes first,
// except for a worker's PowerCycleRemediation, whose lease is taken after every request went out
// (LeasesAfter); a lease someone else took in between deletes that request again and is a skip.
func TestStarterSend(t *testing.T) {
	request := func(apiVersion, kind, node string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetNamespace("ns")
		u.SetName(node)
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "NodeHealthCheck", Name: "self", UID: "self"}})
		return u
	}
	pc := func(node string) *unstructured.Unstructured {
		return request("remediation.metalheal.io/v1alpha1", "PowerCycleRemediation", node)
	}
	fence := func(node string) *unstructured.Unstructured {
		return request("fence.example.com/v1", "FenceRemediation", node)
	}
	for name, tc := range map[string]struct {
		node    string
		request func(string) *unstructured.Unstructured
		cp      bool
		// heldBefore: node-maintenance holds the lease; takenBetween: it takes it as the request is created.
		heldBefore, takenBetween bool
		// wantOrder: the check's writes that succeeded, in order.
		wantOrder   []string
		wantSkip    string
		wantRequest bool
	}{
		"a worker's PowerCycleRemediation: the request, then its lease": {node: "w-0", request: pc,
			wantOrder: []string{"PowerCycleRemediation", "Lease"}, wantRequest: true},
		"a control-plane PowerCycleRemediation: the lease first": {node: "cp-0", request: pc, cp: true,
			wantOrder: []string{"Lease", "PowerCycleRemediation"}, wantRequest: true},
		"another kind: the lease first": {node: "w-0", request: fence,
			wantOrder: []string{"Lease", "FenceRemediation"}, wantRequest: true},
		"a lease taken between a PowerCycleRemediation and its lease: the request is deleted again, a skip": {node: "w-0",
			request: pc, takenBetween: true, wantOrder: []string{"PowerCycleRemediation"}, wantSkip: gates.SkipLeaseHeldByOther},
		"a lease held before another kind's request: no request, a skip": {node: "w-0", request: fence, heldBefore: true,
			wantSkip: gates.SkipLeaseHeldByOther},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			base := fake.NewClientBuilder().Build()
			maintenance, err := leases.NewManager(base, "node-maintenance", clocktesting.NewFakeClock(startT0), leases.WithNamespace(leases.DefaultNamespace))
			g.Expect(err).NotTo(HaveOccurred())
			var mu sync.Mutex
			var order []string
			c := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					kind := "Lease"
					if u, ok := obj.(*unstructured.Unstructured); ok {
						kind = u.GetKind()
					} else if _, ok := obj.(*coordinationv1.Lease); !ok {
						return c.Create(ctx, obj, opts...)
					}
					if tc.takenBetween && kind != "Lease" {
						if err := maintenance.RequestLease(ctx, node(tc.node), time.Hour); err != nil {
							return err
						}
					}
					if err := c.Create(ctx, obj, opts...); err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					order = append(order, kind)
					return nil
				},
			})
			if tc.heldBefore {
				g.Expect(maintenance.RequestLease(t.Context(), node(tc.node), time.Hour)).To(Succeed())
			}
			s := starter(t, c)
			res := s.Send(t.Context(), Job{Node: node(tc.node), ControlPlane: tc.cp, Fresh: true}, tc.request(tc.node), "self")
			s.LeasesAfter(t.Context(), 4, []*Sent{&res, nil})
			g.Expect(res.Err).NotTo(HaveOccurred())
			g.Expect(res.LeaseErr).NotTo(HaveOccurred())
			g.Expect(order).To(Equal(tc.wantOrder))
			got := tc.request(tc.node)
			err = base.Get(t.Context(), client.ObjectKeyFromObject(got), got)
			g.Expect(err == nil).To(Equal(tc.wantRequest), "the request exists: %v", err)
			if tc.wantSkip != "" {
				g.Expect(res.Skip).NotTo(BeNil())
				g.Expect(res.Skip.Reason).To(Equal(tc.wantSkip))
				g.Expect(res.Created).To(BeFalse())
				g.Expect(res.Deleted).To(Equal(tc.takenBetween), "deleted again")
				return
			}
			g.Expect(res.Skip).To(BeNil())
			g.Expect(res.Created).To(BeTrue())
			l := &coordinationv1.Lease{}
			g.Expect(base.Get(t.Context(), client.ObjectKey{Namespace: leases.DefaultNamespace, Name: leases.LeaseName(tc.node)}, l)).To(Succeed())
			g.Expect(*l.Spec.HolderIdentity).To(Equal(self))
		})
	}
}
