package mhc

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/internal/testenv"
)

// A check naming a remediation kind the manager may not list (its own RBAC, in a real manager): only
// that check is disabled, at the kind watch's bound (fake clock), with a reason naming the kind and the
// missing permission; another check creates its request meanwhile. Granting the permission enables the
// check again without a restart, and deleting the check stops the kind's watch. Before kindwatch, each
// reconcile of such a check held a worker for 30s and failed.
var _ = Describe("A remediation kind the manager cannot watch", func() {
	It("disables only the checks naming it, until it is granted, and is not watched once they are gone", func(ctx SpecContext) {
		w := newWorld(ctx)
		group := w.ns + ".wedge.example.com"
		for _, kind := range []string{"WedgeRemediationTemplate", "WedgeRemediation"} {
			crd, err := testenv.CRD(ctx, k8s, group, kind)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, crd))).To(Succeed()) })
		}
		Expect(k8s.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1", "kind": "WedgeRemediationTemplate",
			"metadata": map[string]any{"name": "bad", "namespace": w.ns}, "spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}}})).
			To(Succeed())
		user := "mhc-" + w.ns
		grant(ctx, user+"-base", user, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{rbacv1.VerbAll}},
			{APIGroups: []string{clusterv1.GroupVersion.Group}, Resources: []string{rbacv1.ResourceAll}, Verbs: []string{rbacv1.VerbAll}},
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{rbacv1.ResourceAll}, Verbs: []string{rbacv1.VerbAll}},
		})

		log := &testenv.RequestLog{}
		w.runManager(ctx, testenv.ManagerOptions{User: user, WrapTransport: log.Wrap}, Options{})

		By("a check naming the kind, selecting no Machine, and a check with an unhealthy Machine")
		bad := w.createCheck(ctx, "bad", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "none"}
			mhc.Spec.RemediationTemplate = &v1alpha1.TemplateReference{APIVersion: group + "/v1", Kind: "WedgeRemediationTemplate", Name: "bad"}
		})
		Eventually(func() int { return log.Requests(group) }).WithTimeout(eventuallyTimeout).ShouldNot(BeZero(), "the bad kind is being watched")
		w.createTemplate(ctx, "reboot", "reboot")
		sick := w.createNode(ctx, k8s, w.nodeName("g"), corev1.ConditionUnknown, time.Hour)
		w.createMachine(ctx, "good-m", withLabels("pool", "g"), withNodeRef(sick.Name))
		w.createCheck(ctx, "good", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "g"}
			mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot"))
		})
		Eventually(func() []string {
			var out []string
			for _, emr := range w.powerCycleRemediations(ctx) {
				out = append(out, emr.GetName())
			}
			return out
		}).WithTimeout(10*time.Second).Should(Equal([]string{"good-m"}), "the other check creates its request while the bad kind is not synced")

		disabled := func() *metav1.Condition {
			return meta.FindStatusCondition(w.check(ctx, bad.Name).Status.Conditions, v1alpha1.ConditionDisabled)
		}
		Expect(disabled()).To(BeNil(), "not disabled before its bound")

		By("the bound passes: the check is disabled, saying which kind and how to grant it")
		Eventually(w.clock.HasWaiters).WithTimeout(eventuallyTimeout).Should(BeTrue())
		w.clock.Step(kindwatch.DefaultSyncTimeout)
		Eventually(disabled).WithTimeout(eventuallyTimeout).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", v1alpha1.ReasonRemediationKindNotWatchable),
			HaveField("Message", And(ContainSubstring("wedgeremediations"), ContainSubstring(kindwatch.AggregationLabel)))))
		// The event follows the status write that Eventually saw above.
		Eventually(w.rec.all).WithTimeout(eventuallyTimeout).Should(ContainElement(And(HaveField("Name", bad.Name), HaveField("Reason", EventDisabled))))

		By("the kind is granted: the check is enabled at the next attempt, without a restart")
		grant(ctx, user+"-fix", user, []rbacv1.PolicyRule{
			{APIGroups: []string{group}, Resources: []string{rbacv1.ResourceAll}, Verbs: []string{rbacv1.VerbAll}},
		})
		w.clock.Step(kindwatch.DefaultRetryMin)
		Eventually(disabled).WithTimeout(eventuallyTimeout).Should(HaveField("Status", metav1.ConditionFalse))
		Expect(w.rec.all()).To(ContainElement(And(HaveField("Name", bad.Name), HaveField("Reason", EventEnabled))))
		Eventually(func() int { return log.OpenWatches(group) }).WithTimeout(eventuallyTimeout).Should(Equal(2), "its template and request kinds")

		By("the check is deleted: nothing watches the kind any more")
		Expect(k8s.Delete(ctx, bad)).To(Succeed())
		Eventually(func() int { return log.OpenWatches(group) }).WithTimeout(eventuallyTimeout).Should(BeZero())
	})
})

// grant gives user the rules for the rest of the spec.
func grant(ctx context.Context, name, user string, rules []rbacv1.PolicyRule) {
	GinkgoHelper()
	revoke, err := testenv.Grant(ctx, k8s, name, user, rules)
	if revoke != nil {
		DeferCleanup(func(ctx context.Context) { Expect(revoke(ctx)).To(Succeed()) })
	}
	Expect(err).NotTo(HaveOccurred())
}
