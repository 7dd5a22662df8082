package chart_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/testenv"
)

// A real API server accepts what the chart renders, and two releases live side by side: every
// cluster-scoped name carries the release, and the second release leaves the shared lease namespace to the
// first (leaseNamespace.create=false). Objects are created, not applied, so that a name two releases share
// fails as Helm's install would.
func TestChartInstallsTwoReleasesOnARealAPIServer(t *testing.T) {
	env, cfg, err := testenv.Start(testenv.Options{SkipCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	install := func(t *testing.T, withCRDs bool, rel, ns string, sets ...string) []error {
		t.Helper()
		// --create-namespace
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		objs := helmTemplate(t, rel, ns, sets...)
		// Helm's order, as far as it matters here: CRDs, then Namespaces, then the rest.
		var errs []error
		for _, first := range []func(string) bool{
			func(k string) bool { return withCRDs && k == "CustomResourceDefinition" },
			func(k string) bool { return k == "Namespace" },
			func(k string) bool { return k != "CustomResourceDefinition" && k != "Namespace" },
		} {
			for _, u := range objs {
				if first(u.GetKind()) {
					if err := c.Create(ctx, u); err != nil {
						errs = append(errs, err)
						t.Logf("creating %s: %v", key(u), err)
					}
				}
			}
		}
		return errs
	}

	if errs := install(t, true, "metalheal", releaseNamespace); len(errs) > 0 {
		t.Fatalf("the default release: %d objects refused", len(errs))
	}
	// The second release's CRDs are the first's: Helm skips CRDs that exist, and so does this test. The
	// namespace it trusts exists (the Clusters live there): the chart grants the manager delete on Machines
	// in it.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster-a"}}); err != nil {
		t.Fatal(err)
	}
	errs := install(t, false, "prod", "ops", "leaseNamespace.create=false", "remediationNamespaces={cluster-a}",
		"leaderElection.leaseDuration=60s", "leaderElection.renewDeadline=40s")
	if len(errs) > 0 {
		t.Errorf("the second release: %d objects refused (a name shared with the first?)", len(errs))
	}
}
