//go:build interop

package interop

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// nodePool hands out worker nodes: each scenario takes fresh ones and labels them as its group.
type nodePool struct {
	mu   sync.Mutex
	next int
	size int
}

// take labels the next n workers with group and returns their names.
func (p *nodePool) take(ctx context.Context, group string, n int) []string {
	GinkgoHelper()
	p.mu.Lock()
	first := p.next + 1
	p.next += n
	last := p.next
	p.mu.Unlock()
	Expect(last).To(BeNumerically("<=", p.size), "the node pool is exhausted: raise workers")
	var names []string
	for i := first; i <= last; i++ {
		name := harness.NodeName(i)
		node := &corev1.Node{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		patch := client.MergeFrom(node.DeepCopy())
		node.Labels[groupLabel] = group
		Expect(k8s.Patch(ctx, node, patch)).To(Succeed())
		names = append(names, name)
	}
	return names
}

// expectSettled waits for the end state of healthy nodes: Ready, none of the remediator's taints, host
// powered on, kubelet running, no node lease, no PowerCycleRemediation for it.
func expectSettled(ctx context.Context, nodes ...string) {
	GinkgoHelper()
	for _, name := range nodes {
		Eventually(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
			g.Expect(nodeReady(node)).To(Equal(corev1.ConditionTrue), "node %s is not Ready", name)
			g.Expect(taintKeys(node)).NotTo(HaveKey(v1alpha1.TaintRemediation), "node %s keeps the remediation taint", name)
			g.Expect(taintKeys(node)).NotTo(HaveKey(v1alpha1.TaintOutOfService), "node %s keeps the out-of-service taint", name)
			power, err := h.Mock.PowerState(harness.SystemID(name))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(power).To(Equal(redfishmock.PowerOn), "the host of %s is not powered on", name)
			state, err := h.Sim.State(name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(state).To(Equal(nodesim.StateRunning), "the kubelet of %s is not running", name)
			g.Expect(nodeLease(ctx, name)).To(BeNil(), "node %s still has a maintenance lease", name)
			g.Expect(powerCycleRemediationsOf(ctx, name)).To(BeEmpty(), "node %s still has remediation requests", name)
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	}
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
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

// hasTaint reports whether a node has a taint with key.
func hasTaint(ctx context.Context, node, key string) (bool, error) {
	n := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return false, err
	}
	return taintKeys(n)[key], nil
}

// nodeLease is a node's maintenance lease, or nil.
func nodeLease(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: leaseNS, Name: "node-" + node}, lease)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return lease, err
}

// leaseHolder is who holds a node's lease, "" when there is none.
func leaseHolder(ctx context.Context, node string) (string, error) {
	l, err := nodeLease(ctx, node)
	if err != nil || l == nil {
		return "", err
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), nil
}

// powerCycleRemediationsOf lists the PowerCycleRemediations, in any namespace, acting on or naming a node.
func powerCycleRemediationsOf(ctx context.Context, node string) ([]v1alpha1.PowerCycleRemediation, error) {
	var list v1alpha1.PowerCycleRemediationList
	if err := k8s.List(ctx, &list); err != nil {
		return nil, err
	}
	var of []v1alpha1.PowerCycleRemediation
	for _, p := range list.Items {
		if p.Status.NodeName == node || p.Annotations[v1alpha1.AnnotationNodeName] == node || p.Name == node {
			of = append(of, p)
		}
	}
	return of, nil
}

// resets lists the Redfish resets a node's system accepted, oldest first.
func resets(node string) []string {
	GinkgoHelper()
	r, err := h.Mock.Resets(harness.SystemID(node))
	Expect(err).NotTo(HaveOccurred())
	return r
}

func hostPower(node string) (redfishmock.PowerState, error) {
	return h.Mock.PowerState(harness.SystemID(node))
}

// breakNode gives a node's host a fault and, at the end of the scenario, repairs it: the fault cleared,
// the host powered on (the administrator's repair), and the node back to its settled state.
func breakNode(ctx context.Context, node string, f nodesim.Fault) {
	GinkgoHelper()
	Expect(h.Sim.InjectFault(node, f)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(h.Sim.ClearFault(node)).To(Succeed())
		if p, err := hostPower(node); err == nil && p != redfishmock.PowerOn {
			Expect(h.Mock.SetPowerState(harness.SystemID(node), redfishmock.PowerOn)).To(Succeed())
		}
	})
}

// waitNotReady waits for the node lifecycle controller to mark a broken node Ready=Unknown.
func waitNotReady(ctx context.Context, node string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		n := &corev1.Node{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
		g.Expect(nodeReady(n)).NotTo(Equal(corev1.ConditionTrue))
	}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
}

// powerCycleTemplate creates a PowerCycleRemediationTemplate with the world's short timings and deletes it
// afterwards. annotations are the template's own (e.g. medik8s' multiple-templates-support).
func powerCycleTemplate(ctx context.Context, namespace, name string, spec v1alpha1.PowerCycleRemediationSpec, annotations map[string]string) *v1alpha1.PowerCycleRemediationTemplate {
	GinkgoHelper()
	t := &v1alpha1.PowerCycleRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: annotations},
		Spec:       v1alpha1.PowerCycleRemediationTemplateSpec{Template: v1alpha1.PowerCycleRemediationTemplateResource{Spec: spec}},
	}
	Expect(k8s.Create(ctx, t)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, t))).To(Succeed()) })
	return t
}

// reboot is a template spec with the world's timings: power-off confirmed within 10s, the node Ready within
// 20s of power-on, retried after 1s.
func reboot(opts ...func(*v1alpha1.PowerCycleRemediationSpec)) v1alpha1.PowerCycleRemediationSpec {
	s := v1alpha1.PowerCycleRemediationSpec{
		Strategy:               v1alpha1.StrategyReboot,
		PowerOffTimeoutSeconds: 10,
		PowerOnTimeoutSeconds:  20,
		RetryBackoff: &v1alpha1.RetryBackoff{
			Initial: metav1.Duration{Duration: time.Second},
			Max:     metav1.Duration{Duration: 2 * time.Second},
		},
		OutOfServiceTaint: ptr.To(true),
	}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// create creates an object as the administrator and deletes it at the end of the scenario. A deletion
// refused for a while is retried: medik8s' webhook refuses to delete a NodeHealthCheck until it has seen
// its nodes healthy again (the scenario's repairs run first, being registered later).
func create(ctx context.Context, obj client.Object) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, obj)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Eventually(func() error { return client.IgnoreNotFound(k8s.Delete(ctx, obj)) }).
			WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	})
}

// object returns an empty unstructured object of a kind, named.
func object(gvk schema.GroupVersionKind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// listOf lists the objects of a kind in a namespace ("" for all).
func listOf(ctx context.Context, gvk schema.GroupVersionKind, namespace string) ([]unstructured.Unstructured, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := k8s.List(ctx, l, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// eventsAbout lists the reasons and messages of the events recorded for an object.
func eventsAbout(ctx context.Context, namespace, name string) []string {
	var list corev1.EventList
	if err := k8s.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name {
			out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
		}
	}
	return out
}
