package engine

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

// TestRecentWrites: a request just created is added to its target's until the cache shows it; one just
// deleted reads as deleting while the cache still shows it; both are forgotten after RecentWriteTTL.
func TestRecentWrites(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	created := Request{Ref: Ref{Kind: "PowerCycleRemediation", Namespace: "ns", Name: "m"}, TemplateName: "reboot", Created: now}
	gone := Ref{Kind: "PowerCycleRemediation", Namespace: "ns", Name: "old"}
	var rw RecentWrites
	rw.Created("uid-1", "m", created, now)
	rw.Deleted("uid-1", "old", gone, now)

	byTarget := map[string][]Request{}
	rw.AddCreated("uid-1", byTarget, now.Add(time.Second))
	g.Expect(byTarget).To(Equal(map[string][]Request{"m": {created}}), "created, not shown yet: added; the deletion is not")
	other := map[string][]Request{}
	rw.AddCreated("uid-2", other, now.Add(time.Second))
	g.Expect(other).To(BeEmpty(), "another check's writes are not its")
	g.Expect(rw.Seen(gone, now.Add(time.Second))).To(BeTrue(), "deleted a moment ago, still shown: deleting")

	g.Expect(rw.Seen(created.Ref, now.Add(2*time.Second))).To(BeFalse())
	byTarget = map[string][]Request{}
	rw.AddCreated("uid-1", byTarget, now.Add(2*time.Second))
	g.Expect(byTarget).To(BeEmpty(), "shown by the cache now: forgotten")

	g.Expect(rw.Seen(gone, now.Add(RecentWriteTTL+time.Second))).To(BeFalse(), "a deletion is remembered for RecentWriteTTL")
	rw.Created("uid-1", "m", created, now)
	byTarget = map[string][]Request{}
	rw.AddCreated("uid-1", byTarget, now.Add(RecentWriteTTL+time.Second))
	g.Expect(byTarget).To(BeEmpty(), "and so is a creation")

	rw.Created("uid-1", "m", created, now)
	ForgetDeleted(handler.Funcs{}, &rw, schema.GroupVersionKind{Kind: "PowerCycleRemediation"}).Delete(t.Context(),
		event.DeleteEvent{Object: &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "m", "namespace": "ns"}}}}, nil)
	byTarget = map[string][]Request{}
	rw.AddCreated("uid-1", byTarget, now)
	g.Expect(byTarget).To(BeEmpty(), "its deletion seen by the cache: gone, to be made again")
	rw.Deleted("uid-1", "m", created.Ref, now)
	ForgetDeleted(handler.Funcs{}, &rw, schema.GroupVersionKind{Kind: "PowerCycleRemediation"}).Delete(t.Context(),
		event.DeleteEvent{Object: &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "m", "namespace": "ns"}}}}, nil)
	g.Expect(rw.Seen(created.Ref, now)).To(BeTrue(), "a deletion of its own is kept: a cache behind shows the request still")

	for i := range 3 {
		rw.Deleted("uid-1", "old", Ref{Name: fmt.Sprint(i)}, now)
	}
	rw.Deleted("uid-1", "old", Ref{Name: "later"}, now.Add(2*RecentWriteTTL))
	g.Expect(rw.objs).To(HaveLen(1), "writes older than RecentWriteTTL are dropped as new ones come: a deletion the cache never shows again is not kept")

	var none *RecentWrites
	none.Created("uid-1", "m", created, now)
	g.Expect(none.Seen(created.Ref, now)).To(BeFalse(), "a nil one remembers nothing")
}
