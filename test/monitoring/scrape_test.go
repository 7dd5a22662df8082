package monitoring

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
)

// prometheusSeries are the series Prometheus makes itself for every target, not scraped from it.
var prometheusSeries = []string{"up"}

// usedMetrics is every metric the rules and the dashboard name, with where each is named.
func usedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	groups, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string][]string{}
	add := func(where, expr string) {
		names := MetricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %q", where, expr)
		}
		for _, n := range names {
			if !slices.Contains(used[n], where) {
				used[n] = append(used[n], where)
			}
		}
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			add(RulesPath+" "+r.Alert+r.Record, r.Expr)
		}
	}
	exprs, err := DashboardExprs()
	if err != nil {
		t.Fatal(err)
	}
	if len(exprs) < 10 {
		t.Fatalf("%s: only %d expressions found", DashboardPath, len(exprs))
	}
	for _, e := range exprs {
		add(DashboardPath, e)
	}
	return used
}

// exposed is the set of sample names in a Prometheus text exposition (histograms' _bucket, _sum and
// _count samples under their own names).
func exposed(body []byte) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// Every metric the alert rules and the Grafana dashboard name is one the real manager exposes: read from a
// scrape of the manager (built from this tree, run under config/default's RBAC in a local world, /metrics
// over HTTPS with a scraper's token) once it leads and has checked its BMCs. Series that appear only after
// an event are registered at start (the histograms' usual label combinations) or reported by collectors
// at every scrape (the state gauges), so a fresh manager with one NodeHealthCheck already exposes them.
func TestRulesAndDashboardUseOnlyExposedMetrics(t *testing.T) {
	g := NewWithT(t)
	used := usedMetrics(t)
	if t.Failed() {
		return
	}
	ctx := context.Background()
	h, err := harness.Start(ctx, harness.Options{Workers: 2, Log: os.Stderr})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(h.Stop)
	m, err := h.StartManager(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Kill)
	// The health checks' series are per check: make one.
	g.Expect(h.Client.Create(ctx, &v1alpha1.PowerCycleRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: harness.Namespace, Name: "monitoring"},
	})).To(Succeed())
	g.Expect(h.Client.Create(ctx, &v1alpha1.NodeHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: "monitoring"},
		Spec: v1alpha1.NodeHealthCheckSpec{
			UnhealthyConditions: []v1alpha1.NodeUnhealthyCondition{
				{Type: "Ready", Status: "Unknown", Duration: metav1.Duration{Duration: 5 * time.Minute}},
			},
			RemediationTemplate: &v1alpha1.TemplateReference{APIVersion: v1alpha1.GroupVersion.String(),
				Kind: "PowerCycleRemediationTemplate", Name: "monitoring", Namespace: harness.Namespace},
		},
	})).To(Succeed())

	var missing []string
	g.Eventually(func() []string {
		body, err := m.Metrics(ctx)
		if err != nil {
			return []string{err.Error()}
		}
		have := exposed(body)
		missing = missing[:0]
		for name, where := range used {
			if !have[name] && !slices.Contains(prometheusSeries, name) {
				missing = append(missing, name+" (named in "+strings.Join(where, ", ")+")")
			}
		}
		sort.Strings(missing)
		return missing
	}).WithTimeout(90*time.Second).WithPolling(time.Second).Should(BeEmpty(),
		"metrics the rules or the dashboard name that the manager does not expose; see %s", m.LogPath)
	t.Logf("%d metrics named by the rules and the dashboard, all exposed", len(used))
}
