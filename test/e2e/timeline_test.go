//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// timeline records what happens in the world, in the order the suite sees it: power changes of the
// simulated hosts (heard from the simulators themselves, at once) and what watches report of Nodes, Pods,
// remediation requests and Machines. Scenarios assert on the order and timing of its events, and a failed
// scenario prints the events of its objects.
type timeline struct {
	mu     sync.Mutex
	events []event
}

// event is one thing that happened to one object.
type event struct {
	At time.Time
	// Object is "power/<node>", "node/<name>", "pod/<ns>/<name>", "pcr/<ns>/<name>" or "machine/<ns>/<name>";
	// a host and Node of a workload cluster is "<ns>/<cluster>/<node>" ("power/e2e-fleet/fleet-a/worker-1").
	Object string
	// What happened: "Off", "On" (power); "Ready=Unknown", "taint+<key>", "taint-<key>" (node); "created",
	// "deleting", "deleted" (pod, pcr, machine); "phase=<phase>", "<condition>=<status>" such as
	// "Succeeded=False", "attempt=<n>", "timed-out" (pcr).
	What string
	// Revision is the resourceVersion of the write a watch reported (for a deletion, the deletion's); 0 for
	// power changes. Watches of different kinds deliver at their own pace, so the order in which the suite
	// sees two objects change is not the order in which they were stored; with the suite's single etcd,
	// revisions are.
	Revision int64
}

func (e event) String() string {
	if e.Revision == 0 {
		return fmt.Sprintf("%s  %-36s %s", e.At.Format("15:04:05.000"), e.Object, e.What)
	}
	return fmt.Sprintf("%s  %-36s %s (rv %d)", e.At.Format("15:04:05.000"), e.Object, e.What, e.Revision)
}

func newTimeline() *timeline { return &timeline{} }

func (t *timeline) record(object, what string) { t.recordStored(object, what, nil) }

// recordStored records what a watch reported of obj, with the revision it was stored at.
func (t *timeline) recordStored(object, what string, obj client.Object) {
	var rev int64
	if obj != nil {
		rev, _ = strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, event{At: time.Now(), Object: object, What: what, Revision: rev})
}

// first returns the time of the first event of object that is what, at or after since.
func (t *timeline) first(object, what string, since time.Time) (time.Time, bool) {
	e, ok := t.firstEvent(object, what, since)
	return e.At, ok
}

// firstEvent returns the first event of object that is what, at or after since.
func (t *timeline) firstEvent(object, what string, since time.Time) (event, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.events {
		if e.Object == object && e.What == what && !e.At.Before(since) {
			return e, true
		}
	}
	return event{}, false
}

// at is first for an event that must have happened: the scenario fails, showing the object's events,
// when it did not.
func (t *timeline) at(object, what string, since time.Time) time.Time {
	GinkgoHelper()
	at, ok := t.first(object, what, since)
	Expect(ok).To(BeTrue(), "%s: no %q since %s; its events:\n%s", object, what, since.Format("15:04:05.000"), t.dump(since, object))
	return at
}

// storedBefore fails the scenario unless the first write that made one event was stored before the one
// that made another, both seen since a time. It waits for the watches to report both: the suite can hear
// of the later write first.
func (t *timeline) storedBefore(ctx context.Context, since time.Time, first, then [2]string) {
	GinkgoHelper()
	var a, b int64
	Eventually(func(g Gomega) {
		a, b = t.revision(first, since), t.revision(then, since)
		g.Expect(a).NotTo(BeZero(), "%s %s seen", first[0], first[1])
		g.Expect(b).NotTo(BeZero(), "%s %s seen", then[0], then[1])
	}).WithContext(ctx).WithTimeout(10*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(),
		func() string { return "its events:\n" + t.dump(since, first[0], then[0]) })
	Expect(a).To(BeNumerically("<", b), "%s %s stored before %s %s; events:\n%s", first[0], first[1], then[0], then[1], t.dump(since, first[0], then[0]))
}

// revision is the revision of the first event {object, what} seen since a time; 0 if none was, or if
// its watch did not say (a power change, a deletion learnt from a relist).
func (t *timeline) revision(e [2]string, since time.Time) int64 {
	x, _ := t.firstEvent(e[0], e[1], since)
	return x.Revision
}

// before returns the events of object since a time and before another, oldest first.
func (t *timeline) before(object string, since, until time.Time) []event {
	var out []event
	for _, e := range t.all(object, since) {
		if e.At.Before(until) {
			out = append(out, e)
		}
	}
	return out
}

// all returns the events of object since a time, oldest first.
func (t *timeline) all(object string, since time.Time) []event {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []event
	for _, e := range t.events {
		if e.Object == object && !e.At.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// has reports whether object had an event what since a time.
func (t *timeline) has(object, what string, since time.Time) bool {
	_, ok := t.first(object, what, since)
	return ok
}

// dump renders the events since a time whose object mentions any of names.
func (t *timeline) dump(since time.Time, names ...string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, e := range t.events {
		if e.At.Before(since) {
			continue
		}
		if slices.ContainsFunc(names, func(n string) bool { return strings.Contains(e.Object, n) }) {
			b.WriteString(e.String())
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// watch feeds the timeline from informers over Nodes, Pods, PowerCycleRemediations and Machines. It
// returns once they have synced; they run until ctx is done.
func (t *timeline) watch(ctx context.Context, c ctrlcache.Cache) error {
	handlers := []struct {
		obj client.Object
		h   cache.ResourceEventHandlerFuncs
	}{
		{&corev1.Node{}, cache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) { t.nodeChanged(o.(*corev1.Node), n.(*corev1.Node)) }}},
		{&corev1.Pod{}, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { t.recordStored(podKey(o.(*corev1.Pod)), "created", o.(*corev1.Pod)) },
			UpdateFunc: func(o, n any) { t.podChanged(o.(*corev1.Pod), n.(*corev1.Pod)) },
			DeleteFunc: func(o any) { t.deleted("pod", o) },
		}},
		{&v1alpha1.PowerCycleRemediation{}, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { t.pcrChanged(&v1alpha1.PowerCycleRemediation{}, o.(*v1alpha1.PowerCycleRemediation)) },
			UpdateFunc: func(o, n any) { t.pcrChanged(o.(*v1alpha1.PowerCycleRemediation), n.(*v1alpha1.PowerCycleRemediation)) },
			DeleteFunc: func(o any) { t.deleted("pcr", o) },
		}},
		{&clusterv1.Machine{}, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { t.recordStored(nsKey("machine", o.(client.Object)), "created", o.(client.Object)) },
			UpdateFunc: func(o, n any) { t.deletingOnce("machine", o.(client.Object), n.(client.Object)) },
			DeleteFunc: func(o any) { t.deleted("machine", o) },
		}},
	}
	for _, x := range handlers {
		inf, err := c.GetInformer(ctx, x.obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", x.obj, err)
		}
		if _, err := inf.AddEventHandler(x.h); err != nil {
			return fmt.Errorf("handler for %T: %w", x.obj, err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("timeline informers did not sync: %w", ctx.Err())
	}
	return nil
}

func (t *timeline) nodeChanged(old, cur *corev1.Node) { t.nodeChangedAs("node/"+cur.Name, old, cur) }

// nodeChangedAs records a Node's change under key: "node/<name>" in the management cluster,
// "node/<namespace>/<cluster>/<name>" in a workload cluster.
func (t *timeline) nodeChangedAs(key string, old, cur *corev1.Node) {
	if was, is := nodeReady(old), nodeReady(cur); was != is {
		t.recordStored(key, "Ready="+is, cur)
	}
	if was, is := nodeCondition(old, v1alpha1.NodeConditionPoweredOff), nodeCondition(cur, v1alpha1.NodeConditionPoweredOff); was != is {
		t.recordStored(key, v1alpha1.NodeConditionPoweredOff+"="+is, cur)
	}
	had, has := taintKeys(old), taintKeys(cur)
	for k := range has {
		if !had[k] {
			t.recordStored(key, "taint+"+k, cur)
		}
	}
	for k := range had {
		if !has[k] {
			t.recordStored(key, "taint-"+k, cur)
		}
	}
}

func (t *timeline) podChanged(old, cur *corev1.Pod) {
	if old.DeletionTimestamp == nil && cur.DeletionTimestamp != nil {
		t.recordStored(podKey(cur), "deleting", cur)
	}
	if old.Status.Phase != cur.Status.Phase {
		t.recordStored(podKey(cur), "phase="+string(cur.Status.Phase), cur)
	}
}

func (t *timeline) pcrChanged(old, cur *v1alpha1.PowerCycleRemediation) {
	key := nsKey("pcr", cur)
	if old.UID == "" {
		t.recordStored(key, "created", cur)
	}
	if old.Status.Phase != cur.Status.Phase {
		t.recordStored(key, "phase="+string(cur.Status.Phase), cur)
	}
	if n, m := len(old.Status.Attempts), len(cur.Status.Attempts); m > 0 && (n == 0 || old.Status.Attempts[n-1].Number != cur.Status.Attempts[m-1].Number) {
		t.recordStored(key, fmt.Sprintf("attempt=%d", cur.Status.Attempts[m-1].Number), cur)
	}
	for _, c := range cur.Status.Conditions {
		if was := conditionStatus(old.Status.Conditions, c.Type); was != string(c.Status) {
			t.recordStored(key, c.Type+"="+string(c.Status), cur)
		}
	}
	if _, was := old.Annotations[v1alpha1.AnnotationTimedOut]; !was {
		if _, is := cur.Annotations[v1alpha1.AnnotationTimedOut]; is {
			t.recordStored(key, "timed-out", cur)
		}
	}
	t.deletingOnce("pcr", old, cur)
}

func (t *timeline) deletingOnce(kind string, old, cur client.Object) {
	if old.GetDeletionTimestamp() == nil && cur.GetDeletionTimestamp() != nil {
		t.recordStored(nsKey(kind, cur), "deleting", cur)
	}
}

func (t *timeline) deleted(kind string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// A deletion learnt from a relist: when it was stored is not known.
		if o, ok := d.Obj.(client.Object); ok {
			t.record(nsKey(kind, o), "deleted")
		}
		return
	}
	if o, ok := obj.(client.Object); ok {
		t.recordStored(nsKey(kind, o), "deleted", o)
	}
}

func nsKey(kind string, o client.Object) string {
	return kind + "/" + o.GetNamespace() + "/" + o.GetName()
}

func podKey(p *corev1.Pod) string { return nsKey("pod", p) }

// nodeReady is the status of a Node's Ready condition ("" when it has none).
func nodeReady(n *corev1.Node) string { return nodeCondition(n, string(corev1.NodeReady)) }

// nodeCondition is the status of a Node's condition of this type, "" when it has none.
func nodeCondition(n *corev1.Node, condType string) string {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == condType {
			return string(c.Status)
		}
	}
	return ""
}

func taintKeys(n *corev1.Node) map[string]bool {
	keys := map[string]bool{}
	for _, t := range n.Spec.Taints {
		keys[t.Key] = true
	}
	return keys
}

func conditionStatus(conds []metav1.Condition, condType string) string {
	if c := meta.FindStatusCondition(conds, condType); c != nil {
		return string(c.Status)
	}
	return ""
}
