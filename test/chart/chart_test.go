package chart_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/metalheal/metalheal/internal/testenv"
)

const (
	release          = "metalheal"
	releaseNamespace = "metalheal-system"
	leaseNamespace   = "medik8s-leases"
)

var chartDir = filepath.Join(testenv.RepoRoot(), "charts", "metalheal")

// tool runs a binary of ./bin and returns its standard output. A missing binary fails the test: `make
// test` builds it, and a skipped test would let the chart drift unseen.
func tool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	bin := filepath.Join(testenv.RepoRoot(), "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make tools` (make test does): %v", bin, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// objects decodes a multi-document YAML stream; empty documents are dropped.
func objects(t *testing.T, stream []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding rendered objects: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, normalized(t, u))
		}
	}
	return out
}

// normalized round-trips an object through JSON, so numbers and empty values compare alike whichever
// tool wrote them.
func normalized(t *testing.T, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	n := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &n.Object); err != nil {
		t.Fatal(err)
	}
	return n
}

// helmTemplate renders the chart as `helm install <release> -n <namespace>` would, CRDs included.
func helmTemplate(t *testing.T, rel, ns string, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", rel, chartDir, "--namespace", ns, "--include-crds"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return objects(t, tool(t, "helm", args...))
}

func key(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s %s/%s", u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName())
}

func TestChartLints(t *testing.T) {
	tests := map[string][]string{
		"default values":          nil,
		"with monitoring":         {"--set", "monitoring.enabled=true"},
		"with alert rules":        {"--set", "monitoring.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.prometheusRule.labels.release=kube-prometheus-stack"},
		"every value changed":     {"--set", "remediationNamespaces={a,b},leaseNamespace.name=leases,leaseNamespace.create=false,leaderElection.leaseDuration=60s,metrics.secure=false,podDisruptionBudget.enabled=false,flowSchemas.enabled=false,replicas=3"},
		"another namespace":       {"--namespace", "ops"},
		"without leader election": {"--set", "leaderElection.enabled=false,replicas=1"},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			tool(t, "helm", append([]string{"lint", "--strict", chartDir}, args...)...)
		})
	}
}

// chartDifferences are what the chart renders differently from config/default, on purpose
// (docs/operations.md, "Install with Helm"). Each takes the difference out of one side.
var chartDifferences = []struct {
	why   string
	apply func(kustomize, helm []*unstructured.Unstructured) ([]*unstructured.Unstructured, []*unstructured.Unstructured)
}{{
	why: "the chart does not create the release namespace: Helm installs into it (--create-namespace)",
	apply: func(k, h []*unstructured.Unstructured) ([]*unstructured.Unstructured, []*unstructured.Unstructured) {
		return slices.DeleteFunc(k, func(u *unstructured.Unstructured) bool {
			return u.GetKind() == "Namespace" && u.GetName() == releaseNamespace
		}), h
	},
}, {
	why: "Helm does not template crds/, so the CRDs there carry no labels",
	apply: func(k, h []*unstructured.Unstructured) ([]*unstructured.Unstructured, []*unstructured.Unstructured) {
		for _, u := range k {
			if u.GetKind() == "CustomResourceDefinition" {
				unstructured.RemoveNestedField(u.Object, "metadata", "labels")
			}
		}
		return k, h
	},
}, {
	why: "the lease namespace the chart creates is kept on uninstall (helm.sh/resource-policy: keep): medik8s shares it",
	apply: func(k, h []*unstructured.Unstructured) ([]*unstructured.Unstructured, []*unstructured.Unstructured) {
		for _, u := range h {
			if u.GetKind() == "Namespace" && u.GetName() == leaseNamespace && u.GetAnnotations()["helm.sh/resource-policy"] == "keep" {
				unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
			}
		}
		return k, h
	},
}}

// The chart with default values deploys what `kustomize build config/default` deploys: the same objects,
// field for field, labels included, but for chartDifferences.
func TestChartRendersWhatConfigDefaultDeploys(t *testing.T) {
	k := objects(t, tool(t, "kustomize", "build", "config/default"))
	h := helmTemplate(t, release, releaseNamespace)
	for _, d := range chartDifferences {
		k, h = d.apply(k, h)
	}
	kustomized, templated := map[string]*unstructured.Unstructured{}, map[string]*unstructured.Unstructured{}
	for _, u := range k {
		kustomized[key(u)] = u
	}
	for _, u := range h {
		if _, dup := templated[key(u)]; dup {
			t.Errorf("the chart renders %s twice", key(u))
		}
		templated[key(u)] = u
	}
	var keys []string
	for k := range kustomized {
		keys = append(keys, k)
	}
	for k := range templated {
		if _, ok := kustomized[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		want, got := kustomized[k], templated[k]
		switch {
		case got == nil:
			t.Errorf("config/default deploys %s; the chart does not", k)
		case want == nil:
			t.Errorf("the chart renders %s; config/default does not", k)
		default:
			for _, d := range diff("", want.Object, got.Object) {
				t.Errorf("%s: %s", k, d)
			}
		}
	}
	if len(kustomized) < 20 {
		t.Errorf("config/default rendered only %d objects: is the comparison looking at the right output?", len(kustomized))
	}
}

// diff lists the paths where got differs from want (kustomize's object and the chart's).
func diff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: config/default has %v, the chart %v", path, want, got)}
		}
		var out []string
		names := map[string]bool{}
		for n := range w {
			names[n] = true
		}
		for n := range g {
			names[n] = true
		}
		sorted := make([]string, 0, len(names))
		for n := range names {
			sorted = append(sorted, n)
		}
		sort.Strings(sorted)
		for _, n := range sorted {
			out = append(out, diff(path+"."+n, w[n], g[n])...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: config/default has %v, the chart %v", path, want, got)}
		}
		var out []string
		for i := range w {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: config/default has %v, the chart %v", path, want, got)}
		}
		return nil
	}
}

// The chart's copies of generated files are current: `make manifests` writes them.
func TestChartCopiesOfGeneratedFilesAreCurrent(t *testing.T) {
	root := testenv.RepoRoot()
	pairs := map[string]string{
		"config/rbac/role.yaml":        "charts/metalheal/files/manager-role.yaml",
		"config/prometheus/rules.yaml": "charts/metalheal/files/prometheus-rules.yaml",
	}
	bases, err := filepath.Glob(filepath.Join(root, "config/crd/bases/*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	for _, b := range bases {
		pairs[filepath.Join("config/crd/bases", filepath.Base(b))] = filepath.Join("charts/metalheal/crds", filepath.Base(b))
	}
	copies, err := filepath.Glob(filepath.Join(root, "charts/metalheal/crds/*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != len(bases) {
		t.Errorf("charts/metalheal/crds has %d files, config/crd/bases %d: run `make manifests`", len(copies), len(bases))
	}
	for src, dst := range pairs {
		want, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, dst))
		if err != nil || !bytes.Equal(want, got) {
			t.Errorf("%s is not a copy of %s (%v): run `make manifests`", dst, src, err)
		}
	}
}
