//go:build interop

package interop

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
)

var _ = Describe("Cluster API's MachineHealthCheck", func() {
	It("drives metalheal: a Machine whose Node stops heartbeating is power-cycled, and Cluster API ends the request once the Node is Ready (scenario 1)", func(ctx SpecContext) {
		nodes := pool.take(ctx, "capi", 2)
		cpNode, worker := nodes[0], nodes[1]
		const cluster = "interop"
		workloadCluster(ctx, capiNamespace, cluster, cpNode)
		m := machine(ctx, capiNamespace, cluster, "worker-a", worker, map[string]string{roleLabel: "worker"})
		powerCycleTemplate(ctx, capiNamespace, "power-cycle", reboot(), nil)
		mhc := clusterAPIHealthCheck(ctx, capiNamespace, cluster, "workers", "worker", clusterv1.MachineHealthCheckRemediationTemplateReference{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediationTemplate", Name: "power-cycle"})

		By("Cluster API's check sees its Machine healthy (it can read metalheal's template kind and list its requests)")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), mhc)).To(Succeed())
			g.Expect(mhc.Status.ExpectedMachines).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(mhc.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(1)))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())

		By("the node's kubelet hangs")
		breakNode(ctx, worker, nodesim.FaultTransient)

		By("Cluster API creates the request, named after the Machine and owned by it")
		key := client.ObjectKey{Namespace: capiNamespace, Name: m.Name}
		pcr := &v1alpha1.PowerCycleRemediation{}
		Eventually(func() error { return k8s.Get(ctx, key, pcr) }).
			WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
		Expect(pcr.OwnerReferences).To(ConsistOf(And(
			HaveField("Kind", "Machine"), HaveField("Name", m.Name), HaveField("UID", m.UID))))
		Expect(pcr.Annotations).NotTo(HaveKey(v1alpha1.AnnotationNodeName), "Cluster API names no node: metalheal follows the Machine's nodeRef")

		By("metalheal power-cycles the host; the node comes back; Cluster API deletes the request; the finalizer is done")
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, key, pcr)
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			g.Expect(err).To(HaveOccurred(), "the request is still there: phase %q, finalizers %v", pcr.Status.Phase, pcr.Finalizers)
		}).WithContext(ctx).WithTimeout(remedyWait).WithPolling(poll).Should(Succeed())
		Expect(resets(worker)).To(Equal([]string{"ForceOff", "On"}))
		expectSettled(ctx, worker)

		By("the Machine's HealthCheckSucceeded is True again")
		Eventually(func(g Gomega) {
			c, err := machineCondition(ctx, client.ObjectKeyFromObject(m), clusterv1.MachineHealthCheckSucceededCondition)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		Expect(resets(cpNode)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))
})

// metal3Remediation is metal3's request kind, and its template's (testdata/crds).
var (
	metal3RemediationGVK         = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta1", Kind: "Metal3Remediation"}
	metal3RemediationTemplateGVK = metal3RemediationGVK.GroupVersion().WithKind("Metal3RemediationTemplate")
)

var _ = Describe("metalheal's MachineHealthCheck beside Cluster API's", func() {
	It("creates the same Metal3Remediation as Cluster API's, but where docs/interop.md says why (scenario 5)", func(ctx SpecContext) {
		nodes := pool.take(ctx, "metal3", 3)
		cpNode, oursNode, theirsNode := nodes[0], nodes[1], nodes[2]
		const cluster = "metal3"
		workloadCluster(ctx, metal3Namespace, cluster, cpNode)
		ours := machine(ctx, metal3Namespace, cluster, "worker-ours", oursNode, map[string]string{roleLabel: "ours"})
		theirs := machine(ctx, metal3Namespace, cluster, "worker-theirs", theirsNode, map[string]string{roleLabel: "theirs"})
		By("each Machine is controlled by a MachineSet: metalheal's check remediates only Machines something would replace")
		controlledByMachineSet(ctx, ours, map[string]string{roleLabel: "ours"})
		controlledByMachineSet(ctx, theirs, map[string]string{roleLabel: "theirs"})

		tpl := object(metal3RemediationTemplateGVK, metal3Namespace, "metal3-reboot")
		Expect(unstructured.SetNestedMap(tpl.Object, map[string]any{"type": "Reboot", "retryLimit": int64(1), "timeout": "5m0s"},
			"spec", "template", "spec", "strategy")).To(Succeed())
		create(ctx, tpl)

		By("metalheal may read the workload cluster's kubeconfig Secret (a Role the admin grants, docs/machinehealthcheck.md)")
		kubeconfigReader(ctx, metal3Namespace, cluster)

		By("metalheal's MachineHealthCheck checks one Machine, Cluster API's the other, both with metal3's template")
		create(ctx, &v1alpha1.MachineHealthCheck{
			ObjectMeta: metav1.ObjectMeta{Namespace: metal3Namespace, Name: "ours"},
			Spec: v1alpha1.MachineHealthCheckSpec{
				ClusterName: cluster,
				Selector:    metav1.LabelSelector{MatchLabels: map[string]string{roleLabel: "ours"}},
				UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
					{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: unhealthy}},
					{Type: "Ready", Status: "False", Timeout: metav1.Duration{Duration: unhealthy}},
				},
				MaxUnhealthy: ptrIntOrString(intstr.FromString("100%")),
				RemediationTemplate: &v1alpha1.TemplateReference{
					APIVersion: metal3RemediationTemplateGVK.GroupVersion().String(), Kind: metal3RemediationTemplateGVK.Kind, Name: tpl.GetName()},
			},
		})
		clusterAPIHealthCheck(ctx, metal3Namespace, cluster, "theirs", "theirs", clusterv1.MachineHealthCheckRemediationTemplateReference{
			APIVersion: metal3RemediationTemplateGVK.GroupVersion().String(), Kind: metal3RemediationTemplateGVK.Kind, Name: tpl.GetName()})

		By("both Machines' kubelets hang; no metal3 runs, so each request stays until its Machine is healthy")
		breakNode(ctx, oursNode, nodesim.FaultTransient)
		breakNode(ctx, theirsNode, nodesim.FaultTransient)
		var mine, cluster_api *unstructured.Unstructured
		Eventually(func(g Gomega) {
			mine = object(metal3RemediationGVK, metal3Namespace, ours.Name)
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
			cluster_api = object(metal3RemediationGVK, metal3Namespace, theirs.Name)
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster_api), cluster_api)).To(Succeed())
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())

		By("the two requests, compared field by field")
		diffs := compareRequests(mine, cluster_api, map[string]string{
			ours.Name: "<machine>", theirs.Name: "<machine>", oursNode: "<node>", theirsNode: "<node>",
			string(ours.UID): "<machine-uid>", string(theirs.UID): "<machine-uid>",
		})
		AddReportEntry("Metal3Remediation: metalheal's MachineHealthCheck vs Cluster API's", diffs.String())
		Expect(diffs.paths()).To(ConsistOf(metal3Differences), "the differences docs/interop.md explains:\n%s", diffs)

		By("the Machines' hosts recover: each checker deletes its own request")
		Expect(h.Sim.ClearFault(oursNode)).To(Succeed())
		Expect(h.Sim.ClearFault(theirsNode)).To(Succeed())
		Eventually(func(g Gomega) {
			left, err := listOf(ctx, metal3RemediationGVK, metal3Namespace)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(left).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		expectSettled(ctx, nodes...)
		Expect(resets(oursNode)).To(BeEmpty(), "no PowerCycleRemediation was involved")
	}, SpecTimeout(scenarioMax))
})

// metal3Differences are the paths where metalheal's MachineHealthCheck's Metal3Remediation differs from
// Cluster API's, every one explained in docs/interop.md ("What differs in the requests").
var metal3Differences = []string{
	"metadata.annotations[remediation.medik8s.io/node-name]",
	"metadata.annotations[remediation.medik8s.io/template-name]",
	"metadata.ownerReferences[remediation.metalheal.io/v1alpha1 MachineHealthCheck]",
}

// kubeconfigReader lets the metalheal manager read the workload cluster's kubeconfig Secret: metalheal's
// MachineHealthCheck reads the cluster's Nodes through it, and the shipped RBAC reads Secrets only in the
// manager's own namespace.
func kubeconfigReader(ctx context.Context, namespace, cluster string) {
	GinkgoHelper()
	create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "metalheal-kubeconfig-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"},
			ResourceNames: []string{cluster + "-kubeconfig"}, Verbs: []string{"get"}}},
	})
	create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "metalheal-kubeconfig-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "metalheal-kubeconfig-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: harness.Namespace, Name: "metalheal-manager"}},
	})
}

func ptrIntOrString(v intstr.IntOrString) *intstr.IntOrString { return &v }
