//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
)

// remediation is a PowerCycleRemediationTemplate's spec with the world's short timings: power-off
// confirmed within 10s, the node Ready within 20s of power-on, 1s between attempts. Options change it.
func remediation(opts ...func(*v1alpha1.PowerCycleRemediationSpec)) v1alpha1.PowerCycleRemediationSpec {
	s := v1alpha1.PowerCycleRemediationSpec{
		Strategy:               v1alpha1.StrategyReboot,
		PowerOffTimeoutSeconds: 10,
		PowerOnTimeoutSeconds:  20,
		RetryBackoff: &v1alpha1.RetryBackoff{
			Initial: metav1.Duration{Duration: time.Second},
			Max:     metav1.Duration{Duration: 2 * time.Second},
		},
		OutOfServiceTaint: ptr.To(true),
	}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// createTemplate creates a PowerCycleRemediationTemplate in namespace and deletes it afterwards.
func createTemplate(ctx context.Context, namespace, name string, spec v1alpha1.PowerCycleRemediationSpec) *v1alpha1.PowerCycleRemediationTemplate {
	GinkgoHelper()
	t := &v1alpha1.PowerCycleRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       v1alpha1.PowerCycleRemediationTemplateSpec{Template: v1alpha1.PowerCycleRemediationTemplateResource{Spec: spec}},
	}
	Expect(k8s.Create(ctx, t)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, t))).To(Succeed()) })
	return t
}

// createNodeHealthCheck creates a NodeHealthCheck of a scenario's group, remediating with a template of
// the same name in the manager's namespace, and deletes it afterwards. Nodes are unhealthy after
// conditionDuration of Ready=Unknown or Ready=False.
func createNodeHealthCheck(ctx context.Context, group string, mutate ...func(*v1alpha1.NodeHealthCheck)) *v1alpha1.NodeHealthCheck {
	GinkgoHelper()
	nhc := &v1alpha1.NodeHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: group},
		Spec: v1alpha1.NodeHealthCheckSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{groupLabel: group}},
			UnhealthyConditions: []v1alpha1.NodeUnhealthyCondition{
				{Type: "Ready", Status: "Unknown", Duration: metav1.Duration{Duration: conditionDuration}},
				{Type: "Ready", Status: "False", Duration: metav1.Duration{Duration: conditionDuration}},
			},
			RemediationTemplate: &v1alpha1.TemplateReference{
				APIVersion: v1alpha1.GroupVersion.String(),
				Kind:       "PowerCycleRemediationTemplate",
				Name:       group,
				Namespace:  harness.Namespace,
			},
			HealthyDelay:          &metav1.Duration{},
			StormCooldownDuration: &metav1.Duration{},
		},
	}
	for _, m := range mutate {
		m(nhc)
	}
	Expect(k8s.Create(ctx, nhc)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, nhc))).To(Succeed()) })
	return nhc
}

// maxUnhealthy sets a check's budget.
func maxUnhealthy(v intstr.IntOrString) func(*v1alpha1.NodeHealthCheck) {
	return func(n *v1alpha1.NodeHealthCheck) { n.Spec.MaxUnhealthy = &v }
}

// unhealthyFor sets how long Ready must be Unknown or False before a check acts.
func unhealthyFor(d time.Duration) func(*v1alpha1.NodeHealthCheck) {
	return func(n *v1alpha1.NodeHealthCheck) {
		for i := range n.Spec.UnhealthyConditions {
			n.Spec.UnhealthyConditions[i].Duration = metav1.Duration{Duration: d}
		}
	}
}

// remediateGroup creates, for a scenario's group, a template with spec and a NodeHealthCheck using it
// that allows up to allowed unhealthy nodes.
func remediateGroup(ctx context.Context, group string, allowed int, spec v1alpha1.PowerCycleRemediationSpec) {
	GinkgoHelper()
	createTemplate(ctx, harness.Namespace, group, spec)
	createNodeHealthCheck(ctx, group, maxUnhealthy(intstr.FromInt32(int32(allowed))))
}

// pcrKey is the remediation request a NodeHealthCheck makes for a node.
func pcrKey(node string) client.ObjectKey {
	return client.ObjectKey{Namespace: harness.Namespace, Name: node}
}

// getPCR reads a remediation request; nil when it does not exist.
func getPCR(ctx context.Context, key client.ObjectKey) (*v1alpha1.PowerCycleRemediation, error) {
	pcr := &v1alpha1.PowerCycleRemediation{}
	if err := k8s.Get(ctx, key, pcr); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return pcr, nil
}

// expectRecorded checks that node's BMC records the remediation of request, which is gone: one record, with
// result, the request's check, and the power cycle's off and on, each confirmed by the BMC.
func expectRecorded(ctx context.Context, node string, request *v1alpha1.PowerCycleRemediation, result v1alpha1.RemediationResult) {
	GinkgoHelper()
	expectRecordedOn(ctx, node, node, request, result, "NodeHealthCheck")
}

// expectRecordedOn is expectRecorded for the BMC of a name (in harness.Namespace) and a check of a kind.
func expectRecordedOn(ctx context.Context, bmcName, node string, request *v1alpha1.PowerCycleRemediation, result v1alpha1.RemediationResult, checkKind string) {
	GinkgoHelper()
	b := &v1alpha1.BMC{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: harness.Namespace, Name: bmcName}, b)).To(Succeed())
	var found []v1alpha1.RemediationRecord
	for _, r := range b.Status.RecentRemediations {
		if r.UID == request.UID {
			found = append(found, r)
		}
	}
	Expect(found).To(HaveLen(1), "one record of %s/%s on BMC %s: %+v", request.Namespace, request.Name, bmcName, b.Status.RecentRemediations)
	rec := found[0]
	Expect(rec.Name).To(Equal(request.Name))
	Expect(rec.NodeName).To(Equal(node))
	Expect(rec.Result).To(Equal(result), "%s: %s", rec.Reason, rec.Message)
	Expect(rec.Started).To(Equal(request.CreationTimestamp))
	Expect(rec.Finished.Before(&rec.Started)).To(BeFalse())
	Expect(rec.HealthCheck).NotTo(BeNil())
	Expect(rec.HealthCheck.Kind).To(Equal(checkKind))
	var power []string
	for _, c := range rec.PowerChanges {
		Expect(c.Confirmed).NotTo(BeNil(), "the BMC confirmed the %s", c.Target)
		power = append(power, string(c.Target))
	}
	Expect(power).To(Equal([]string{"Off", "On"}))
}
