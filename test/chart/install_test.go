package chart_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalheal/metalheal/internal/testenv"
)

// apiServer is a real kube-apiserver (envtest) that the helm binary installs into, as a user would: with a
// kubeconfig of its own (a system:masters user) and Helm's directories in the test's temporary directory.
type apiServer struct {
	c       client.Client
	helmEnv []string
}

// startAPIServer starts a bare API server (no CRDs: the chart installs them) and writes the kubeconfig
// Helm uses.
func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	env, _, err := testenv.Start(testenv.Options{SkipCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "helm-user", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("adding Helm's user: %v", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatalf("Helm's kubeconfig: %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(user.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &apiServer{c: c, helmEnv: []string{
		"KUBECONFIG=" + path,
		"HELM_CACHE_HOME=" + filepath.Join(dir, "helm-cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(dir, "helm-config"),
		"HELM_DATA_HOME=" + filepath.Join(dir, "helm-data"),
	}}
}

// helm runs the helm binary against the API server and returns its standard output.
func (s *apiServer) helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(t, s.helmEnv, "helm", args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func (s *apiServer) createNamespaces(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := s.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
}

// expectHolds checks that every object of want is in the API server with every field want gives it, and
// that the Roles and RoleBindings labelled as metalheal's are exactly want's: an upgrade that should remove
// one, or move it to another namespace, must have done so. The API server's own additions (defaults,
// status, Helm's annotations) are not compared.
func (s *apiServer) expectHolds(t *testing.T, want []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	for _, w := range want {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(w.GroupVersionKind())
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			t.Errorf("%s: %v", key(w), err)
			continue
		}
		for _, d := range missing("", w.Object, normalized(t, got).Object) {
			t.Errorf("%s in the API server: %s", key(w), d)
		}
	}
	for _, kind := range []string{"Role", "RoleBinding"} {
		var wanted []string
		for _, w := range want {
			if w.GetKind() == kind {
				wanted = append(wanted, w.GetNamespace()+"/"+w.GetName())
			}
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: kind + "List"})
		if err := s.c.List(ctx, list, client.MatchingLabels{"app.kubernetes.io/part-of": "metalheal"}); err != nil {
			t.Fatal(err)
		}
		var held []string
		for _, u := range list.Items {
			held = append(held, u.GetNamespace()+"/"+u.GetName())
		}
		sort.Strings(wanted)
		sort.Strings(held)
		if !slices.Equal(held, wanted) {
			t.Errorf("%ss in the API server: %v, want %v", kind, held, wanted)
		}
	}
}

// expectClusterAPI checks, in the API server, what the Cluster API values grant: the kubeconfig readers
// (Role and RoleBinding) in exactly readers, the Machine deleters in exactly deleters, and the manager's
// --cluster-namespaces and --remediation-namespaces ("" when the flag must be absent).
func (s *apiServer) expectClusterAPI(t *testing.T, prefix, namespace string, readers, deleters []string, clusterFlag, remediationFlag string) {
	t.Helper()
	ctx := context.Background()
	for name, want := range map[string][]string{prefix + "-kubeconfig-reader": readers, prefix + "-machine-deleter": deleters} {
		for _, kind := range []string{"Role", "RoleBinding"} {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: kind + "List"})
			if err := s.c.List(ctx, list); err != nil {
				t.Fatal(err)
			}
			var in []string
			for _, u := range list.Items {
				if u.GetName() == name {
					in = append(in, u.GetNamespace())
				}
			}
			sort.Strings(in)
			if w := slices.Sorted(slices.Values(want)); !slices.Equal(in, w) {
				t.Errorf("%s %s in namespaces %v, want %v", kind, name, in, w)
			}
		}
	}
	d := &unstructured.Unstructured{}
	d.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: prefix + "-manager"}, d); err != nil {
		t.Fatal(err)
	}
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	for flag, value := range map[string]string{"--cluster-namespaces": clusterFlag, "--remediation-namespaces": remediationFlag} {
		var got []string
		for _, a := range args {
			if strings.HasPrefix(a, flag+"=") {
				got = append(got, strings.TrimPrefix(a, flag+"="))
			}
		}
		var want []string
		if value != "" {
			want = []string{value}
		}
		if !slices.Equal(got, want) {
			t.Errorf("the manager's %s: %v, want %v (args %v)", flag, got, want, args)
		}
	}
}

// missing lists the paths where got lacks a value of want, or has another; fields only got has are not
// compared, and a list must have want's length. An empty list or map is satisfied by none: the API server
// omits empty fields (an aggregated ClusterRole's rules: [] comes back without rules, as nothing here runs
// the aggregation controller).
func missing(path string, want, got any) []string {
	switch w := want.(type) {
	case nil:
		return nil
	case []any:
		if len(w) == 0 && got == nil {
			return nil
		}
	case map[string]any:
		if len(w) == 0 && got == nil {
			return nil
		}
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want %v, the API server has %v", path, want, got)}
		}
		var out []string
		for _, n := range slices.Sorted(maps.Keys(w)) {
			out = append(out, missing(path+"."+n, w[n], g[n])...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, the API server has %v", path, want, got)}
		}
		var out []string
		for i := range w {
			out = append(out, missing(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		if want != got {
			return []string{fmt.Sprintf("%s: want %v, the API server has %v", path, want, got)}
		}
		return nil
	}
}

// kustomized returns what `kustomize build dir` deploys, as the chart renders it (chartDifferences taken
// out of kustomize's side).
func kustomized(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := objects(t, tool(t, "kustomize", "build", dir))
	for _, d := range chartDifferences {
		k, _ = d.apply(k, nil)
	}
	return k
}

// The real `helm install`, `helm upgrade` and `helm uninstall` of both variants, config/default's and
// config/cluster-api's, against a real API server: after each step the API server holds what the variant
// deploys (kustomize's objects where config/ has the variant, else the chart's for the same values), and
// the Roles in the Clusters' namespaces come and go as the values say.
func TestChartInstallsAndUpgradesBothVariantsOnARealAPIServer(t *testing.T) {
	s := startAPIServer(t)
	// The namespaces the values name exist before the release, as values.yaml says; "default" always does.
	s.createNamespaces(t, "clusters-prod", "clusters-dev", "team-a")
	chart := []string{release, chartDir, "--namespace", releaseNamespace}
	// After the uninstall the lease namespace is kept (helm.sh/resource-policy: keep), and the next install
	// says it exists, as operations.md tells an admin to.
	leasesKept := "leaseNamespace.create=false"
	several := []string{"clusterAPI.enabled=true", "clusterAPI.clusterNamespaces={clusters-prod,clusters-dev}", "remediationNamespaces={team-a}", leasesKept}
	teamOnly := []string{"remediationNamespaces={team-a}", leasesKept}

	steps := []struct {
		name string
		helm []string
		// want is what the API server holds after the step; nil: nothing of metalheal's but the CRDs and
		// the lease namespace, which uninstall leaves.
		want func(t *testing.T) []*unstructured.Unstructured
		// readers and deleters: the namespaces of the kubeconfig readers and Machine deleters; the flags.
		readers, deleters            []string
		clusterFlag, remediationFlag string
		uninstalled                  bool
		// notes: lines the release notes Helm prints must have.
		notes []string
	}{{
		name: "install config/default's variant",
		helm: append([]string{"install"}, append(chart, "--create-namespace")...),
		want: func(t *testing.T) []*unstructured.Unstructured { return kustomized(t, "config/default") },
	}, {
		name:     "upgrade to config/cluster-api's variant",
		helm:     append([]string{"upgrade"}, append(chart, "--set", "clusterAPI.enabled=true")...),
		want:     func(t *testing.T) []*unstructured.Unstructured { return kustomized(t, "config/cluster-api") },
		readers:  []string{"default"},
		deleters: []string{"default"}, clusterFlag: "default", remediationFlag: "default",
	}, {
		// An upgrade without values reuses the release's (Helm's rule): turning the variant off says so.
		name: "upgrade back to config/default's variant",
		helm: append([]string{"upgrade"}, append(chart, "--set", "clusterAPI.enabled=false")...),
		want: func(t *testing.T) []*unstructured.Unstructured { return kustomized(t, "config/default") },
	}, {
		name:        "uninstall",
		helm:        append([]string{"uninstall"}, release, "--namespace", releaseNamespace),
		uninstalled: true,
	}, {
		name:     "install config/cluster-api's variant",
		helm:     append([]string{"install"}, append(chart, "--set", "clusterAPI.enabled=true", "--set", leasesKept)...),
		want:     func(t *testing.T) []*unstructured.Unstructured { return kustomized(t, "config/cluster-api") },
		readers:  []string{"default"},
		deleters: []string{"default"}, clusterFlag: "default", remediationFlag: "default",
		notes: []string{
			"Remediation requests are acted on only in metalheal-system and default.",
			"MachineHealthChecks read workload clusters' kubeconfig Secrets only in default (clusterAPI.clusterNamespaces).",
		},
	}, {
		name: "upgrade: Clusters in two other namespaces, a team's namespace trusted",
		helm: append([]string{"upgrade"}, append(chart, "--set", strings.Join(several, ","))...),
		want: func(t *testing.T) []*unstructured.Unstructured {
			return helmTemplate(t, release, releaseNamespace, several...)
		},
		readers:  []string{"clusters-prod", "clusters-dev"},
		deleters: []string{"team-a", "clusters-prod", "clusters-dev"}, clusterFlag: "clusters-prod,clusters-dev", remediationFlag: "team-a,clusters-prod,clusters-dev",
	}, {
		name: "upgrade: Cluster API off, the team's namespace still trusted",
		helm: append([]string{"upgrade"}, append(chart, "--set", strings.Join(teamOnly, ","))...),
		want: func(t *testing.T) []*unstructured.Unstructured {
			return helmTemplate(t, release, releaseNamespace, teamOnly...)
		},
		deleters: []string{"team-a"}, remediationFlag: "team-a",
	}}
	for _, step := range steps {
		ok := t.Run(step.name, func(t *testing.T) {
			out := s.helm(t, step.helm...)
			for _, line := range step.notes {
				if !strings.Contains(out, line) {
					t.Errorf("helm's output lacks the note %q:\n%s", line, out)
				}
			}
			if step.uninstalled {
				s.expectHolds(t, nil)
				return
			}
			want := step.want(t)
			if len(want) < 20 {
				t.Fatalf("only %d objects wanted: is the step comparing the right output?", len(want))
			}
			s.expectHolds(t, want)
			s.expectClusterAPI(t, release, releaseNamespace, step.readers, step.deleters, step.clusterFlag, step.remediationFlag)
		})
		if !ok {
			break // the next step starts from this one's outcome
		}
	}
}

// Two releases live side by side, each with the Cluster API values: every cluster-scoped name and every
// Role in a shared namespace carries the release, and the second release leaves the shared lease namespace
// to the first (leaseNamespace.create=false) and the CRDs too (Helm skips CRDs that exist). Helm refuses an
// object another release owns, so a shared name fails the second install.
func TestChartInstallsTwoReleasesOnARealAPIServer(t *testing.T) {
	s := startAPIServer(t)
	s.createNamespaces(t, "cluster-a")
	s.helm(t, "install", release, chartDir, "--namespace", releaseNamespace, "--create-namespace",
		"--set", "clusterAPI.enabled=true,clusterAPI.clusterNamespaces={cluster-a}")
	s.helm(t, "install", "prod", chartDir, "--namespace", "ops", "--create-namespace",
		"--set", "leaseNamespace.create=false,clusterAPI.enabled=true,clusterAPI.clusterNamespaces={cluster-a}",
		"--set", "leaderElection.leaseDuration=60s,leaderElection.renewDeadline=40s")
	s.expectClusterAPI(t, release, releaseNamespace, []string{"cluster-a"}, []string{"cluster-a"}, "cluster-a", "cluster-a")
	s.expectClusterAPI(t, "prod-metalheal", "ops", []string{"cluster-a"}, []string{"cluster-a"}, "cluster-a", "cluster-a")
	s.expectHolds(t, append(
		helmTemplate(t, release, releaseNamespace, "clusterAPI.enabled=true", "clusterAPI.clusterNamespaces={cluster-a}"),
		helmTemplate(t, "prod", "ops", "leaseNamespace.create=false", "clusterAPI.enabled=true", "clusterAPI.clusterNamespaces={cluster-a}",
			"leaderElection.leaseDuration=60s", "leaderElection.renewDeadline=40s")...))
}
