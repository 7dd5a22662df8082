package monitoring

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/metalheal/metalheal/internal/testenv"
)

// build renders an overlay of config/default with the config/prometheus component, as docs/operations.md
// shows it.
func build(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	root := testenv.RepoRoot()
	overlay := t.TempDir()
	rel := func(dir string) string {
		r, err := filepath.Rel(overlay, filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + rel("config/default") +
		"]\ncomponents: [" + rel("config/prometheus") + "]\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", "--load-restrictor=LoadRestrictionsNone", overlay)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build (run `make tools` first): %v\n%s", err, stderr.String())
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

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// The component, added to config/default: the ServiceMonitor selects the metrics Service by its labels
// and scrapes its HTTPS port with the scraper's token; the binding names the metrics-reader ClusterRole
// config/default ships; the rule and the monitor live in the manager's namespace.
func TestComponentFitsConfigDefault(t *testing.T) {
	g := NewWithT(t)
	objs := build(t)

	svc := find(objs, "Service", "metalheal-manager-metrics-service")
	g.Expect(svc).NotTo(BeNil())
	sm := find(objs, "ServiceMonitor", "metalheal-manager-metrics-monitor")
	g.Expect(sm).NotTo(BeNil())
	g.Expect(sm.GetNamespace()).To(Equal(svc.GetNamespace()))
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	g.Expect(sel).NotTo(BeEmpty())
	for k, v := range sel {
		g.Expect(svc.GetLabels()).To(HaveKeyWithValue(k, v), "the ServiceMonitor's selector")
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	g.Expect(endpoints).To(HaveLen(1))
	ep := endpoints[0].(map[string]any)
	g.Expect(ports).To(ContainElement(HaveKeyWithValue("name", ep["port"])))
	g.Expect(ep).To(HaveKeyWithValue("scheme", "https"))
	g.Expect(ep).To(HaveKeyWithValue("bearerTokenFile", "/var/run/secrets/kubernetes.io/serviceaccount/token"))
	g.Expect(ep).To(HaveKeyWithValue("tlsConfig", HaveKeyWithValue("insecureSkipVerify", true)))

	binding := find(objs, "ClusterRoleBinding", "metalheal-metrics-reader-prometheus")
	g.Expect(binding).NotTo(BeNil())
	role, _, _ := unstructured.NestedString(binding.Object, "roleRef", "name")
	g.Expect(find(objs, "ClusterRole", role)).NotTo(BeNil(), "the binding's ClusterRole %s", role)

	rule := find(objs, "PrometheusRule", "metalheal-alerts")
	g.Expect(rule).NotTo(BeNil())
	g.Expect(rule.GetNamespace()).To(Equal(svc.GetNamespace()))
}

// config/default stays free of the Prometheus Operator's kinds, whose CRDs a cluster may lack.
func TestConfigDefaultHasNoMonitoringKinds(t *testing.T) {
	root := testenv.RepoRoot()
	out, err := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", filepath.Join(root, "config/default")).Output()
	if err != nil {
		t.Fatalf("kustomize build config/default: %v", err)
	}
	NewWithT(t).Expect(string(out)).NotTo(ContainSubstring("monitoring.coreos.com"))
}
