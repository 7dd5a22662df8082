package harness_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/world"
)

// A fresh world with Cluster API v1.10 (v1beta1 only) and a Cluster whose kubeconfig Secret names the
// world itself (a self-hosted management cluster), set up as README and docs/machinehealthcheck.md say: the RBAC of config/cluster-api
// (config/default plus the kubeconfig-readers component, for namespace "default") and the manager flags
// its Deployment carries. Nothing else is granted. A Machine whose Node hangs is power-cycled through a
// MachineHealthCheck's PowerCycleRemediation and comes back; the check then deletes its request.
func TestMachineHealthCheckRemediatesUnderClusterAPIConfig(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	crds, err := testenv.ClusterAPIV1Beta1CRDs()
	g.Expect(err).NotTo(HaveOccurred())
	h, err := harness.Start(ctx, harness.Options{Workers: 1, Log: os.Stderr, Kustomization: "config/cluster-api",
		World: world.Options{ExtraCRDPaths: []string{crds}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(h.Stop)

	m, err := h.StartManager(ctx, deploymentArgs(g, "--cluster-namespaces=", "--remediation-namespaces=")...)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Kill)

	const ns = "default"
	node := harness.NodeName(1)
	kubeconfig, err := os.ReadFile(h.World.Kubeconfig())
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range []client.Object{
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
			"metadata": map[string]any{"name": "wl", "namespace": ns}, "spec": map[string]any{}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wl-kubeconfig", Namespace: ns}, Data: map[string][]byte{"value": kubeconfig}},
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "remediation.metalheal.io/v1alpha1", "kind": "PowerCycleRemediationTemplate",
			"metadata": map[string]any{"name": "power-cycle", "namespace": ns},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"strategy": "reboot"}}}}},
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "remediation.metalheal.io/v1alpha1", "kind": "MachineHealthCheck",
			"metadata": map[string]any{"name": "workers", "namespace": ns},
			"spec": map[string]any{"clusterName": "wl", "selector": map[string]any{"matchLabels": map[string]any{"pool": "workers"}},
				"unhealthyConditions": []any{map[string]any{"type": "Ready", "status": "Unknown", "timeout": "5s"}},
				"remediationTemplate": map[string]any{"apiVersion": "remediation.metalheal.io/v1alpha1",
					"kind": "PowerCycleRemediationTemplate", "name": "power-cycle"}}}},
	} {
		g.Expect(h.Client.Create(ctx, o)).To(Succeed())
	}
	// The cluster is self-hosted (its kubeconfig Secret names itself): its Node carries its Machine's
	// providerID, as Cluster API's Machine controller sees it; the remediator refuses a Machine's request
	// when the Node of that name here does not (NodeNotInThisCluster).
	const providerID = "metal3://workers-1"
	n := &corev1.Node{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	patch := client.MergeFrom(n.DeepCopy())
	n.Spec.ProviderID = providerID
	g.Expect(h.Client.Patch(ctx, n, patch)).To(Succeed())
	// A real owner: the garbage collector would delete a Machine whose owner does not exist.
	infra := map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Machine", "name": "workers-1"}
	machineSet := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet",
		"metadata": map[string]any{"name": "workers", "namespace": ns},
		"spec": map[string]any{"clusterName": "wl", "selector": map[string]any{"matchLabels": map[string]any{"pool": "workers"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"pool": "workers"}},
				"spec": map[string]any{"clusterName": "wl", "bootstrap": map[string]any{"dataSecretName": "b"}, "infrastructureRef": infra}}}}}
	g.Expect(h.Client.Create(ctx, machineSet)).To(Succeed())
	machine := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
		"metadata": map[string]any{"name": "workers-1", "namespace": ns, "labels": map[string]any{"pool": "workers"},
			"ownerReferences": []any{map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet", "name": "workers",
				"uid": string(machineSet.GetUID()), "controller": true}}},
		"spec": map[string]any{"clusterName": "wl", "bootstrap": map[string]any{"dataSecretName": "b"}, "infrastructureRef": infra,
			"providerID": providerID},
	}}
	g.Expect(h.Client.Create(ctx, machine)).To(Succeed())
	g.Expect(unstructured.SetNestedMap(machine.Object, map[string]any{"kind": "Node", "apiVersion": "v1", "name": node}, "status", "nodeRef")).To(Succeed())
	g.Expect(h.Client.Status().Update(ctx, machine)).To(Succeed())

	t.Log("the Machine's Node hangs: the check asks for a power cycle")
	g.Expect(h.Sim.InjectFault(node, nodesim.FaultTransient)).To(Succeed())
	g.Eventually(func(g Gomega) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("remediation.metalheal.io/v1alpha1")
		list.SetKind("PowerCycleRemediationList")
		g.Expect(h.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(ContainElement(HaveField("Object", HaveKeyWithValue("metadata", HaveKeyWithValue("name", "workers-1")))))
	}).WithTimeout(90*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "see %s", m.LogPath)

	t.Log("the host is power-cycled, the Node comes back, the check deletes its request")
	g.Eventually(func(g Gomega) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("remediation.metalheal.io/v1alpha1")
		list.SetKind("PowerCycleRemediationList")
		g.Expect(h.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
		state, err := h.Sim.State(node)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(state).To(Equal(nodesim.StateRunning))
	}).WithTimeout(120*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "see %s", m.LogPath)

	logs, err := os.ReadFile(m.LogPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(logs)).NotTo(ContainSubstring("forbidden"), "config/cluster-api lacks a permission the manager uses")
}

// deploymentArgs returns the manager arguments of config/cluster-api's Deployment that start with one of
// the prefixes: the harness runs the manager as a process, with the flags the deployment would give it.
func deploymentArgs(g Gomega, prefixes ...string) []string {
	root := testenv.RepoRoot()
	cmd := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", filepath.Join(root, "config", "cluster-api"))
	var out bytes.Buffer
	cmd.Stdout = &out
	g.Expect(cmd.Run()).To(Succeed())
	var args []string
	for _, line := range strings.Split(out.String(), "\n") {
		arg := strings.TrimPrefix(strings.TrimSpace(line), "- ")
		for _, p := range prefixes {
			if strings.HasPrefix(arg, p) {
				args = append(args, arg)
			}
		}
	}
	g.Expect(args).To(HaveLen(len(prefixes)), "config/cluster-api's Deployment sets %v", prefixes)
	return args
}
