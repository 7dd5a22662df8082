package nhc

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
// unwatchableCase is how a kind is out of the manager's reach at first.
type unwatchableCase struct {
	// grantTemplates and grantRequests: what the manager may read of the kind at first.
	grantTemplates, grantRequests bool
	// installed: whether the kind's CRDs exist at first; they are installed with the fix otherwise.
	installed bool
	// reason and resource: why the check is disabled, and the resource its message names.
	reason, resource string
}

var _ = Describe("A remediation kind the manager cannot watch", func() {
	DescribeTable("disables only the checks naming it, until it is granted, and is not watched once they are gone",
		func(ctx SpecContext, tc unwatchableCase) {
			w := newWorld(ctx)
			w.clk.SetTime(t0.Add(time.Hour)) // every condition set at t0 has expired
			group := w.pool + ".wedge.example.com"
			install := func() {
				for _, kind := range []string{wedgeTemplateKind, wedgeRequestKind} {
					crd, err := testenv.CRD(ctx, k8s, group, kind)
					Expect(err).NotTo(HaveOccurred())
					DeferCleanup(func() { _ = k8s.Delete(context.Background(), crd) })
				}
				w.create(ctx, &unstructured.Unstructured{Object: map[string]any{
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
			w.grant(ctx, user+"-base", user, managerRules(group, granted...))

			log := w.startImpersonatedManager(ctx, user)

			// The bad check first (under the old code its first reconcile wedged the only worker), selecting
			// no Node; then a good check with a Node due for a request.
			ref := v1alpha1.TemplateReference{APIVersion: group + "/v1", Kind: wedgeTemplateKind, Name: "bad", Namespace: pcNS}
			bad := w.check(ctx, "bad", &ref, func(c *v1alpha1.NodeHealthCheck) {
				c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": w.pool + "-none"}}
			})
			if tc.installed {
				eventually(func() int { return log.Requests(group) }).ShouldNot(BeZero(), "the bad kind is being watched")
			}
			pc := w.pcTemplate(ctx, "pc")
			good := w.check(ctx, "good", &pc)
			sick := w.node(ctx, "w1", corev1.ConditionUnknown, t0)
			eventually(func() []string { return names(w.remediations(ctx, pcRemediation, good)) }).Should(Equal([]string{sick.Name}),
				"the other check creates its request while the bad kind is not synced")

			disabled := func() *metav1.Condition {
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(bad), bad)).To(Succeed())
				return meta.FindStatusCondition(bad.Status.Conditions, v1alpha1.ConditionDisabled)
			}
			if tc.installed {
				Expect(disabled()).To(BeNil(), "not disabled before its bound")
				eventually(w.clk.HasWaiters).Should(BeTrue(), "the bound is armed")
				w.clk.Step(kindwatch.DefaultSyncTimeout)
			}
			eventually(disabled).Should(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", tc.reason)))
			Expect(bad.Status.Phase).To(Equal(v1alpha1.PhaseDisabled))
			Expect(bad.Status.Reason).To(ContainSubstring(tc.resource))
			if tc.installed {
				Expect(bad.Status.Reason).To(ContainSubstring(kindwatch.AggregationLabel), "it says how to grant the kind")
			}
			// The event is emitted after the status write that the condition was read from.
			eventually(func() []testenv.Event { return w.rec.With(EventDisabled) }).Should(ContainElement(HaveField("Name", bad.Name)))
			w.node(ctx, "w2", corev1.ConditionUnknown, t0) // nor once the bad one is disabled
			eventually(func() []string { return names(w.remediations(ctx, pcRemediation, good)) }).Should(ContainElement(w.pool + "-w2"))

			// The fix: the permission granted (and the CRD installed). Without a restart, the check is
			// enabled again at the kind's next attempt.
			if !tc.installed {
				install()
			}
			w.grant(ctx, user+"-fix", user, managerRules(group, testenv.Plural(wedgeTemplateKind), testenv.Plural(wedgeRequestKind)))
			if tc.installed {
				w.clk.Step(kindwatch.DefaultRetryMin)
			}
			eventually(disabled).Should(HaveField("Status", metav1.ConditionFalse))
			Expect(bad.Status.Phase).To(Equal(v1alpha1.PhaseEnabled))
			eventually(func() int { return log.OpenWatches(group) }).Should(Equal(2), "its template and request kinds are watched")

			// The check is deleted: nothing watches its kinds any more.
			Expect(k8s.Delete(ctx, bad)).To(Succeed())
			eventually(func() int { return log.OpenWatches(group) }).Should(BeZero())
		},
		Entry("no role grants the kind", unwatchableCase{installed: true,
			reason: v1alpha1.ReasonRemediationKindNotWatchable, resource: testenv.Plural(wedgeTemplateKind)}),
		Entry("its templates cannot be listed", unwatchableCase{grantRequests: true, installed: true,
			reason: v1alpha1.ReasonRemediationKindNotWatchable, resource: testenv.Plural(wedgeTemplateKind)}),
		Entry("its requests cannot be listed", unwatchableCase{grantTemplates: true, installed: true,
			reason: v1alpha1.ReasonRemediationKindNotWatchable, resource: testenv.Plural(wedgeRequestKind)}),
		Entry("its CRD is not installed", unwatchableCase{
			reason: v1alpha1.ReasonTemplateNotFound, resource: wedgeTemplateKind}),
	)
})

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
func (w *world) grant(ctx context.Context, name, user string, rules []rbacv1.PolicyRule) {
	GinkgoHelper()
	revoke, err := testenv.Grant(ctx, k8s, name, user, rules)
	if revoke != nil {
		DeferCleanup(func() { _ = revoke(context.Background()) })
	}
	Expect(err).NotTo(HaveOccurred())
}

// startImpersonatedManager runs the controller in a manager acting as user, on the world's clock, for the
// rest of the spec, and records the manager's requests.
func (w *world) startImpersonatedManager(ctx context.Context, user string) *testenv.RequestLog {
	GinkgoHelper()
	log := &testenv.RequestLog{}
	w.startManager(ctx, testenv.ManagerOptions{User: user, WrapTransport: log.Wrap}, Options{KindRetryPeriod: 100 * time.Millisecond})
	return log
}
