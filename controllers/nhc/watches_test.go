package nhc

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/pkg/leases"
)

func TestLeaseChangedOnlyOnHolderChanges(t *testing.T) {
	lease := func(ns, holder string, renew time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-w1"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: &metav1.MicroTime{Time: renew}}}
	}
	g := NewWithT(t)
	p := engine.LeaseChanged(leaseNS)
	g.Expect(p.Update(crevent.UpdateEvent{ObjectOld: lease(leaseNS, "a", u0), ObjectNew: lease(leaseNS, "a", u0.Add(time.Minute))})).To(BeFalse(), "a renewal")
	g.Expect(p.Update(crevent.UpdateEvent{ObjectOld: lease(leaseNS, "a", u0), ObjectNew: lease(leaseNS, "b", u0)})).To(BeTrue())
	g.Expect(p.Create(crevent.CreateEvent{Object: lease(leaseNS, "a", u0)})).To(BeTrue())
	g.Expect(p.Delete(crevent.DeleteEvent{Object: lease(leaseNS, "a", u0)})).To(BeTrue())
	g.Expect(p.Create(crevent.CreateEvent{Object: lease("kube-node-lease", "w1", u0)})).To(BeFalse(), "kubelet heartbeats")
}

// The map functions find the checks a Node or a template event concerns (against the API server).
var _ = Describe("Map functions", func() {
	It("find the checks a Node, lease or template event concerns", func(ctx SpecContext) {
		w := newWorld(ctx)
		ref := w.pcTemplate(ctx, "pc")
		selecting := w.check(ctx, "selecting", &ref)
		other := w.check(ctx, "other", nil, func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": w.pool + "-x"}}
			c.Spec.RemediationTemplate = &v1alpha1.TemplateReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: ref.Namespace, Name: "else"}
		})
		n := w.node(ctx, "w1", corev1.ConditionTrue, t0)
		req := func(c *v1alpha1.NodeHealthCheck) reconcile.Request {
			return reconcile.Request{NamespacedName: types.NamespacedName{Name: c.Name}}
		}
		Expect(w.r.checksForNode(ctx, n)).To(Equal([]reconcile.Request{req(selecting)}))
		leaseOf := func(n *corev1.Node) *coordinationv1.Lease {
			return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leases.LeaseName(n.Name), Namespace: leaseNS}}
		}
		Expect(w.r.checksForLease(ctx, leaseOf(n))).To(BeEmpty(), "a Ready Node no check remembers: its lease does not matter")
		sick := w.node(ctx, "w2", corev1.ConditionFalse, t0)
		Expect(w.r.checksForLease(ctx, leaseOf(sick))).To(Equal([]reconcile.Request{req(selecting)}), "not Ready: it matters to the checks that select it")
		cp := w.node(ctx, "cp1", corev1.ConditionTrue, t0, labelControlPlane, "")
		Expect(w.r.checksForLease(ctx, leaseOf(cp))).To(ContainElements(req(selecting), req(other)), "a control-plane Node's lease matters to every check")

		// A check that remembers the Node hears of it even when its selector no longer matches.
		other.Status.UnhealthyNodes = []v1alpha1.UnhealthyNode{{Name: n.Name, RemediationProgress: v1alpha1.RemediationProgress{SkipReason: SkipExcluded}}}
		Expect(k8s.Status().Update(ctx, other)).To(Succeed())
		Expect(w.r.checksForNode(ctx, n)).To(ConsistOf(req(selecting), req(other)))
		Expect(w.r.checksForLease(ctx, leaseOf(n))).To(Equal([]reconcile.Request{req(other)}))

		tpl := &unstructured.Unstructured{}
		tpl.SetAPIVersion(ref.APIVersion)
		tpl.SetKind(ref.Kind)
		tpl.SetNamespace(ref.Namespace)
		tpl.SetName(ref.Name)
		Expect(w.r.checksUsingTemplate(ctx, tpl)).To(Equal([]reconcile.Request{req(selecting)}))
	})
})

// BenchmarkDecide5000Nodes is decide's cost for a 5,000-node check with 50 unhealthy Nodes: what every
// reconcile of a large check pays besides reading the cache.
func BenchmarkDecide5000Nodes(b *testing.B) {
	var nodes []*corev1.Node
	for i := range 5000 {
		status := corev1.ConditionTrue
		if i%100 == 0 {
			status = corev1.ConditionUnknown
		}
		n := unitNode(fmt.Sprintf("n%04d", i), status, u0)
		n.Status.Conditions = append(n.Status.Conditions,
			corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
			corev1.NodeCondition{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse})
		nodes = append(nodes, n)
	}
	in := unitObserved(unitCheck(), nodes...)
	now := u0.Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		p := decide(in, now)
		if len(creates(p)) != 50 {
			b.Fatalf("%d creates", len(creates(p)))
		}
	}
}
