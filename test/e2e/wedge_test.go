//go:build e2e

package e2e

import (
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// wedgeGroup is the API group of a remediation kind that no ClusterRole grants the manager: its CRDs
// exist, the manager may not list them. The manager logs refusals for it (the suite's end allows them).
const wedgeGroup = "e2e-wedge.example.com"

const (
	wedgeTemplateKind = "WedgeRemediationTemplate"
	wedgeRequestKind  = "WedgeRemediation"
	// detectionSlack is how much later than conditionDuration after a Node goes Unknown its request may be
	// created: as fast as with no other check (a few hundred milliseconds here).
	detectionSlack = 5 * time.Second
	// disableSlack is how much later than its bound a check naming the kind may be disabled.
	disableSlack = 15 * time.Second
	// quietWait is how long the log must stay free of the kind after its check is deleted: past the
	// watcher's first retry, and the informer's own retries, were anything of it left.
	quietWait = kindwatch.DefaultRetryMin + 10*time.Second
)

var _ = Describe("A NodeHealthCheck naming a kind no role grants", func() {
	It("is disabled within its bound, while another check's node that loses power is remediated on time; once deleted, nothing of it is watched", func(ctx SpecContext) {
		m := mgrs.ensure(ctx)
		start := time.Now()
		const group = "wedge"
		node := pool.take(ctx, group, 1)[0]
		reportOnFailure(start, node)
		remediateGroup(ctx, group, 1, remediation())
		for _, kind := range []string{wedgeTemplateKind, wedgeRequestKind} {
			crd, err := testenv.CRD(ctx, k8s, wedgeGroup, kind)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, crd))).To(Succeed()) })
		}
		tpl := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": wedgeGroup + "/v1", "kind": wedgeTemplateKind,
			"metadata": map[string]any{"name": group, "namespace": harness.Namespace},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{}}},
		}}
		Expect(k8s.Create(ctx, tpl)).To(Succeed())

		By("a second check names the kind; the manager starts watching it")
		logStart := logSize(m)
		created := time.Now()
		bad := createNodeHealthCheck(ctx, group+"-bad", func(n *v1alpha1.NodeHealthCheck) {
			n.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{groupLabel: group + "-none"}}
			n.Spec.RemediationTemplate = &v1alpha1.TemplateReference{APIVersion: wedgeGroup + "/v1", Kind: wedgeTemplateKind,
				Name: group, Namespace: harness.Namespace}
		})
		Eventually(func() ([]string, error) { return logLines(m, logStart, "Watching kind", "Kind="+wedgeTemplateKind) }).
			WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).ShouldNot(BeEmpty())

		By("a host of the first check loses power meanwhile: its request comes as fast as ever")
		Expect(h.Mock.SetPowerState(harness.SystemID(node), redfishmock.PowerOff)).To(Succeed())
		Eventually(func() (*v1alpha1.PowerCycleRemediation, error) { return getPCR(ctx, pcrKey(node)) }).
			WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).ShouldNot(BeNil())
		unknown := tl.at("node/"+node, "Ready=Unknown", start)
		requested := tl.at("pcr/"+harness.Namespace+"/"+node, "created", start)
		Expect(requested.Sub(unknown)).To(BeNumerically("<=", conditionDuration+detectionSlack),
			"the request came %s after the node went Unknown", requested.Sub(unknown))

		By("the check naming the kind is disabled within its bound, saying what to grant")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(bad), bad)).To(Succeed())
			g.Expect(bad.Status.Phase).To(Equal(v1alpha1.PhaseDisabled))
			c := meta.FindStatusCondition(bad.Status.Conditions, v1alpha1.ConditionDisabled)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonRemediationKindNotWatchable))
			g.Expect(c.Message).To(And(ContainSubstring(testenv.Plural(wedgeTemplateKind)), ContainSubstring(kindwatch.AggregationLabel)))
		}).WithContext(ctx).WithTimeout(time.Until(created.Add(kindwatch.DefaultSyncTimeout + disableSlack))).WithPolling(poll).Should(Succeed())

		expectSettled(ctx, node)
		expectCheckSettled(ctx, group)

		By("the check is deleted: the manager stops watching the kind, and the log stays free of it")
		deleted := logSize(m)
		Expect(k8s.Delete(ctx, bad)).To(Succeed())
		for _, kind := range []string{wedgeTemplateKind, wedgeRequestKind} {
			Eventually(func() ([]string, error) { return logLines(m, deleted, "Stopped watching kind", "Kind="+kind+`"`) }).
				WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).ShouldNot(BeEmpty())
		}
		quiet := logSize(m)
		Consistently(func() ([]string, error) { return logLines(m, quiet, wedgeGroup) }).
			WithContext(ctx).WithTimeout(quietWait).WithPolling(time.Second).Should(BeEmpty())
	}, SpecTimeout(scenarioMax))
})

// logSize is how long a manager's log is now: where to read it from for what happens next.
func logSize(m *harness.Manager) int64 {
	GinkgoHelper()
	info, err := os.Stat(m.LogPath)
	Expect(err).NotTo(HaveOccurred())
	return info.Size()
}

// logLines returns the lines of a manager's log from offset on that contain every one of words.
func logLines(m *harness.Manager, offset int64, words ...string) ([]string, error) {
	b, err := os.ReadFile(m.LogPath)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b[min(offset, int64(len(b))):]), "\n") {
		all := line != ""
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			out = append(out, line)
		}
	}
	return out, nil
}
