package manifests_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/testenv"
)

func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	root := testenv.RepoRoot()
	cmd := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", filepath.Join(root, dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s (run `make tools` first): %v\n%s", dir, err, stderr.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func TestDefaultDeploysOnARealAPIServer(t *testing.T) {
	g := NewWithT(t)
	// No CRDs preinstalled: the rendered manifests must bring their own.
	env, cfg, err := testenv.Start(testenv.Options{SkipCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())

	objs := render(t, "config/default")
	kinds := map[string]int{}
	for _, obj := range objs {
		kinds[obj.GetKind()]++
		g.Expect(c.Patch(context.Background(), obj, client.Apply, client.FieldOwner("test"), client.ForceOwnership)).
			To(Succeed(), "applying %s %s", obj.GetKind(), obj.GetName())
	}
	g.Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", 5))
	g.Expect(kinds).To(HaveKeyWithValue("Deployment", 1))
	g.Expect(kinds).To(HaveKeyWithValue("Namespace", 2), "metalheal-system and the lease namespace")
	g.Expect(kinds).To(HaveKeyWithValue("FlowSchema", 1), "the leader election's")
	g.Expect(kinds).To(HaveKeyWithValue("Service", 1), "the metrics Service")

	var manager appsv1.Deployment
	var metrics corev1.Service
	var schemas []flowcontrolv1.FlowSchema
	for _, obj := range objs {
		switch obj.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			g.Expect(convert(obj, &d)).To(Succeed())
			manager = d
			pod := d.Spec.Template.Spec
			g.Expect(pod.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()), "the manager runs as non-root")
			g.Expect(pod.Containers[0].SecurityContext.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()), "read-only root filesystem")
			g.Expect(pod.Containers[0].Args).To(ContainElement("--leader-elect"))
			g.Expect(pod.Containers[0].Args).To(ContainElement(HavePrefix("--metrics-bind-address=:8443")))
			g.Expect(pod.Containers[0].Args).NotTo(ContainElement(HavePrefix("--metrics-secure")), "metrics over HTTPS (the default)")
			g.Expect(pod.Containers[0].Ports).To(ContainElement(And(HaveField("Name", "metrics"), HaveField("ContainerPort", BeEquivalentTo(8443)))))
		case "Service":
			g.Expect(convert(obj, &metrics)).To(Succeed())
		case "ClusterRole":
			var r rbacv1.ClusterRole
			g.Expect(convert(obj, &r)).To(Succeed())
			for _, rule := range r.Rules {
				g.Expect(rule.Resources).NotTo(ContainElement("secrets"), "ClusterRole %s must not grant Secrets cluster-wide", r.Name)
				g.Expect(rule.Resources).NotTo(ContainElement("leases"), "ClusterRole %s must not grant Leases cluster-wide", r.Name)
				g.Expect(rule.Resources).NotTo(ContainElement("namespaces"), "ClusterRole %s: the manager creates no namespace", r.Name)
			}
			// What reaches the built-in admin and edit roles only reads requests and BMCs.
			if r.Labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true" || r.Labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true" {
				for _, rule := range r.Rules {
					if slices.ContainsFunc(rule.Resources, func(res string) bool { return res == "powercycleremediations" || res == "bmcs" }) {
						g.Expect(rule.Verbs).To(ConsistOf("get", "list", "watch"), "ClusterRole %s gives namespace editors %v", r.Name, rule.Resources)
					}
				}
			}
		case "Role":
			var r rbacv1.Role
			g.Expect(convert(obj, &r)).To(Succeed())
			if r.Namespace == "medik8s-leases" {
				g.Expect(r.Rules).To(HaveExactElements(HaveField("Resources", ConsistOf("leases"))), "only Leases in the lease namespace")
			} else {
				g.Expect(r.Namespace).To(Equal("metalheal-system"))
			}
		case "FlowSchema":
			var fs flowcontrolv1.FlowSchema
			g.Expect(convert(obj, &fs)).To(Succeed())
			g.Expect(fs.Namespace).To(BeEmpty(), "FlowSchema %s is cluster-scoped", fs.Name)
			schemas = append(schemas, fs)
		}
	}
	// kustomize does not rewrite FlowSchema subjects: they must name the manager's service account as
	// deployed.
	for _, fs := range schemas {
		for _, rule := range fs.Spec.Rules {
			g.Expect(rule.Subjects).To(ConsistOf(HaveField("ServiceAccount", HaveValue(Equal(flowcontrolv1.ServiceAccountSubject{
				Namespace: manager.Namespace, Name: manager.Spec.Template.Spec.ServiceAccountName,
			})))), "FlowSchema %s names the manager's service account", fs.Name)
		}
	}
	// The metrics Service reaches the manager's metrics port.
	g.Expect(metrics.Namespace).To(Equal(manager.Namespace))
	g.Expect(metrics.Spec.Selector).To(Equal(manager.Spec.Selector.MatchLabels))
	g.Expect(metrics.Spec.Ports).To(ConsistOf(HaveField("TargetPort.StrVal", "metrics")))
	// Secrets are readable only in the manager's namespace.
	var roles rbacv1.RoleList
	g.Expect(c.List(context.Background(), &roles, client.InNamespace("metalheal-system"))).To(Succeed())
	g.Expect(roles.Items).To(ContainElement(HaveField("Rules", ContainElement(HaveField("Resources", ContainElement("secrets"))))))
	for _, name := range []string{"metalheal-system", "medik8s-leases"} {
		var ns corev1.Namespace
		g.Expect(c.Get(context.Background(), client.ObjectKey{Name: name}, &ns)).To(Succeed())
	}
	// The node leases are writable only in the lease namespace, by a Role there bound to the manager.
	var bindings rbacv1.RoleBindingList
	g.Expect(c.List(context.Background(), &bindings, client.InNamespace("medik8s-leases"))).To(Succeed())
	g.Expect(bindings.Items).To(ConsistOf(And(
		HaveField("RoleRef.Kind", "Role"),
		HaveField("Subjects", ConsistOf(And(HaveField("Name", manager.Spec.Template.Spec.ServiceAccountName),
			HaveField("Namespace", manager.Namespace)))))))
}

func TestSamplesRender(t *testing.T) {
	objs := render(t, "config/samples")
	NewWithT(t).Expect(len(objs)).To(BeNumerically(">=", 6))
}

func convert(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}
