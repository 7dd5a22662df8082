package nhc

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/internal/testenv"
)

const (
	wedgeTemplateKind = "WedgeRemediationTemplate"
	wedgeRequestKind  = "WedgeRemediation"
)

// A check naming a kind the manager cannot watch (its own RBAC, in a real manager): only that check is
// disabled, at the kind watch's bound (fake clock), with a reason naming the kind and the missing
// permission; another check over other Nodes creates its request meanwhile, never waiting for the kind.
// Granting the permission (or installing the CRD) enables the check again without a restart, and deleting
// the check stops the kind's watches. Before kindwatch, the first read of such a kind blocked the
// controller's only worker for ever: no check created a request any more.
func TestUnwatchableKindDisablesOnlyTheChecksNamingIt(t *testing.T) {
	tests := []struct {
		name string
		// grantTemplates and grantRequests: what the manager may read of the kind at first.
		grantTemplates, grantRequests bool
		// installed: whether the kind's CRDs exist at first; they are installed with the fix otherwise.
		installed bool
		// reason and resource: why the check is disabled, and the resource its message names.
		reason, resource string
	}{
		{name: "no role grants the kind", installed: true,
			reason: v1alpha1.ReasonRemediationKindNotWatchable, resource: testenv.Plural(wedgeTemplateKind)},
		{name: "its templates cannot be listed", grantRequests: true, installed: true,
			reason: v1alpha1.ReasonRemediationKindNotWatchable, resource: testenv.Plural(wedgeTemplateKind)},
		{name: "its requests cannot be listed", grantTemplates: true, installed: true,
			reason: v1alpha1.ReasonRemediationKindNotWatchable, resource: testenv.Plural(wedgeRequestKind)},
		{name: "its CRD is not installed",
			reason: v1alpha1.ReasonTemplateNotFound, resource: wedgeTemplateKind},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			g := w.g
			w.clk.SetTime(t0.Add(time.Hour)) // every condition set at t0 has expired
			group := w.pool + ".wedge.example.com"
			install := func() {
				for _, kind := range []string{wedgeTemplateKind, wedgeRequestKind} {
					crd, err := testenv.CRD(w.ctx, k8s, group, kind)
					g.Expect(err).NotTo(HaveOccurred())
					t.Cleanup(func() { _ = k8s.Delete(context.Background(), crd) })
				}
				w.create(&unstructured.Unstructured{Object: map[string]any{
					"apiVersion": group + "/v1", "kind": wedgeTemplateKind,
					"metadata": map[string]any{"name": "bad", "namespace": pcNS},
					"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"mode": "hard"}}},
				}})
			}
			if tc.installed {
				install()
			}
			user := "nhc-" + w.pool
			var granted []string
			if tc.grantTemplates {
				granted = append(granted, testenv.Plural(wedgeTemplateKind))
			}
			if tc.grantRequests {
				granted = append(granted, testenv.Plural(wedgeRequestKind))
			}
			w.grant(user+"-base", user, managerRules(group, granted...))

			log := w.startImpersonatedManager(user)
			eventually := func(f any) AsyncAssertion {
				return g.Eventually(f).WithTimeout(20 * time.Second).WithPolling(20 * time.Millisecond)
			}

			// The bad check first (under the old code its first reconcile wedged the only worker), selecting
			// no Node; then a good check with a Node due for a request.
			ref := v1alpha1.TemplateReference{APIVersion: group + "/v1", Kind: wedgeTemplateKind, Name: "bad", Namespace: pcNS}
			bad := w.check("bad", &ref, func(c *v1alpha1.NodeHealthCheck) {
				c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": w.pool + "-none"}}
			})
			if tc.installed {
				eventually(func() int { return log.Requests(group) }).ShouldNot(BeZero(), "the bad kind is being watched")
			}
			pc := w.pcTemplate("pc")
			good := w.check("good", &pc)
			sick := w.node("w1", corev1.ConditionUnknown, t0)
			eventually(func() []string { return names(w.remediations(pcRemediation, good)) }).Should(Equal([]string{sick.Name}),
				"the other check creates its request while the bad kind is not synced")

			disabled := func() *metav1.Condition {
				g.Expect(k8s.Get(w.ctx, client.ObjectKeyFromObject(bad), bad)).To(Succeed())
				return meta.FindStatusCondition(bad.Status.Conditions, v1alpha1.ConditionDisabled)
			}
			if tc.installed {
				g.Expect(disabled()).To(BeNil(), "not disabled before its bound")
				eventually(w.clk.HasWaiters).Should(BeTrue(), "the bound is armed")
				w.clk.Step(kindwatch.DefaultSyncTimeout)
			}
			eventually(disabled).Should(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", tc.reason)))
			g.Expect(bad.Status.Phase).To(Equal(v1alpha1.PhaseDisabled))
			g.Expect(bad.Status.Reason).To(ContainSubstring(tc.resource))
			if tc.installed {
				g.Expect(bad.Status.Reason).To(ContainSubstring(kindwatch.AggregationLabel), "it says how to grant the kind")
			}
			// The event is emitted after the status write that the condition was read from.
			eventually(func() []recordedEvent { return w.rec.with(EventDisabled) }).Should(ContainElement(HaveField("Regarding", bad.Name)))
			w.node("w2", corev1.ConditionUnknown, t0) // nor once the bad one is disabled
			eventually(func() []string { return names(w.remediations(pcRemediation, good)) }).Should(ContainElement(w.pool + "-w2"))

			// The fix: the permission granted (and the CRD installed). Without a restart, the check is
			// enabled again at the kind's next attempt.
			if !tc.installed {
				install()
			}
			w.grant(user+"-fix", user, managerRules(group, testenv.Plural(wedgeTemplateKind), testenv.Plural(wedgeRequestKind)))
			if tc.installed {
				w.clk.Step(kindwatch.DefaultRetryMin)
			}
			eventually(disabled).Should(HaveField("Status", metav1.ConditionFalse))
			g.Expect(bad.Status.Phase).To(Equal(v1alpha1.PhaseEnabled))
			eventually(func() int { return log.OpenWatches(group) }).Should(Equal(2), "its template and request kinds are watched")

			// The check is deleted: nothing watches its kinds any more.
			g.Expect(k8s.Delete(w.ctx, bad)).To(Succeed())
			eventually(func() int { return log.OpenWatches(group) }).Should(BeZero())
		})
	}
}

// managerRules are what the NodeHealthCheck controller needs, and get, list and watch on resources of
// group.
func managerRules(group string, resources ...string) []rbacv1.PolicyRule {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: []string{rbacv1.VerbAll}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{rbacv1.ResourceAll}, Verbs: []string{rbacv1.VerbAll}},
	}
	if len(resources) > 0 {
		rules = append([]rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: resources, Verbs: []string{"get", "list", "watch"}}}, rules...)
	}
	return rules
}

// grant gives user the rules, for the rest of the test.
func (w *world) grant(name, user string, rules []rbacv1.PolicyRule) {
	w.t.Helper()
	revoke, err := testenv.Grant(w.ctx, k8s, name, user, rules)
	if revoke != nil {
		w.t.Cleanup(func() { _ = revoke(context.Background()) })
	}
	w.g.Expect(err).NotTo(HaveOccurred())
}

// startImpersonatedManager runs the controller in a manager acting as user, on the world's clock, for the
// rest of the test, and records the manager's requests.
func (w *world) startImpersonatedManager(user string) *testenv.RequestLog {
	w.t.Helper()
	log := &testenv.RequestLog{}
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	cfg.WrapTransport = log.Wrap
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{leaseNS: {}}},
		}},
	})
	w.g.Expect(err).NotTo(HaveOccurred())
	r, err := New(Options{Client: mgr.GetClient(), Clock: w.clk, Recorder: w.rec, LeaseNamespace: leaseNS,
		KindRetryPeriod: 100 * time.Millisecond})
	w.g.Expect(err).NotTo(HaveOccurred())
	r.skipNameValidation = true
	w.g.Expect(r.SetupWithManager(w.ctx, mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Start(ctx)
	}()
	w.t.Cleanup(func() { cancel(); <-done })
	return log
}
