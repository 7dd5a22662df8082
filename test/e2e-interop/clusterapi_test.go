//go:build interop

package interop

import (
	"context"
	"net/url"
	"os"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The stand-in infrastructure provider's cluster and machine kinds (testdata/crds).
var (
	interopClusterGVK         = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "InteropCluster"}
	interopMachineGVK         = interopClusterGVK.GroupVersion().WithKind("InteropMachine")
	interopMachineTemplateGVK = interopClusterGVK.GroupVersion().WithKind("InteropMachineTemplate")
)

// roleLabel tells a cluster's Machines apart for the health checks' selectors.
const roleLabel = "interop.metalheal.io/role"

// workloadCluster creates, in namespace, a Cluster API Cluster whose workload cluster is the world itself
// (its kubeconfig Secret holds the world's admin kubeconfig, as a workload cluster's does), with one
// control-plane Machine on cpNode, and waits for Cluster API to see it initialized: the cluster cache
// connected, the control-plane Machine's nodeRef set by Cluster API's Machine controller. At the end of the
// scenario the Cluster is paused, so that Cluster API does not drain and delete the world's Nodes when
// the Machines go, and everything is removed.
func workloadCluster(ctx context.Context, namespace, name, cpNode string) {
	GinkgoHelper()
	kubeconfig, err := os.ReadFile(h.World.Kubeconfig())
	Expect(err).NotTo(HaveOccurred())
	create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-kubeconfig",
			Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": kubeconfig},
	})
	key := standInCluster(ctx, namespace, name, h.World.RESTConfig().Host)
	machine(ctx, namespace, name, name+"-cp", cpNode, map[string]string{clusterv1.MachineControlPlaneLabel: ""})
	waitControlPlaneInitialized(ctx, key)
}

// standInCluster creates a Cluster API Cluster whose infrastructure is a stand-in InteropCluster,
// provisioned, its control-plane endpoint the API server at apiServer (a URL). The Cluster's kubeconfig
// Secret is the caller's. At the end of the scenario the Cluster is torn down (teardownCluster).
func standInCluster(ctx context.Context, namespace, name, apiServer string) client.ObjectKey {
	GinkgoHelper()
	api, err := url.Parse(apiServer)
	Expect(err).NotTo(HaveOccurred())
	port, err := strconv.Atoi(api.Port())
	Expect(err).NotTo(HaveOccurred())
	infra := object(interopClusterGVK, namespace, name)
	Expect(unstructured.SetNestedMap(infra.Object, map[string]any{"host": api.Hostname(), "port": int64(port)}, "spec", "controlPlaneEndpoint")).To(Succeed())
	Expect(unstructured.SetNestedField(infra.Object, true, "status", "initialization", "provisioned")).To(Succeed())
	create(ctx, infra)
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: interopClusterGVK.Group, Kind: interopClusterGVK.Kind, Name: name}},
	}
	Expect(k8s.Create(ctx, cluster)).To(Succeed())
	DeferCleanup(teardownCluster, client.ObjectKeyFromObject(cluster))
	return client.ObjectKeyFromObject(cluster)
}

// waitControlPlaneInitialized waits for Cluster API to see a Cluster's control plane initialized: its
// cluster cache connected, a control-plane Machine's nodeRef set.
func waitControlPlaneInitialized(ctx context.Context, key client.ObjectKey) {
	GinkgoHelper()
	cluster := &clusterv1.Cluster{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, key, cluster)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(cluster.Status.Conditions, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue(),
			"Cluster API sees the control plane initialized: %v", cluster.Status.Conditions)
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
}

// machine creates a Machine of the cluster on node, a Node of the world itself, through Cluster API's
// real flow: the Node gets a providerID, and machineOf does the rest.
func machine(ctx context.Context, namespace, cluster, name, node string, labels map[string]string) *clusterv1.Machine {
	GinkgoHelper()
	providerID := "interop://" + node
	n := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	if n.Spec.ProviderID == "" {
		patch := client.MergeFrom(n.DeepCopy())
		n.Spec.ProviderID = providerID
		Expect(k8s.Patch(ctx, n, patch)).To(Succeed())
	}
	Expect(n.Spec.ProviderID).To(Equal(providerID), "node %s is used by one Machine only", node)
	return machineOf(ctx, namespace, cluster, name, node, providerID, labels)
}

// machineOf creates a Machine of the cluster for the Node that carries providerID, in whichever cluster
// the Cluster's kubeconfig Secret reaches, through Cluster API's real flow: a stand-in infrastructure
// machine reports it provisioned with that providerID, and Cluster API's Machine controller finds the
// Node through its cluster cache and sets the Machine's nodeRef (waited for).
func machineOf(ctx context.Context, namespace, cluster, name, node, providerID string, labels map[string]string) *clusterv1.Machine {
	GinkgoHelper()
	infra := object(interopMachineGVK, namespace, name)
	Expect(unstructured.SetNestedField(infra.Object, providerID, "spec", "providerID")).To(Succeed())
	Expect(unstructured.SetNestedField(infra.Object, true, "status", "initialization", "provisioned")).To(Succeed())
	Expect(k8s.Create(ctx, infra)).To(Succeed())

	all := map[string]string{clusterv1.ClusterNameLabel: cluster}
	for k, v := range labels {
		all[k] = v
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: all},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster,
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap-" + name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: interopMachineGVK.Group, Kind: interopMachineGVK.Kind, Name: name},
		},
	}
	Expect(k8s.Create(ctx, m)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.NodeRef.Name).To(Equal(node), "Cluster API has not linked Machine %s to its Node yet", name)
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	return m
}

// controlledByMachineSet puts a Machine under a MachineSet of one replica that selects it by its labels:
// Cluster API's MachineSet controller adopts it (a controller owner reference), as it adopts any orphan its
// selector matches.
func controlledByMachineSet(ctx context.Context, m *clusterv1.Machine, selector map[string]string) {
	GinkgoHelper()
	tpl := object(interopMachineTemplateGVK, m.Namespace, m.Name)
	Expect(unstructured.SetNestedMap(tpl.Object, map[string]any{}, "spec", "template", "spec")).To(Succeed())
	Expect(k8s.Create(ctx, tpl)).To(Succeed())
	labels := map[string]string{clusterv1.ClusterNameLabel: m.Spec.ClusterName}
	for k, v := range selector {
		labels[k] = v
	}
	ms := &clusterv1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name},
		Spec: clusterv1.MachineSetSpec{
			ClusterName: m.Spec.ClusterName,
			Replicas:    ptr.To[int32](1),
			Selector:    metav1.LabelSelector{MatchLabels: labels},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec: clusterv1.MachineSpec{
					ClusterName: m.Spec.ClusterName,
					Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap-" + m.Name)},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: interopMachineTemplateGVK.Group, Kind: interopMachineTemplateGVK.Kind, Name: tpl.GetName()},
				},
			},
		},
	}
	Expect(k8s.Create(ctx, ms)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		owner := metav1.GetControllerOf(m)
		g.Expect(owner).NotTo(BeNil(), "Machine %s not adopted yet", m.Name)
		g.Expect(owner.Kind).To(Equal("MachineSet"))
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
}

// teardownCluster pauses a Cluster and its Machines, waits for Cluster API to have seen the pause on every
// Machine, then
// removes the Machines, their infrastructure machines, the Cluster API MachineHealthChecks and the Cluster,
// finalizers included (a paused cluster's objects are not reconciled, deletion included).
func teardownCluster(ctx SpecContext, key client.ObjectKey) {
	cluster := &clusterv1.Cluster{}
	if err := k8s.Get(ctx, key, cluster); apierrors.IsNotFound(err) {
		return
	}
	patch := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Paused = ptr.To(true)
	Expect(k8s.Patch(ctx, cluster, patch)).To(Succeed())
	var machines clusterv1.MachineList
	var sets clusterv1.MachineSetList
	// A Machine (a MachineSet) is reconciled when it changes, not when its Cluster is paused: pause each.
	Expect(k8s.List(ctx, &machines, client.InNamespace(key.Namespace))).To(Succeed())
	Expect(k8s.List(ctx, &sets, client.InNamespace(key.Namespace))).To(Succeed())
	var paused []client.Object
	for i := range machines.Items {
		paused = append(paused, &machines.Items[i])
	}
	for i := range sets.Items {
		paused = append(paused, &sets.Items[i])
	}
	for _, o := range paused {
		patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
		o.SetAnnotations(map[string]string{clusterv1.PausedAnnotation: ""})
		Expect(k8s.Patch(ctx, o, patch)).To(Succeed())
	}
	Eventually(func(g Gomega) {
		g.Expect(k8s.List(ctx, &machines, client.InNamespace(key.Namespace))).To(Succeed())
		for _, m := range machines.Items {
			g.Expect(meta.IsStatusConditionTrue(m.Status.Conditions, clusterv1.PausedCondition)).To(BeTrue(), "machine %s not paused yet", m.Name)
		}
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	var mhcs clusterv1.MachineHealthCheckList
	Expect(k8s.List(ctx, &mhcs, client.InNamespace(key.Namespace))).To(Succeed())
	infras, err := listOf(ctx, interopMachineGVK, key.Namespace)
	Expect(err).NotTo(HaveOccurred())
	templates, err := listOf(ctx, interopMachineTemplateGVK, key.Namespace)
	Expect(err).NotTo(HaveOccurred())
	infras = append(infras, templates...)
	var objs []client.Object
	for i := range sets.Items {
		objs = append(objs, &sets.Items[i])
	}
	for i := range machines.Items {
		objs = append(objs, &machines.Items[i])
	}
	for i := range mhcs.Items {
		objs = append(objs, &mhcs.Items[i])
	}
	for i := range infras {
		objs = append(objs, &infras[i])
	}
	objs = append(objs, cluster)
	for _, o := range objs {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, o))).To(Succeed())
		Eventually(func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return client.IgnoreNotFound(err)
			}
			if len(o.GetFinalizers()) == 0 {
				return nil
			}
			patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
			o.SetFinalizers(nil)
			return client.IgnoreNotFound(k8s.Patch(ctx, o, patch))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	}
}

// clusterAPIHealthCheck creates a Cluster API MachineHealthCheck (v1beta2) of the cluster's Machines
// labelled role, unhealthy after `unhealthy` of Ready=Unknown or False, remediated through templateRef.
func clusterAPIHealthCheck(ctx context.Context, namespace, cluster, name, role string, templateRef clusterv1.MachineHealthCheckRemediationTemplateReference) *clusterv1.MachineHealthCheck {
	GinkgoHelper()
	timeout := ptr.To(int32(unhealthy.Seconds()))
	mhc := &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: cluster,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{roleLabel: role}},
			Checks: clusterv1.MachineHealthCheckChecks{
				UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: timeout},
					{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: timeout},
				},
			},
			Remediation: clusterv1.MachineHealthCheckRemediation{TemplateRef: templateRef},
		},
	}
	create(ctx, mhc)
	return mhc
}

// machineCondition is a Machine's v1beta2 condition of a type, or nil.
func machineCondition(ctx context.Context, key client.ObjectKey, condType string) (*metav1.Condition, error) {
	m := &clusterv1.Machine{}
	if err := k8s.Get(ctx, key, m); err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(m.Status.Conditions, condType), nil
}
