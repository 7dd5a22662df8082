package chart_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/metalheal/metalheal/internal/testenv"
)

// rendered is one `helm template` output, with lookups the value tests share.
type rendered []*unstructured.Unstructured

func (r rendered) find(kind, namespace, name string) *unstructured.Unstructured {
	for _, u := range r {
		if u.GetKind() == kind && u.GetNamespace() == namespace && u.GetName() == name {
			return u
		}
	}
	return nil
}

func (r rendered) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range r {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

// manager returns the manager container of the only Deployment.
func (r rendered) manager(t *testing.T) map[string]any {
	t.Helper()
	ds := r.ofKind("Deployment")
	if len(ds) != 1 {
		t.Fatalf("%d Deployments rendered, want 1", len(ds))
	}
	cs, _, _ := unstructured.NestedSlice(ds[0].Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	return cs[0].(map[string]any)
}

func (r rendered) args(t *testing.T) []string {
	t.Helper()
	args, _, _ := unstructured.NestedStringSlice(r.manager(t), "args")
	return args
}

// expectConsistent checks what must hold whatever the values: every binding's role and service account
// are rendered (in the binding's namespace, for a Role), and the Services, ServiceMonitors and the PDB
// select the manager's pods.
func expectConsistent(t *testing.T, r rendered) {
	t.Helper()
	accounts := r.ofKind("ServiceAccount")
	if len(accounts) != 1 {
		t.Fatalf("%d ServiceAccounts rendered, want 1", len(accounts))
	}
	sa := accounts[0]
	for _, b := range append(r.ofKind("RoleBinding"), r.ofKind("ClusterRoleBinding")...) {
		refKind, _, _ := unstructured.NestedString(b.Object, "roleRef", "kind")
		refName, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		ns := ""
		if refKind == "Role" {
			ns = b.GetNamespace()
		}
		if r.find(refKind, ns, refName) == nil {
			t.Errorf("%s %s/%s binds %s %s/%s, which is not rendered", b.GetKind(), b.GetNamespace(), b.GetName(), refKind, ns, refName)
		}
		if strings.HasSuffix(refName, "-metrics-reader") {
			continue // a scraper's binding (monitoring.prometheusServiceAccount), not the manager's
		}
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		for _, s := range subjects {
			s := s.(map[string]any)
			if s["name"] != sa.GetName() || s["namespace"] != sa.GetNamespace() {
				t.Errorf("%s %s binds %v/%v, not the manager's service account %s/%s", b.GetKind(), b.GetName(), s["namespace"], s["name"], sa.GetNamespace(), sa.GetName())
			}
		}
	}
	d := r.ofKind("Deployment")[0]
	if d.GetNamespace() != sa.GetNamespace() {
		t.Errorf("the Deployment is in %s, its service account in %s", d.GetNamespace(), sa.GetNamespace())
	}
	if name, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName"); name != sa.GetName() {
		t.Errorf("the manager runs as %q, not %q", name, sa.GetName())
	}
	podLabels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
	selects := func(what string, selector map[string]string) {
		if len(selector) == 0 {
			t.Errorf("%s has no selector", what)
		}
		for k, v := range selector {
			if podLabels[k] != v {
				t.Errorf("%s selects %s=%s; the manager's pods have %v", what, k, v, podLabels)
			}
		}
	}
	for _, s := range r.ofKind("Service") {
		sel, _, _ := unstructured.NestedStringMap(s.Object, "spec", "selector")
		selects("Service "+s.GetName(), sel)
	}
	for _, p := range r.ofKind("PodDisruptionBudget") {
		sel, _, _ := unstructured.NestedStringMap(p.Object, "spec", "selector", "matchLabels")
		selects("PodDisruptionBudget "+p.GetName(), sel)
	}
	// A ServiceMonitor must find the metrics Service by its labels and name one of its ports.
	for _, m := range r.ofKind("ServiceMonitor") {
		sel, _, _ := unstructured.NestedStringMap(m.Object, "spec", "selector", "matchLabels")
		endpoints, _, _ := unstructured.NestedSlice(m.Object, "spec", "endpoints")
		found := false
		for _, s := range r.ofKind("Service") {
			labels := s.GetLabels()
			matches := len(sel) > 0 && s.GetNamespace() == m.GetNamespace()
			for k, v := range sel {
				matches = matches && labels[k] == v
			}
			if !matches {
				continue
			}
			found = true
			ports, _, _ := unstructured.NestedSlice(s.Object, "spec", "ports")
			for _, e := range endpoints {
				port := e.(map[string]any)["port"]
				if !slices.ContainsFunc(ports, func(p any) bool { return p.(map[string]any)["name"] == port }) {
					t.Errorf("ServiceMonitor %s scrapes port %v, which Service %s does not have", m.GetName(), port, s.GetName())
				}
			}
		}
		if !found {
			t.Errorf("ServiceMonitor %s selects no rendered Service (selector %v)", m.GetName(), sel)
		}
	}
}

func TestChartValues(t *testing.T) {
	tests := map[string]struct {
		release, namespace string
		sets               []string
		expect             func(t *testing.T, r rendered)
	}{
		"defaults": {
			expect: func(t *testing.T, r rendered) {
				if got, want := r.args(t), []string{"--leader-elect", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081"}; !slices.Equal(got, want) {
					t.Errorf("args %v, want %v", got, want)
				}
				if r.find("Namespace", "", releaseNamespace) != nil {
					t.Error("the chart creates the release namespace; Helm's --create-namespace does")
				}
				if len(r.ofKind("ServiceMonitor")) != 0 {
					t.Error("a ServiceMonitor without monitoring.enabled")
				}
				if len(r.ofKind("PrometheusRule")) != 0 {
					t.Error("a PrometheusRule without monitoring.prometheusRule.enabled")
				}
			},
		},
		"another release and namespace": {
			release: "prod", namespace: "ops",
			expect: func(t *testing.T, r rendered) {
				for _, u := range r {
					switch {
					case u.GetKind() == "CustomResourceDefinition", u.GetKind() == "Namespace":
					case u.GetNamespace() == "":
						if !strings.HasPrefix(u.GetName(), "prod-metalheal-") {
							t.Errorf("cluster-scoped %s %s is not prefixed with the release", u.GetKind(), u.GetName())
						}
					case u.GetNamespace() != "ops" && u.GetNamespace() != leaseNamespace:
						t.Errorf("%s %s is in %s, not the release namespace", u.GetKind(), u.GetName(), u.GetNamespace())
					}
				}
				fs := r.find("FlowSchema", "", "prod-metalheal-leader-election")
				if fs == nil {
					t.Fatal("no FlowSchema prod-metalheal-leader-election")
				}
				rules, _, _ := unstructured.NestedSlice(fs.Object, "spec", "rules")
				sa, _, _ := unstructured.NestedStringMap(rules[0].(map[string]any)["subjects"].([]any)[0].(map[string]any), "serviceAccount")
				if sa["name"] != "prod-metalheal-manager" || sa["namespace"] != "ops" {
					t.Errorf("the leader election FlowSchema matches %v, not the manager's service account", sa)
				}
				ns, _, _ := unstructured.NestedStringSlice(rules[0].(map[string]any)["resourceRules"].([]any)[0].(map[string]any), "namespaces")
				if !slices.Equal(ns, []string{"ops"}) {
					t.Errorf("the leader election FlowSchema matches leases in %v, not the release namespace", ns)
				}
			},
		},
		"a lease namespace of its own": {
			sets: []string{"leaseNamespace.name=leases"},
			expect: func(t *testing.T, r rendered) {
				if r.find("Namespace", "", "leases") == nil {
					t.Error("the lease namespace is not created")
				}
				if r.find("Role", "leases", "metalheal-manager-role") == nil || r.find("RoleBinding", "leases", "metalheal-manager-rolebinding") == nil {
					t.Error("the manager gets no Role in the lease namespace")
				}
				for _, u := range r {
					if u.GetNamespace() == leaseNamespace || u.GetName() == leaseNamespace {
						t.Errorf("%s %s is still in medik8s-leases", u.GetKind(), u.GetName())
					}
				}
				if !slices.Contains(r.args(t), "--lease-namespace=leases") {
					t.Errorf("args %v lack --lease-namespace=leases", r.args(t))
				}
			},
		},
		"a lease namespace that exists": {
			sets: []string{"leaseNamespace.create=false"},
			expect: func(t *testing.T, r rendered) {
				if ns := r.ofKind("Namespace"); len(ns) != 0 {
					t.Errorf("namespace %s created", ns[0].GetName())
				}
				if r.find("Role", leaseNamespace, "metalheal-manager-role") == nil {
					t.Error("the manager gets no Role in the lease namespace")
				}
			},
		},
		"trusted remediation namespaces": {
			sets: []string{"remediationNamespaces={cluster-a,cluster-b}"},
			expect: func(t *testing.T, r rendered) {
				if !slices.Contains(r.args(t), "--remediation-namespaces=cluster-a,cluster-b") {
					t.Errorf("args %v lack --remediation-namespaces=cluster-a,cluster-b", r.args(t))
				}
				// The escalation deletes a trusted request's Machine: delete on Machines there, and only there.
				for _, ns := range []string{"cluster-a", "cluster-b"} {
					role := r.find("Role", ns, "metalheal-machine-deleter")
					if role == nil {
						t.Fatalf("no Role metalheal-machine-deleter in %s", ns)
					}
					rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
					if want := []any{map[string]any{"apiGroups": []any{"cluster.x-k8s.io"}, "resources": []any{"machines"}, "verbs": []any{"delete"}}}; !reflect.DeepEqual(rules, want) {
						t.Errorf("Role metalheal-machine-deleter in %s grants %v, want %v", ns, rules, want)
					}
					if r.find("RoleBinding", ns, "metalheal-machine-deleter") == nil {
						t.Errorf("no RoleBinding metalheal-machine-deleter in %s", ns)
					}
				}
			},
		},
		"Cluster API, the Clusters in several namespaces": {
			sets: []string{"clusterAPI.enabled=true,clusterAPI.clusterNamespaces={clusters-prod,clusters-dev,clusters-prod},remediationNamespaces={team-a,clusters-dev}"},
			expect: func(t *testing.T, r rendered) {
				args := r.args(t)
				for _, a := range []string{"--cluster-namespaces=clusters-prod,clusters-dev", "--remediation-namespaces=team-a,clusters-dev,clusters-prod"} {
					if !slices.Contains(args, a) {
						t.Errorf("args %v lack %s", args, a)
					}
				}
				// The kubeconfig Secrets are read in the Clusters' namespaces only, with get only.
				for _, ns := range []string{"clusters-prod", "clusters-dev"} {
					role := r.find("Role", ns, "metalheal-kubeconfig-reader")
					if role == nil {
						t.Fatalf("no Role metalheal-kubeconfig-reader in %s", ns)
					}
					rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
					if want := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"get"}}}; !reflect.DeepEqual(rules, want) {
						t.Errorf("Role metalheal-kubeconfig-reader in %s grants %v, want %v", ns, rules, want)
					}
					if r.find("RoleBinding", ns, "metalheal-kubeconfig-reader") == nil {
						t.Errorf("no RoleBinding metalheal-kubeconfig-reader in %s", ns)
					}
				}
				// Machines may be deleted in every trusted namespace, once each.
				var deleters []string
				for _, role := range r.ofKind("Role") {
					if role.GetName() == "metalheal-machine-deleter" {
						deleters = append(deleters, role.GetNamespace())
					}
				}
				if want := []string{"team-a", "clusters-dev", "clusters-prod"}; !slices.Equal(deleters, want) {
					t.Errorf("Roles metalheal-machine-deleter in %v, want %v", deleters, want)
				}
				if n := len(r.ofKind("Role")); n != 3+3+2 {
					t.Errorf("%d Roles, want the manager's 3 (its own, the leases', leader election), 3 machine deleters and 2 kubeconfig readers", n)
				}
				if r.find("Role", "default", "metalheal-kubeconfig-reader") != nil {
					t.Error("a kubeconfig reader in default, which clusterAPI.clusterNamespaces does not list")
				}
			},
		},
		"Cluster API namespaces without clusterAPI.enabled": {
			sets: []string{"clusterAPI.clusterNamespaces={clusters-prod}"},
			expect: func(t *testing.T, r rendered) {
				for _, a := range r.args(t) {
					if strings.HasPrefix(a, "--cluster-namespaces") || strings.HasPrefix(a, "--remediation-namespaces") {
						t.Errorf("%s without clusterAPI.enabled", a)
					}
				}
				for _, role := range r.ofKind("Role") {
					if role.GetNamespace() == "clusters-prod" {
						t.Errorf("Role %s in clusters-prod without clusterAPI.enabled", role.GetName())
					}
				}
			},
		},
		"leader election timing": {
			sets: []string{"leaderElection.leaseDuration=60s,leaderElection.renewDeadline=40s,leaderElection.retryPeriod=5s"},
			expect: func(t *testing.T, r rendered) {
				for _, a := range []string{"--leader-elect", "--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=5s"} {
					if !slices.Contains(r.args(t), a) {
						t.Errorf("args %v lack %s", r.args(t), a)
					}
				}
			},
		},
		"no leader election": {
			sets: []string{"leaderElection.enabled=false,leaderElection.leaseDuration=60s,replicas=1"},
			expect: func(t *testing.T, r rendered) {
				for _, a := range r.args(t) {
					if strings.HasPrefix(a, "--leader-elect") {
						t.Errorf("%s without leader election", a)
					}
				}
			},
		},
		"plain HTTP metrics on another port": {
			sets: []string{"metrics.secure=false,metrics.port=9090,monitoring.enabled=true,monitoring.prometheusServiceAccount.name="},
			expect: func(t *testing.T, r rendered) {
				args := r.args(t)
				if !slices.Contains(args, "--metrics-secure=false") || !slices.Contains(args, "--metrics-bind-address=:9090") {
					t.Errorf("args %v", args)
				}
				s := r.find("Service", releaseNamespace, "metalheal-manager-metrics-service")
				ports, _, _ := unstructured.NestedSlice(s.Object, "spec", "ports")
				if p := ports[0].(map[string]any); p["name"] != "http" || p["port"] != float64(9090) {
					t.Errorf("metrics Service port %v", p)
				}
				m := r.ofKind("ServiceMonitor")[0]
				e, _, _ := unstructured.NestedSlice(m.Object, "spec", "endpoints")
				if ep := e[0].(map[string]any); ep["scheme"] != "http" || ep["bearerTokenFile"] != nil {
					t.Errorf("ServiceMonitor endpoint %v", ep)
				}
				if n := len(r.ofKind("ClusterRoleBinding")); n != 3 {
					t.Errorf("%d ClusterRoleBindings, want the manager's 3 (no scraper binding without a name)", n)
				}
			},
		},
		"monitoring": {
			sets: []string{"monitoring.enabled=true,monitoring.serviceMonitor.labels.release=kube-prometheus-stack"},
			expect: func(t *testing.T, r rendered) {
				ms := r.ofKind("ServiceMonitor")
				if len(ms) != 1 {
					t.Fatalf("%d ServiceMonitors, want 1", len(ms))
				}
				if ms[0].GetLabels()["release"] != "kube-prometheus-stack" {
					t.Errorf("ServiceMonitor labels %v", ms[0].GetLabels())
				}
				e, _, _ := unstructured.NestedSlice(ms[0].Object, "spec", "endpoints")
				ep := e[0].(map[string]any)
				if ep["scheme"] != "https" || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
					t.Errorf("ServiceMonitor endpoint %v: want HTTPS with the scraper's token", ep)
				}
				b := r.find("ClusterRoleBinding", "", "metalheal-metrics-reader-prometheus")
				if b == nil {
					t.Fatal("Prometheus' service account is not bound to metalheal-metrics-reader")
				}
				subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
				if s := subjects[0].(map[string]any); s["name"] != "prometheus-k8s" || s["namespace"] != "monitoring" {
					t.Errorf("metrics reader bound to %v, want kube-prometheus' prometheus-k8s", s)
				}
			},
		},
		"image, replicas, resources": {
			sets: []string{"image.repository=registry.example/metalheal,image.tag=v1.2.3,replicas=3,resources.limits.memory=1Gi"},
			expect: func(t *testing.T, r rendered) {
				c := r.manager(t)
				if c["image"] != "registry.example/metalheal:v1.2.3" {
					t.Errorf("image %v", c["image"])
				}
				if n, _, _ := unstructured.NestedFloat64(r.ofKind("Deployment")[0].Object, "spec", "replicas"); n != 3 {
					t.Errorf("replicas %v", n)
				}
				if m, _, _ := unstructured.NestedString(c, "resources", "limits", "memory"); m != "1Gi" {
					t.Errorf("memory limit %q", m)
				}
			},
		},
		"no PodDisruptionBudget, no FlowSchemas": {
			sets: []string{"podDisruptionBudget.enabled=false,flowSchemas.enabled=false"},
			expect: func(t *testing.T, r rendered) {
				if n := len(r.ofKind("PodDisruptionBudget")) + len(r.ofKind("FlowSchema")); n != 0 {
					t.Errorf("%d PodDisruptionBudgets and FlowSchemas rendered", n)
				}
			},
		},
		"extra labels and args": {
			sets: []string{"commonLabels.team=infra,extraArgs={--bmc-check-interval=1m}"},
			expect: func(t *testing.T, r rendered) {
				for _, u := range r {
					if u.GetKind() != "CustomResourceDefinition" && u.GetLabels()["team"] != "infra" {
						t.Errorf("%s %s lacks the common label", u.GetKind(), u.GetName())
					}
				}
				if !slices.Contains(r.args(t), "--bmc-check-interval=1m") {
					t.Errorf("args %v", r.args(t))
				}
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			rel, ns := release, releaseNamespace
			if tt.release != "" {
				rel, ns = tt.release, tt.namespace
			}
			r := rendered(helmTemplate(t, rel, ns, tt.sets...))
			expectConsistent(t, r)
			tt.expect(t, r)
		})
	}
}

// clusterAPI.enabled with no namespace is refused with a message naming the value: the manager would
// otherwise try every namespace and be refused by RBAC in each.
func TestChartRefusesClusterAPIWithoutNamespaces(t *testing.T) {
	_, err := run(t, nil, "helm", "template", release, chartDir, "--namespace", releaseNamespace,
		"--set", "clusterAPI.enabled=true", "--set", "clusterAPI.clusterNamespaces=null")
	if err == nil || !strings.Contains(err.Error(), "clusterAPI.enabled needs clusterAPI.clusterNamespaces") {
		t.Errorf("helm template with clusterAPI.enabled and no namespace: %v, want the chart's refusal", err)
	}
}

// configJob is the scrape job config/prometheus/rules.yaml's expressions select: the metrics Service's name
// under config/default.
const configJob = `job="metalheal-manager-metrics-service"`

// withJob returns v with every configJob in its strings replaced by job.
func withJob(v any, job string) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = withJob(e, job)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = withJob(e, job)
		}
		return out
	case string:
		return strings.ReplaceAll(v, configJob, job)
	default:
		return v
	}
}

// With monitoring.prometheusRule.enabled the chart renders config/prometheus/rules.yaml's alerts, rule for
// rule, but on the release's metrics Service: the Prometheus Operator names a ServiceMonitor's scrape job
// after the Service it selects (the chart's ServiceMonitor sets no jobLabel), so an alert on
// config/default's job name would never see another release's manager, and MetalhealManagerDown would fire
// for ever.
func TestChartPrometheusRuleIsConfigPrometheusRules(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	config := objects(t, raw)
	if len(config) != 1 || config[0].GetKind() != "PrometheusRule" {
		t.Fatalf("config/prometheus/rules.yaml holds %d objects, want one PrometheusRule", len(config))
	}
	configGroups, _, _ := unstructured.NestedSlice(config[0].Object, "spec", "groups")
	if n := strings.Count(string(raw), configJob); n < 2 {
		t.Fatalf("config/prometheus/rules.yaml selects %s %d times: is this test looking at the right job?", configJob, n)
	}

	tests := map[string]struct {
		release, namespace, wantName string
		// sameAsConfig: the whole object is rules.yaml's, as for config/default's names.
		sameAsConfig bool
	}{
		"config/default's names":         {release: release, namespace: releaseNamespace, wantName: "metalheal-alerts", sameAsConfig: true},
		"another release and namespace":  {release: "prod", namespace: "ops", wantName: "prod-metalheal-alerts"},
		"a release containing the chart": {release: "metalheal-b", namespace: "b", wantName: "metalheal-b-alerts"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := rendered(helmTemplate(t, tt.release, tt.namespace, "monitoring.enabled=true",
				"monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.labels.release=kube-prometheus-stack"))
			expectConsistent(t, r)
			rules := r.ofKind("PrometheusRule")
			if len(rules) != 1 {
				t.Fatalf("%d PrometheusRules rendered, want 1", len(rules))
			}
			pr := rules[0]
			if pr.GetName() != tt.wantName || pr.GetNamespace() != tt.namespace {
				t.Errorf("PrometheusRule %s/%s, want %s/%s", pr.GetNamespace(), pr.GetName(), tt.namespace, tt.wantName)
			}
			if pr.GetLabels()["release"] != "kube-prometheus-stack" || pr.GetLabels()["app.kubernetes.io/name"] != "metalheal" {
				t.Errorf("PrometheusRule labels %v", pr.GetLabels())
			}

			services := r.ofKind("Service")
			if len(services) != 1 {
				t.Fatalf("%d Services rendered, want the metrics Service", len(services))
			}
			monitors := r.ofKind("ServiceMonitor")
			if len(monitors) != 1 {
				t.Fatalf("%d ServiceMonitors rendered, want 1", len(monitors))
			}
			if jl, found, _ := unstructured.NestedFieldNoCopy(monitors[0].Object, "spec", "jobLabel"); found {
				t.Fatalf("the ServiceMonitor sets jobLabel %v: the scrape job is no longer the Service's name", jl)
			}
			job := fmt.Sprintf("job=%q", services[0].GetName())

			got, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
			for _, d := range diff("spec.groups", withJob(configGroups, job), got) {
				t.Errorf("the chart's rules differ from config/prometheus/rules.yaml's on job %s: %s", job, d)
			}
			if tt.sameAsConfig {
				want := config[0].DeepCopy()
				delete(want.GetLabels(), "release") // not in config/prometheus
				gotObj := pr.DeepCopy()
				labels := gotObj.GetLabels()
				delete(labels, "release")
				gotObj.SetLabels(labels)
				for _, d := range diff("", want.Object, gotObj.Object) {
					t.Errorf("the chart's PrometheusRule differs from config/prometheus/rules.yaml: %s", d)
				}
			}
		})
	}
}
