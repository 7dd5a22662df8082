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

// tool runs a binary of ./bin and returns its standard output; it fails the test if the binary fails.
func tool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	stdout, err := run(t, nil, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return stdout
}

// run runs a binary of ./bin with env added to the test's environment, and returns its standard output,
// or an error carrying both outputs. A missing binary fails the test: `make test` builds it, and a skipped
// test would let the chart drift unseen.
func run(t *testing.T, env []string, name string, args ...string) ([]byte, error) {
	t.Helper()
	bin := filepath.Join(testenv.RepoRoot(), "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make tools` (make test does): %v", bin, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
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
		"default values":                  nil,
		"with monitoring":                 {"--set", "monitoring.enabled=true"},
		"with alert rules":                {"--set", "monitoring.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.prometheusRule.labels.release=kube-prometheus-stack"},
		"every value changed":             {"--set", "remediationNamespaces={a,b},leaseNamespace.name=leases,leaseNamespace.create=false,leaderElection.leaseDuration=60s,metrics.secure=false,podDisruptionBudget.enabled=false,flowSchemas.enabled=false,replicas=3"},
		"another namespace":               {"--namespace", "ops"},
		"without leader election":         {"--set", "leaderElection.enabled=false,replicas=1"},
		"Cluster API":                     {"--set", "clusterAPI.enabled=true"},
		"Cluster API, several namespaces": {"--set", "clusterAPI.enabled=true,clusterAPI.clusterNamespaces={clusters-prod,clusters-dev},remediationNamespaces={team-a}"},
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

// The chart deploys what kustomize deploys, for each variant config/ offers: with default values what
// `kustomize build config/default` renders, and with clusterAPI.enabled what config/cluster-api renders
// (config/default and the kubeconfig-readers component, for the Clusters' namespace "default"). The same
// objects, field for field, labels included, but for chartDifferences.
func TestChartRendersWhatConfigDeploys(t *testing.T) {
	for _, v := range variants {
		t.Run(v.config, func(t *testing.T) {
			k := objects(t, tool(t, "kustomize", "build", v.config))
			h := helmTemplate(t, release, releaseNamespace, v.sets...)
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
					t.Errorf("%s deploys %s; the chart does not", v.config, k)
				case want == nil:
					t.Errorf("the chart renders %s; %s does not", k, v.config)
				default:
					for _, d := range diff("", want.Object, got.Object) {
						t.Errorf("%s: %s", k, d)
					}
				}
			}
			if len(kustomized) < 20 {
				t.Errorf("%s rendered only %d objects: is the comparison looking at the right output?", v.config, len(kustomized))
			}
		})
	}
}

// variants are the deployments config/ offers and the chart values that render each.
var variants = []struct {
	config string
	sets   []string
}{
	{config: "config/default"},
	{config: "config/cluster-api", sets: []string{"clusterAPI.enabled=true"}},
}

// diff lists the paths where got (the chart's object) differs from want (kustomize's, say).
func diff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want %v, the chart %v", path, want, got)}
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
			return []string{fmt.Sprintf("%s: want %v, the chart %v", path, want, got)}
		}
		var out []string
		for i := range w {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: want %v, the chart %v", path, want, got)}
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
