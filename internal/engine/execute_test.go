package engine

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalheal/metalheal/pkg/leases"
)

// TestDelete: a request is deleted, with or without the UID the check read; one gone already is nothing
// to do. (The fake client ignores the UID precondition: the MachineHealthCheck's envtests cover it.)
func TestDelete(t *testing.T) {
	ref := Ref{APIVersion: "fence.example.com/v1", Kind: "FenceRemediation", Namespace: "ns", Name: "w-0"}
	for name, tc := range map[string]struct {
		exists      bool
		uid         types.UID
		wantErr     bool
		wantDeleted bool
	}{
		"exists: deleted":                    {exists: true, wantDeleted: true},
		"exists, the UID read: deleted":      {exists: true, uid: "read", wantDeleted: true},
		"gone already: nothing to do":        {wantDeleted: true},
		"gone already, with a UID: no error": {uid: "read", wantDeleted: true},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			b := fake.NewClientBuilder()
			if tc.exists {
				obj := ref.Object()
				obj.SetUID("read")
				b = b.WithObjects(obj)
			}
			c := b.Build()
			err := Delete(t.Context(), c, ref, tc.uid)
			g.Expect(err != nil).To(Equal(tc.wantErr), "%v", err)
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(ref.Object().GroupVersionKind())
			g.Expect(client.IgnoreNotFound(c.Get(t.Context(), client.ObjectKeyFromObject(ref.Object()), got))).To(Succeed())
			g.Expect(got.GetName() == "").To(Equal(tc.wantDeleted))
		})
	}
}

// TestStarterRelease: the check's lease on a Node is let go; a Node without one is nothing to do.
func TestStarterRelease(t *testing.T) {
	g := NewWithT(t)
	c := fake.NewClientBuilder().Build()
	s := starter(t, c)
	g.Expect(s.TakeLease(t.Context(), node("w-0"), false)).To(BeNil())
	g.Expect(s.Release(t.Context(), "w-0")).To(Succeed())
	g.Expect(s.Release(t.Context(), "w-1")).To(Succeed())
	other, err := leases.NewManager(c, "node-maintenance", clocktesting.NewFakeClock(startT0), leases.WithNamespace(leases.DefaultNamespace))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.RequestLease(t.Context(), node("w-0"), time.Hour)).To(Succeed(), "the lease is free again")
}
