package mhc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
)

// The shipped RBAC, as `kubectl apply -k config/cluster-api` installs it (config/default plus the
// kubeconfig-readers component), and nothing hand-written: the controller runs as the manager's
// ServiceAccount (impersonated) against the management cluster. A Cluster in the component's namespace
// ("default") is checked through its workload cluster; a Cluster elsewhere makes the check say which Role
// it lacks.
var _ = Describe("The kubeconfig-readers component", Ordered, func() {
	const manager = "system:serviceaccount:metalheal-system:metalheal-manager"
	var sa client.Client
	var saDisco Discovery

	BeforeAll(func(ctx SpecContext) {
		applyRBAC(ctx, kustomizeBuild("config/cluster-api"))
		cfg := rest.CopyConfig(mgmtCfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: manager}
		var err error
		sa, err = client.New(cfg, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		saDisco, err = discovery.NewDiscoveryClientForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
	})

	// clusterCheck creates, as an admin would, a Cluster with its kubeconfig Secret, an unhealthy workload
	// Node, its Machine, a template and a check naming the Cluster, in namespace ns.
	clusterCheck := func(ctx context.Context, ns string) string {
		suffix := utilrand.String(5)
		cluster := "wl-" + suffix
		Expect(k8s.Create(ctx, newCluster(ns, cluster))).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cluster + "-kubeconfig", Namespace: ns},
			Data: map[string][]byte{"value": workloadEnv.KubeConfig}})).To(Succeed())
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rbac-" + suffix}}
		Expect(workloadK8s.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(workloadK8s.Delete(ctx, node))).To(Succeed()) })
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "Test",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}
		Expect(workloadK8s.Status().Update(ctx, node)).To(Succeed())
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m-" + suffix, Namespace: ns, Labels: map[string]string{"pool": suffix},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Name: "ms", UID: "ms-uid", Controller: ptr.To(true)}}},
			Spec: clusterv1.MachineSpec{ClusterName: cluster, Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("b")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "FakeMachine", Name: "m"}}}
		Expect(k8s.Create(ctx, m)).To(Succeed())
		m.Status.NodeRef.Name = node.Name
		Expect(k8s.Status().Update(ctx, m)).To(Succeed())
		createTemplateIn(ctx, k8s, ns, "reboot-"+suffix)
		Expect(k8s.Create(ctx, &v1alpha1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "check-" + suffix, Namespace: ns},
			Spec: v1alpha1.MachineHealthCheckSpec{
				ClusterName:         cluster,
				Selector:            metav1.LabelSelector{MatchLabels: map[string]string{"pool": suffix}},
				RemediationTemplate: ptr.To(templateRef("reboot-" + suffix)),
				UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
					{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: 300 * time.Second}}},
			}})).To(Succeed())
		return suffix
	}
	reconcileAs := func(ctx context.Context, ns, suffix string, clusterNamespaces []string) (*v1alpha1.MachineHealthCheck, error) {
		r, err := New(Options{Client: sa, Reader: sa, APIReader: sa, Recorder: newRecorder(), Discovery: saDisco,
			Clock: clocktesting.NewFakeClock(time.Now()), ClusterNamespaces: clusterNamespaces})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { r.remotes.StopAll() })
		_, err = r.Reconcile(ctx, reconcileRequest(ns, "check-"+suffix))
		got := &v1alpha1.MachineHealthCheck{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "check-" + suffix}, got)).To(Succeed())
		return got, err
	}

	It("lets a check on a Cluster in the component's namespace remediate through the workload cluster", func(ctx SpecContext) {
		suffix := clusterCheck(ctx, "default")
		got, err := reconcileAs(ctx, "default", suffix, []string{"default"})
		Expect(err).NotTo(HaveOccurred())
		Expect(meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionDisabled)).To(BeFalse())
		Expect(listRequests(ctx, k8s, "default")).To(ContainElement(HaveField("Object", HaveKeyWithValue("metadata",
			HaveKeyWithValue("name", "m-"+suffix)))))
	})

	DescribeTable("a check on a Cluster elsewhere names the Role it needs",
		func(ctx SpecContext, clusterNamespaces []string, why string) {
			ns := createNamespace(ctx, k8s)
			suffix := clusterCheck(ctx, ns)
			got, err := reconcileAs(ctx, ns, suffix, clusterNamespaces)
			Expect(err).NotTo(HaveOccurred())
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionDisabled)
			Expect(c).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonKubeconfigNotReadable)))
			Expect(c.Message).To(And(ContainSubstring(why), ContainSubstring("Role in namespace "+ns),
				ContainSubstring(`apiGroups [""], resources [secrets], verbs [get]`)))
			Expect(c.Message).NotTo(ContainSubstring(string(workloadEnv.KubeConfig)))
			Expect(listRequests(ctx, k8s, ns)).To(BeEmpty())
		},
		Entry("refused by the API server (no --cluster-namespaces)", nil, "may not read Secret"),
		Entry("not in --cluster-namespaces (nothing asked)", []string{"default"}, "not in --cluster-namespaces"),
	)
})

// kustomizeBuild renders a kustomization of the repository with ./bin/kustomize.
func kustomizeBuild(dir string) []byte {
	root := testenv.RepoRoot()
	cmd := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", filepath.Join(root, dir))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	Expect(cmd.Run()).To(Succeed(), stderr.String())
	return out.Bytes()
}

// applyRBAC creates the rendered Namespaces, ServiceAccounts and RBAC objects, and does what the
// controller manager's clusterrole-aggregation controller would (envtest runs none): fills each
// aggregated ClusterRole with the rules of the ClusterRoles its selectors match.
func applyRBAC(ctx context.Context, rendered []byte) {
	kinds := map[string]bool{"Namespace": true, "ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			Expect(err).NotTo(HaveOccurred())
		}
		if !kinds[u.GetKind()] {
			continue
		}
		if err := k8s.Create(ctx, u); !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	}
	var roles rbacv1.ClusterRoleList
	Expect(k8s.List(ctx, &roles)).To(Succeed())
	for i := range roles.Items {
		agg := &roles.Items[i]
		if agg.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range agg.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			Expect(err).NotTo(HaveOccurred())
			for _, r := range roles.Items {
				if r.Name != agg.Name && s.Matches(labels.Set(r.Labels)) {
					rules = append(rules, r.Rules...)
				}
			}
		}
		agg.Rules = rules
		Expect(k8s.Update(ctx, agg)).To(Succeed())
	}
}
