package leases

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestHolderNamespace: two objects of one kind and name in two namespaces hold leases under one identity
// (the one peers read); a Manager made WithHolderNamespace tells them apart by the namespace it records on
// the lease, and a Manager without one (a peer's, a health check's) goes on by the identity alone.
func TestHolderNamespace(t *testing.T) {
	const us = "PowerCycleRemediation-worker"
	mt := metav1.NewMicroTime(t0.Add(-10 * time.Second))
	for i, tc := range []struct {
		name       string
		recorded   *string // the namespace the existing lease records; nil: no annotation
		holderNS   string  // the requesting Manager's holder namespace ("": none)
		fromHolder []Holder
		fromIDs    []string
		wantHeld   bool   // refused: held by the existing holder
		wantNS     string // otherwise: the namespace the lease records afterwards ("" none)
	}{
		{name: "its own lease is renewed", recorded: new("team-a"), holderNS: "team-a", wantNS: "team-a"},
		{name: "the namesake's of another namespace is held", recorded: new("team-b"), holderNS: "team-a", wantHeld: true},
		{name: "one recording no namespace is not its own", holderNS: "team-a", wantHeld: true},
		{name: "one recording no namespace, taken over when named exactly", holderNS: "team-a",
			fromHolder: []Holder{{Identity: us}}, wantNS: "team-a"},
		{name: "the namesake's is not taken over from a holder of another namespace", recorded: new("team-b"), holderNS: "team-a",
			fromHolder: []Holder{{Identity: us, Namespace: "team-c"}}, wantHeld: true},
		{name: "the namesake's is taken over when named exactly", recorded: new("team-b"), holderNS: "team-a",
			fromHolder: []Holder{{Identity: us, Namespace: "team-b"}}, wantNS: "team-a"},
		{name: "a Manager without a namespace goes by the identity, and drops the record", recorded: new("team-b"), wantNS: ""},
		{name: "a peer's identity in from matches whatever namespace is recorded", recorded: new("team-b"), holderNS: "team-a",
			fromIDs: []string{us}, wantNS: "team-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := t.Context()
			node := newNode(t, fmt.Sprintf("holder-ns-%d", i))
			existing := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: LeaseName(node.Name), Namespace: DefaultNamespace},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: new(us), AcquireTime: &mt, RenewTime: &mt,
					LeaseDurationSeconds: new(int32(3600))},
			}
			if tc.recorded != nil {
				existing.Annotations = map[string]string{AnnotationHolderNamespace: *tc.recorded}
			}
			g.Expect(k8s.Create(ctx, existing)).To(Succeed())
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), existing) })

			var opts []Option
			if tc.holderNS != "" {
				opts = append(opts, WithHolderNamespace(tc.holderNS))
			}
			m := newManager(t, us, clocktesting.NewFakeClock(t0), opts...)
			var err error
			if tc.fromIDs != nil {
				err = m.RequestLeaseFrom(ctx, node, time.Minute, tc.fromIDs...)
			} else {
				err = m.RequestLeaseFromHolders(ctx, node, time.Minute, tc.fromHolder...)
			}
			after := getLease(g, node)
			if tc.wantHeld {
				var held *AlreadyHeldError
				g.Expect(errors.As(err, &held)).To(BeTrue(), "want *AlreadyHeldError, got %v", err)
				g.Expect(held.Holder).To(Equal(us))
				if tc.recorded != nil {
					g.Expect(held.Namespace).To(Equal(*tc.recorded))
				}
				g.Expect(after.ResourceVersion).To(Equal(existing.ResourceVersion), "a refused request must not write")
				// Nor may it release what is not its own.
				g.Expect(m.InvalidateLease(ctx, node.Name)).To(Succeed())
				g.Expect(getLease(g, node).ResourceVersion).To(Equal(existing.ResourceVersion))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(after.Spec.HolderIdentity).To(HaveValue(Equal(us)), "peers read the same identity")
			if tc.wantNS == "" {
				g.Expect(after.Annotations).NotTo(HaveKey(AnnotationHolderNamespace))
			} else {
				g.Expect(after.Annotations).To(HaveKeyWithValue(AnnotationHolderNamespace, tc.wantNS))
			}
			holder, valid, _, err := m.HolderOf(ctx, node.Name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(valid).To(BeTrue())
			g.Expect(m.Holds(holder)).To(BeTrue())
		})
	}
}
