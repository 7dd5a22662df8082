package engine

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/kindwatch"
)

// TestNodeUpdatesIgnoresHeartbeats: a Node update reaches a check (of either kind) only when it can change
// a decision.
func TestNodeUpdatesIgnoresHeartbeats(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"pool": "a"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(t0), LastHeartbeatTime: metav1.NewTime(t0)}}}}
	for name, tc := range map[string]struct {
		change func(*corev1.Node)
		want   bool
	}{
		"heartbeat only": {change: func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0.Add(5 * time.Minute))
			n.ResourceVersion = "2"
		}},
		"ready status changes": {want: true, change: func(n *corev1.Node) {
			n.Status.Conditions[0].Status = corev1.ConditionUnknown
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(time.Minute))
		}},
		"a condition appears": {want: true, change: func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue})
		}},
		"labels change":   {want: true, change: func(n *corev1.Node) { n.Labels[v1alpha1.LabelExcludeFromRemediation] = "true" }},
		"deletion starts": {want: true, change: func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{Time: t0} }},
		"confirmed healthy": {want: true, change: func(n *corev1.Node) {
			n.Annotations = map[string]string{v1alpha1.AnnotationConfirmedHealthy: ""}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			n := base.DeepCopy()
			tc.change(n)
			NewWithT(t).Expect(NodeUpdates().Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n})).To(Equal(tc.want))
		})
	}
}

// TestChecksOwning: a request's event reaches the metalheal check of its kind that owns it (in the
// request's namespace for a MachineHealthCheck), never medik8s' check of the same kind.
func TestChecksOwning(t *testing.T) {
	emr := &unstructured.Unstructured{}
	emr.SetNamespace("ns")
	emr.SetOwnerReferences([]metav1.OwnerReference{
		{APIVersion: "v1", Kind: "Node", Name: "w1", UID: "n"},
		{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "m", UID: "m-uid"},
		{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "NodeHealthCheck", Name: "workers", UID: "c"},
		{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "MachineHealthCheck", Name: "check", UID: "mhc-uid"},
		{APIVersion: "remediation.medik8s.io/v1alpha1", Kind: "NodeHealthCheck", Name: "theirs", UID: "m"},
	})
	g := NewWithT(t)
	g.Expect(ChecksOwning("NodeHealthCheck", false)(t.Context(), emr)).To(Equal([]reconcile.Request{{NamespacedName: types.NamespacedName{Name: "workers"}}}))
	g.Expect(ChecksOwning("MachineHealthCheck", true)(t.Context(), emr)).To(Equal(
		[]reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "check"}}}))
}

// TestPending: a check waits for the first sync of a kind it names, until the earliest give-up; synced
// and failed kinds keep it waiting for nothing.
func TestPending(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	a, b, c := schema.GroupVersionKind{Kind: "A"}, schema.GroupVersionKind{Kind: "B"}, schema.GroupVersionKind{Kind: "C"}
	g := NewWithT(t)
	g.Expect(Pending(nil)).To(Succeed())
	g.Expect(Pending(map[schema.GroupVersionKind]kindwatch.Status{a: {State: kindwatch.Synced}, b: {State: kindwatch.Failed}})).To(Succeed())
	err := Pending(map[schema.GroupVersionKind]kindwatch.Status{a: {State: kindwatch.Pending, Until: t0.Add(time.Minute)},
		b: {State: kindwatch.Pending, Until: t0}, c: {State: kindwatch.Synced}})
	g.Expect(err).To(Equal(&WatchPendingError{Until: t0}))
}

// TestRequestChanged: a remediation request's update reaches its check (of either kind) only when it changes
// what the check reads of it; the remediator's progress reports are dropped. The same holds for a request
// read as unstructured and for one read from the typed informer of a kind this manager serves.
func TestRequestChanged(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	cond := func(condType, status, reason string) any {
		return map[string]any{"type": condType, "status": status, "reason": reason, "message": "", "lastTransitionTime": "2030-01-01T12:00:00Z"}
	}
	setConditions := func(u *unstructured.Unstructured, conds ...any) {
		_ = unstructured.SetNestedSlice(u.Object, conds, "status", "conditions")
	}
	base := &unstructured.Unstructured{}
	base.SetAPIVersion("remediation.metalheal.io/v1alpha1")
	base.SetKind("PowerCycleRemediation")
	base.SetNamespace("ns")
	base.SetName("w1")
	base.SetResourceVersion("1")
	base.SetAnnotations(map[string]string{"remediation.medik8s.io/node-name": "w1"})
	base.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "w1", UID: "n"}})
	_ = unstructured.SetNestedField(base.Object, "PoweringOff", "status", "phase")
	setConditions(base, cond("Processing", "True", "PoweringOff"), cond("Succeeded", "Unknown", "PoweringOff"))

	tests := []struct {
		name   string
		change func(*unstructured.Unstructured)
		want   bool
	}{
		{name: "the remediator moves to its next phase", change: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "PoweredOff", "status", "phase")
			_ = unstructured.SetNestedField(u.Object, "Off", "status", "powerState")
			u.SetResourceVersion("2")
		}},
		{name: "the remediator counts a retry", change: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(1), "status", "retryCount")
		}},
		{name: "Succeeded and Processing keep their status, with new reasons", change: func(u *unstructured.Unstructured) {
			setConditions(u, cond("Processing", "True", "PoweringOn"), cond("Succeeded", "Unknown", "PoweringOn"))
		}},
		{name: "another condition appears", change: func(u *unstructured.Unstructured) {
			setConditions(u, cond("Processing", "True", "PoweringOff"), cond("Succeeded", "Unknown", "PoweringOff"),
				cond("PowerOffRequested", "True", "Sent"))
		}},
		{name: "the remediator adds its finalizer", change: func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"x"}) }},
		{name: "its labels change", change: func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"a": "b"}) }},
		{name: "it succeeds", want: true, change: func(u *unstructured.Unstructured) {
			setConditions(u, cond("Processing", "True", "Succeeded"), cond("Succeeded", "True", "Succeeded"))
		}},
		{name: "it gives up", want: true, change: func(u *unstructured.Unstructured) {
			setConditions(u, cond("Processing", "True", "Failed"), cond("Succeeded", "False", "Failed"))
		}},
		{name: "it hands the host over (Processing=False, Succeeded unchanged)", want: true, change: func(u *unstructured.Unstructured) {
			setConditions(u, cond("Processing", "False", "HandedOver"), cond("Succeeded", "Unknown", "PoweringOff"))
		}},
		{name: "its conditions are gone", want: true, change: func(u *unstructured.Unstructured) { setConditions(u) }},
		{name: "it is marked timed out", want: true, change: func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{"remediation.medik8s.io/node-name": "w1", "remediation.medik8s.io/nhc-timed-out": "2030-01-01T12:00:00Z"})
		}},
		{name: "its owners change", want: true, change: func(u *unstructured.Unstructured) { u.SetOwnerReferences(nil) }},
		{name: "its deletion starts", want: true, change: func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&metav1.Time{Time: t0}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			u := base.DeepCopy()
			tt.change(u)
			g.Expect(RequestChanged().Update(event.UpdateEvent{ObjectOld: base, ObjectNew: u})).To(Equal(tt.want), "unstructured")
			typed := func(u *unstructured.Unstructured) *v1alpha1.PowerCycleRemediation {
				p := &v1alpha1.PowerCycleRemediation{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p)).To(Succeed())
				return p
			}
			g.Expect(RequestChanged().Update(event.UpdateEvent{ObjectOld: typed(base), ObjectNew: typed(u)})).To(Equal(tt.want), "typed")
		})
	}
	g := NewWithT(t)
	g.Expect(RequestChanged().Create(event.CreateEvent{Object: base})).To(BeTrue(), "a creation")
	g.Expect(RequestChanged().Delete(event.DeleteEvent{Object: base})).To(BeTrue(), "a deletion")
	g.Expect(RequestChanged().Generic(event.GenericEvent{Object: base})).To(BeFalse(), "a generic event")
}

// TestRequestKind: a kind this manager serves, reporting its conditions, is watched and read typed (the
// remediator's informer); any other kind as unstructured objects.
func TestRequestKind(t *testing.T) {
	scheme := runtime.NewScheme()
	NewWithT(t).Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	NewWithT(t).Expect(corev1.AddToScheme(scheme)).To(Succeed())
	pcr := v1alpha1.GroupVersion.WithKind("PowerCycleRemediation")
	for name, tc := range map[string]struct {
		scheme *runtime.Scheme
		gvk    schema.GroupVersionKind
		want   client.Object
	}{
		"metalheal's own kind":            {scheme: scheme, gvk: pcr, want: &v1alpha1.PowerCycleRemediation{}},
		"another remediator's kind":       {scheme: scheme, gvk: schema.GroupVersionKind{Group: "x.io", Version: "v1", Kind: "FooRemediation"}},
		"a known kind without conditions": {scheme: scheme, gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap")},
		"no scheme":                       {gvk: pcr},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			k := RequestKind(tc.scheme, tc.gvk, "MachineHealthCheck", true, nil)
			g.Expect(k.GVK).To(Equal(tc.gvk))
			if tc.want == nil {
				g.Expect(k.Object).To(BeNil())
			} else {
				g.Expect(k.Object).To(BeAssignableToTypeOf(tc.want))
			}
			g.Expect(k.Predicates).To(HaveLen(1))
			g.Expect(k.Verbs).To(ContainElements("list", "watch", "create", "delete"))
		})
	}
}

// TestCheckAndPeerChanged: a check looks again at its own spec, deletion and annotations, never at its status
// writes; its peers look again at its spec, its deletion, and of its status only what the overlapping rule
// reads (PeerStatus: Disabled, the targets it is remediating).
func TestCheckAndPeerChanged(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	// The stand-in of an adapter's PeerStatus: the NodeHealthCheck's in-flight Nodes.
	peer := func(obj client.Object) PeerStatus {
		c := obj.(*v1alpha1.NodeHealthCheck)
		st := PeerStatus{Disabled: meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionDisabled), Remediating: map[string]bool{}}
		for n := range c.Status.InFlightRemediations {
			st.Remediating[n] = true
		}
		return st
	}
	base := &v1alpha1.NodeHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", UID: "u", Generation: 3, ResourceVersion: "7", Labels: map[string]string{"team": "a"},
			Annotations: map[string]string{"example.com/owner": "ops"}},
		Status: v1alpha1.NodeHealthCheckStatus{ObservedNodes: ptr.To(int32(3)), HealthyNodes: ptr.To(int32(2)), Phase: v1alpha1.PhaseRemediating,
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionFalse, Reason: "Enabled",
				LastTransitionTime: metav1.NewTime(t0)}},
			InFlightRemediations: map[string]metav1.Time{"w1": metav1.NewTime(t0)},
			UnhealthyNodes:       []v1alpha1.UnhealthyNode{{Name: "w1"}, {Name: "w2", RemediationProgress: v1alpha1.RemediationProgress{SkipReason: "ControlPlaneBusy"}}},
			LastUpdateTime:       &metav1.Time{Time: t0}},
	}
	tests := []struct {
		name       string
		change     func(*v1alpha1.NodeHealthCheck)
		self, peer bool
	}{
		{name: "its own pass writes its counts, phase and lastUpdateTime", change: func(c *v1alpha1.NodeHealthCheck) {
			c.ResourceVersion = "8"
			c.Status.HealthyNodes, c.Status.Phase, c.Status.LastUpdateTime = ptr.To(int32(1)), v1alpha1.PhaseEnabled, &metav1.Time{Time: t0.Add(time.Second)}
		}},
		{name: "a target's skip changes", change: func(c *v1alpha1.NodeHealthCheck) {
			c.Status.UnhealthyNodes = []v1alpha1.UnhealthyNode{{Name: "w1"}, {Name: "w2", RemediationProgress: v1alpha1.RemediationProgress{SkipReason: "LeaseHeldByOther"}}}
		}},
		{name: "the Disabled condition's reason changes, not its status", change: func(c *v1alpha1.NodeHealthCheck) {
			c.Status.Conditions[0].Reason, c.Status.Conditions[0].ObservedGeneration = "Other", 3
		}},
		{name: "an in-flight remediation's start time is rewritten", change: func(c *v1alpha1.NodeHealthCheck) {
			c.Status.InFlightRemediations = map[string]metav1.Time{"w1": metav1.NewTime(t0.Add(time.Minute))}
		}},
		{name: "its labels change", change: func(c *v1alpha1.NodeHealthCheck) { c.Labels = map[string]string{"team": "b"} }},
		{name: "a finalizer is added", change: func(c *v1alpha1.NodeHealthCheck) { c.Finalizers = []string{"example.com/f"} }},
		{name: "its annotations change (a MachineHealthCheck is paused by one)", self: true, change: func(c *v1alpha1.NodeHealthCheck) {
			c.Annotations = map[string]string{"example.com/owner": "ops", "cluster.x-k8s.io/paused": ""}
		}},
		{name: "its spec changes (a new generation)", self: true, peer: true, change: func(c *v1alpha1.NodeHealthCheck) { c.Generation = 4 }},
		{name: "its deletion starts", self: true, peer: true, change: func(c *v1alpha1.NodeHealthCheck) {
			c.DeletionTimestamp = &metav1.Time{Time: t0}
		}},
		{name: "it is disabled", peer: true, change: func(c *v1alpha1.NodeHealthCheck) {
			c.Status.Conditions[0].Status = metav1.ConditionTrue
		}},
		{name: "it starts remediating another target", peer: true, change: func(c *v1alpha1.NodeHealthCheck) {
			c.Status.InFlightRemediations = map[string]metav1.Time{"w1": metav1.NewTime(t0), "w3": metav1.NewTime(t0)}
		}},
		{name: "it ends a remediation", peer: true, change: func(c *v1alpha1.NodeHealthCheck) { c.Status.InFlightRemediations = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := base.DeepCopy()
			tt.change(c)
			e := event.UpdateEvent{ObjectOld: base, ObjectNew: c}
			g.Expect(CheckChanged().Update(e)).To(Equal(tt.self), "the check itself")
			g.Expect(PeerChanged(peer).Update(e)).To(Equal(tt.peer), "its peers")
		})
	}
	g := NewWithT(t)
	for name, p := range map[string]predicate.Funcs{"CheckChanged": CheckChanged(), "PeerChanged": PeerChanged(peer)} {
		g.Expect(p.Create(event.CreateEvent{Object: base})).To(BeTrue(), name+": a creation")
		g.Expect(p.Delete(event.DeleteEvent{Object: base})).To(BeTrue(), name+": a deletion")
		g.Expect(p.Generic(event.GenericEvent{Object: base})).To(BeFalse(), name+": a generic event")
	}
}

// TestPeersOf: a check's change reaches every other check of its kind, in its namespace for a namespaced
// kind, and not the check itself.
func TestPeersOf(t *testing.T) {
	scheme := runtime.NewScheme()
	NewWithT(t).Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	nhc := func(name string) *v1alpha1.NodeHealthCheck {
		return &v1alpha1.NodeHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}}
	}
	mhc := func(ns, name string) *v1alpha1.MachineHealthCheck {
		return &v1alpha1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(nhc("a"), nhc("b"), nhc("c"), mhc("ns1", "a"), mhc("ns1", "b"), mhc("ns2", "c")).Build()
	key := func(ns, name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	}
	g := NewWithT(t)
	nhcs := CheckKind{Object: &v1alpha1.NodeHealthCheck{}, NewList: func() client.ObjectList { return &v1alpha1.NodeHealthCheckList{} }}
	g.Expect(PeersOf(c, nhcs)(t.Context(), nhc("a"))).To(ConsistOf(key("", "b"), key("", "c")))
	g.Expect(PeersOf(c, nhcs)(t.Context(), nhc("gone"))).To(ConsistOf(key("", "a"), key("", "b"), key("", "c")), "a deleted check's peers")
	mhcs := CheckKind{Object: &v1alpha1.MachineHealthCheck{}, NewList: func() client.ObjectList { return &v1alpha1.MachineHealthCheckList{} },
		Namespaced: true}
	g.Expect(PeersOf(c, mhcs)(t.Context(), mhc("ns1", "a"))).To(ConsistOf(key("ns1", "b")))
	g.Expect(PeersOf(c, mhcs)(t.Context(), mhc("ns2", "c"))).To(BeEmpty())
}
