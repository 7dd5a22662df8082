package engine

import (
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// TestStatusWrites: a pass with nothing new writes nothing, unless the copy it decided from is not the one
// the check's last status write left: that "unchanged" status is a change back from what is stored, and is
// written (refused as a conflict while the copy is older, which makes the pass look again).
func TestStatusWrites(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	scheme := runtime.NewScheme()
	g.Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	check := &v1alpha1.NodeHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "workers", UID: "uid-1"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(check).WithStatusSubresource(check).Build()
	read := func() *v1alpha1.NodeHealthCheck {
		got := &v1alpha1.NodeHealthCheck{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(check), got)).To(Succeed())
		return got
	}
	var s StatusWrites

	first := read()
	g.Expect(s.Write(ctx, c, first.DeepCopy(), false)).To(Succeed())
	g.Expect(read().ResourceVersion).To(Equal(first.ResourceVersion), "nothing new, no write of ours before: nothing written")

	written := first.DeepCopy()
	written.Status.Phase = v1alpha1.PhaseRemediating
	g.Expect(s.Write(ctx, c, written, true)).To(Succeed())
	g.Expect(read().Status.Phase).To(Equal(v1alpha1.PhaseRemediating))

	g.Expect(s.Write(ctx, c, written.DeepCopy(), false)).To(Succeed())
	g.Expect(read().ResourceVersion).To(Equal(written.ResourceVersion), "the copy the last write left, nothing new: nothing written")

	err := s.Write(ctx, c, first.DeepCopy(), false)
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(),
		"a pass that decided from the copy before that write, and found its status unchanged, writes it back: %v", err)
	g.Expect(read().Status.Phase).To(Equal(v1alpha1.PhaseRemediating), "refused: the pass looks again from a fresher copy")

	again := first.DeepCopy()
	again.UID = "uid-2"
	g.Expect(s.behind(again)).To(BeFalse(), "a check made again under the name is another object, not behind the one before")

	s.Forget(client.ObjectKeyFromObject(check))
	g.Expect(s.last).To(BeEmpty(), "a check forgotten by its name leaves nothing remembered")
	g.Expect(s.Write(ctx, c, first.DeepCopy(), false)).To(Succeed(), "a check forgotten is as one never written")
}
