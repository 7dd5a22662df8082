package mhc

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capierrors "sigs.k8s.io/cluster-api/api/deprecated/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
)

// machineOpt shapes a test Machine before (spec, metadata) and after (status) it is created.
type machineOpt struct {
	meta   func(*clusterv1.Machine)
	status func(*clusterv1.Machine)
}

func withLabels(kv ...string) machineOpt {
	return machineOpt{meta: func(m *clusterv1.Machine) {
		for i := 0; i+1 < len(kv); i += 2 {
			m.Labels[kv[i]] = kv[i+1]
		}
	}}
}

func withAnnotation(key string) machineOpt {
	return machineOpt{meta: func(m *clusterv1.Machine) { metav1.SetMetaDataAnnotation(&m.ObjectMeta, key, "") }}
}

func withCluster(name string) machineOpt {
	return machineOpt{meta: func(m *clusterv1.Machine) { m.Spec.ClusterName = name }}
}

// withoutOwner leaves the Machine without a controller.
var withoutOwner = machineOpt{meta: func(m *clusterv1.Machine) { m.OwnerReferences = nil }}

func withNodeRef(node string) machineOpt {
	return machineOpt{status: func(m *clusterv1.Machine) { m.Status.NodeRef.Name = node }}
}

var withTerminalFailure = machineOpt{status: func(m *clusterv1.Machine) {
	m.Status.Deprecated = &clusterv1.MachineDeprecatedStatus{V1Beta1: &clusterv1.MachineV1Beta1DeprecatedStatus{
		FailureReason: ptr.To(capierrors.CreateMachineError), FailureMessage: ptr.To("the instance failed to boot")}}
}}

// createMachine creates a Machine labelled pool=a in cluster c1, controlled by a MachineSet.
func (w *world) createMachine(ctx context.Context, name string, opts ...machineOpt) *clusterv1.Machine {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: map[string]string{"pool": "a"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet",
				Name: "ms", UID: "ms-uid", Controller: ptr.To(true)}}},
		Spec: clusterv1.MachineSpec{
			ClusterName: "c1",
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io",
				Kind: "FakeMachine", Name: name},
		},
	}
	for _, o := range opts {
		if o.meta != nil {
			o.meta(m)
		}
	}
	Expect(k8s.Create(ctx, m)).To(Succeed())
	withStatus := false
	for _, o := range opts {
		if o.status != nil {
			o.status(m)
			withStatus = true
		}
	}
	if withStatus {
		Expect(k8s.Status().Update(ctx, m)).To(Succeed())
	}
	return m
}

// createNode creates a Node in c (the management or the workload cluster) whose Ready condition has had
// status for the given time.
func (w *world) createNode(ctx context.Context, c client.Client, name string, status corev1.ConditionStatus, since time.Duration) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(c.Create(ctx, n)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(c.Delete(ctx, n))).To(Succeed()) })
	w.setReady(ctx, c, n, status, since)
	return n
}

func (w *world) setReady(ctx context.Context, c client.Client, n *corev1.Node, status corev1.ConditionStatus, since time.Duration) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test",
		LastHeartbeatTime: metav1.NewTime(w.clock.Now()), LastTransitionTime: metav1.NewTime(w.clock.Now().Add(-since))}}
	Expect(c.Status().Update(ctx, n)).To(Succeed())
}

// nodeName makes a Node name unique to the test (Nodes are cluster-scoped).
func (w *world) nodeName(name string) string { return w.ns + "-" + name }

// createCheck creates a MachineHealthCheck selecting pool=a with the user guide's conditions (Ready
// Unknown or False for 300s).
func (w *world) createCheck(ctx context.Context, name string, mutate ...func(*v1alpha1.MachineHealthCheck)) *v1alpha1.MachineHealthCheck {
	mhc := &v1alpha1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: v1alpha1.MachineHealthCheckSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
				{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: 300 * time.Second}},
				{Type: "Ready", Status: "False", Timeout: metav1.Duration{Duration: 300 * time.Second}},
			},
		},
	}
	for _, f := range mutate {
		f(mhc)
	}
	Expect(k8s.Create(ctx, mhc)).To(Succeed())
	// Gone with the test: the suite shares one API server without a garbage collector, and a check left
	// remediating a control-plane Machine would hold every later test's control plane busy.
	DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, mhc))).To(Succeed()) })
	return mhc
}

// reconcile runs one reconcile of the check and returns its result.
func (w *world) reconcile(ctx context.Context, name string) ctrl.Result {
	res, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: w.ns, Name: name}})
	Expect(err).NotTo(HaveOccurred())
	return res
}

func (w *world) machine(ctx context.Context, name string) *clusterv1.Machine {
	m := &clusterv1.Machine{}
	Expect(k8s.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, m)).To(Succeed())
	return m
}

func (w *world) check(ctx context.Context, name string) *v1alpha1.MachineHealthCheck {
	mhc := &v1alpha1.MachineHealthCheck{}
	Expect(k8s.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, mhc)).To(Succeed())
	return mhc
}

// powerCycleRemediations lists the namespace's PowerCycleRemediations.
func (w *world) powerCycleRemediations(ctx context.Context) []unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("remediation.metalheal.io/v1alpha1")
	list.SetKind("PowerCycleRemediationList")
	Expect(k8s.List(ctx, list, client.InNamespace(w.ns))).To(Succeed())
	return list.Items
}

// createTemplate creates a PowerCycleRemediationTemplate with the given strategy.
func (w *world) createTemplate(ctx context.Context, name, strategy string) {
	tpl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "remediation.metalheal.io/v1alpha1",
		"kind":       "PowerCycleRemediationTemplate",
		"metadata":   map[string]any{"name": name, "namespace": w.ns},
		"spec":       map[string]any{"template": map[string]any{"spec": map[string]any{"strategy": strategy}}},
	}}
	Expect(k8s.Create(ctx, tpl)).To(Succeed())
}

// setRequestCondition sets a remediation request's status.conditions to one condition, as its remediator
// would.
func (w *world) setRequestCondition(ctx context.Context, request *unstructured.Unstructured, typ, status, reason string) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(request), request)).To(Succeed())
	Expect(unstructured.SetNestedSlice(request.Object, []any{map[string]any{"type": typ, "status": status, "reason": reason,
		"message": "", "lastTransitionTime": w.clock.Now().UTC().Format(time.RFC3339)}}, "status", "conditions")).To(Succeed())
	Expect(k8s.Status().Update(ctx, request)).To(Succeed())
}

func templateRef(name string) v1alpha1.TemplateReference {
	return v1alpha1.TemplateReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediationTemplate", Name: name}
}

// condition returns the Machine's condition of type t, or nil.
func condition(m *clusterv1.Machine, t string) *metav1.Condition {
	return meta.FindStatusCondition(m.Status.Conditions, t)
}

// haveCondition matches a *metav1.Condition with the given status and reason.
func haveCondition(status metav1.ConditionStatus, reason string) OmegaMatcher {
	return And(Not(BeNil()), HaveField("Status", status), HaveField("Reason", reason))
}

func machineNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

func reconcileRequest(ns, name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// newCluster is a Cluster that is not paused (Cluster API requires a spec).
func newCluster(ns, name string) *clusterv1.Cluster {
	return &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(false)}}
}
