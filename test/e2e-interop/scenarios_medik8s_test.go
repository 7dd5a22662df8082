//go:build interop

package interop

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// medik8s' NodeHealthCheck kind, and Self Node Remediation's request and template kinds (testdata/crds).
var (
	medik8sNHCGVK  = schema.GroupVersionKind{Group: "remediation.medik8s.io", Version: "v1alpha1", Kind: "NodeHealthCheck"}
	snrGVK         = schema.GroupVersionKind{Group: "self-node-remediation.medik8s.io", Version: "v1alpha1", Kind: "SelfNodeRemediation"}
	snrTemplateGVK = snrGVK.GroupVersion().WithKind("SelfNodeRemediationTemplate")
)

// multipleTemplates is medik8s' annotation on a template whose remediator accepts several requests of its
// kind for one node (escalation between two templates of one kind needs it on every template of the kind).
const multipleTemplates = "remediation.medik8s.io/multiple-templates-support"

// medik8sCheck builds a medik8s NodeHealthCheck (cluster-scoped) of the nodes with label key, unhealthy
// after `unhealthy` of Ready=Unknown or False, any number of them at once; spec adds the remediation.
func medik8sCheck(name, labelKey string, spec map[string]any) *unstructured.Unstructured {
	nhc := object(medik8sNHCGVK, "", name)
	s := map[string]any{
		"selector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": labelKey, "operator": "Exists"},
		}},
		"unhealthyConditions": []any{
			map[string]any{"type": "Ready", "status": "Unknown", "duration": unhealthy.String()},
			map[string]any{"type": "Ready", "status": "False", "duration": unhealthy.String()},
		},
		"minHealthy": int64(0),
	}
	for k, v := range spec {
		s[k] = v
	}
	nhc.Object["spec"] = s
	return nhc
}

// templateRef is a reference to a template, as medik8s' NodeHealthCheck takes it.
func templateRef(gvk schema.GroupVersionKind, namespace, name string) map[string]any {
	return map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind, "namespace": namespace, "name": name}
}

var powerCycleTemplateGVK = v1alpha1.GroupVersion.WithKind("PowerCycleRemediationTemplate")

// waitObserved waits for a medik8s NodeHealthCheck to have looked at its nodes: all of them healthy.
func waitObserved(ctx context.Context, nhc *unstructured.Unstructured, nodes int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(nhc), nhc)).To(Succeed())
		observed, _, _ := unstructured.NestedInt64(nhc.Object, "status", "observedNodes")
		healthy, _, _ := unstructured.NestedInt64(nhc.Object, "status", "healthyNodes")
		phase, _, _ := unstructured.NestedString(nhc.Object, "status", "phase")
		g.Expect(phase).To(Equal("Enabled"), "status: %v", nhc.Object["status"])
		g.Expect(observed).To(BeEquivalentTo(nodes))
		g.Expect(healthy).To(BeEquivalentTo(nodes))
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
}

var _ = Describe("medik8s' NodeHealthCheck", func() {
	It("drives metalheal with one of its templates: the node is power-cycled, medik8s ends the request once the Node is Ready (scenario 2)", func(ctx SpecContext) {
		const group = "medik8s-one"
		nodes := pool.take(ctx, group, 2)
		broken, bystander := nodes[0], nodes[1]
		powerCycleTemplate(ctx, harness.Namespace, group, reboot(), nil)
		nhc := medik8sCheck(group, groupLabel, map[string]any{
			"selector":            map[string]any{"matchLabels": map[string]any{groupLabel: group}},
			"remediationTemplate": templateRef(powerCycleTemplateGVK, harness.Namespace, group),
		})
		create(ctx, nhc)
		waitObserved(ctx, nhc, 2)

		By("the node's kubelet hangs")
		breakNode(ctx, broken, nodesim.FaultTransient)

		By("medik8s takes the node's lease and creates the request, named after the node (the template does not say it supports several)")
		key := client.ObjectKey{Namespace: harness.Namespace, Name: broken}
		pcr := &v1alpha1.PowerCycleRemediation{}
		Eventually(func() error { return k8s.Get(ctx, key, pcr) }).
			WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
		Expect(pcr.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationNodeName, broken))
		Expect(pcr.OwnerReferences).To(ConsistOf(And(HaveField("Kind", "NodeHealthCheck"), HaveField("APIVersion", medik8sNHCGVK.GroupVersion().String()))))
		Expect(leaseHolder(ctx, broken)).To(Equal("NodeHealthCheck-"+group), "medik8s holds the node for its remediator")

		By("metalheal power-cycles the host; medik8s deletes the request once the Node is Ready; the finalizer cleans up")
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, key, pcr)
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			g.Expect(err).To(HaveOccurred(), "the request is still there: phase %q, finalizers %v", pcr.Status.Phase, pcr.Finalizers)
		}).WithContext(ctx).WithTimeout(remedyWait).WithPolling(poll).Should(Succeed())
		Expect(resets(broken)).To(Equal([]string{"ForceOff", "On"}))
		expectSettled(ctx, nodes...)
		Expect(resets(bystander)).To(BeEmpty())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(nhc), nhc)).To(Succeed())
			g.Expect(nhc.Object["status"]).NotTo(HaveKey("unhealthyNodes"))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	}, SpecTimeout(scenarioMax))

	It("escalates between two metalheal templates on a host that never comes back: power-cycled, then left powered off and fenced (scenario 3)", func(ctx SpecContext) {
		const group = "medik8s-escalation"
		broken := pool.take(ctx, group, 1)[0]
		cycle := powerCycleTemplate(ctx, harness.Namespace, "escalation-power-cycle", reboot(func(s *v1alpha1.PowerCycleRemediationSpec) {
			s.Strategy = v1alpha1.StrategyEscalate
			s.DeleteAfterRetries = ptr.To[int32](1)
			s.PowerOnTimeoutSeconds = 10
		}), nil)
		off := powerCycleTemplate(ctx, harness.Namespace, "escalation-power-off", reboot(func(s *v1alpha1.PowerCycleRemediationSpec) {
			s.Strategy = v1alpha1.StrategyPowerOff
		}), nil)
		nhc := medik8sCheck(group, groupLabel, map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{groupLabel: group}},
			"escalatingRemediations": []any{
				map[string]any{"order": int64(0), "timeout": "2m", "remediationTemplate": templateRef(powerCycleTemplateGVK, harness.Namespace, cycle.Name)},
				map[string]any{"order": int64(1), "timeout": "2m", "remediationTemplate": templateRef(powerCycleTemplateGVK, harness.Namespace, off.Name)},
			},
		})

		By("medik8s refuses two templates of one kind unless every template of the kind says it supports several")
		err := k8s.Create(ctx, nhc.DeepCopy())
		Expect(err).To(MatchError(ContainSubstring("duplicate template kind")))
		for _, t := range []*v1alpha1.PowerCycleRemediationTemplate{cycle, off} {
			patch := client.MergeFrom(t.DeepCopy())
			t.Annotations = map[string]string{multipleTemplates: "true"}
			Expect(k8s.Patch(ctx, t, patch)).To(Succeed())
		}
		create(ctx, nhc)
		waitObserved(ctx, nhc, 1)

		By("the host breaks for good")
		breakNode(ctx, broken, nodesim.FaultPersistent)

		By("the first step power-cycles once, gives up, leaves the host off and fenced; medik8s moves to the second step")
		var first, second *v1alpha1.PowerCycleRemediation
		Eventually(func(g Gomega) {
			pcrs, err := powerCycleRemediationsOf(ctx, broken)
			g.Expect(err).NotTo(HaveOccurred())
			first, second = nil, nil
			for i := range pcrs {
				switch pcrs[i].Annotations[v1alpha1.AnnotationTemplateName] {
				case cycle.Name:
					first = &pcrs[i]
				case off.Name:
					second = &pcrs[i]
				}
			}
			g.Expect(first).NotTo(BeNil(), "no request from the first template")
			g.Expect(second).NotTo(BeNil(), "no request from the second template yet; first: phase %q, conditions %v", first.Status.Phase, first.Status.Conditions)
		}).WithContext(ctx).WithTimeout(remedyWait).WithPolling(poll).Should(Succeed())
		Expect(first.Name).To(HavePrefix(broken+"-"), "with the annotation, medik8s generates request names")
		Expect(first.Annotations).To(HaveKey(v1alpha1.AnnotationTimedOut))
		Expect(conditionStatus(first.Status.Conditions, v1alpha1.ConditionSucceeded)).To(Equal(metav1.ConditionFalse))
		Expect(len(resets(broken))).To(BeNumerically(">=", 3))
		Expect(resets(broken)[:3]).To(Equal([]string{"ForceOff", "On", "ForceOff"}), "one power cycle, then the power-off of the give-up")

		By("at the end the host is powered off and the Node fenced with the out-of-service taint, and it stays so")
		Eventually(func(g Gomega) {
			g.Expect(hostPower(broken)).To(Equal(redfishmock.PowerOff))
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintOutOfService)).To(BeTrue())
			p := &v1alpha1.PowerCycleRemediation{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(first), p)).To(Succeed())
			g.Expect(conditionStatus(p.Status.Conditions, v1alpha1.ConditionProcessing)).To(Equal(metav1.ConditionFalse),
				"the timed-out first step hands the host over")
			g.Expect(p.Finalizers).NotTo(BeEmpty(), "and keeps its finalizer until it is deleted")
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(hostPower(broken)).To(Equal(redfishmock.PowerOff))
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintOutOfService)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(checkWindow).WithPolling(poll).Should(Succeed())
		Expect(resets(broken)[3:]).NotTo(ContainElement("On"), "no step powered the fenced host back on: %v", resets(broken))

		By("an administrator repairs the host and powers it on: medik8s deletes its requests once the Node is Ready, and they clean up")
		// medik8s' webhook refuses to delete a NodeHealthCheck while it remediates: the repair ends it.
		Expect(h.Sim.ClearFault(broken)).To(Succeed())
		Expect(h.Mock.SetPowerState(harness.SystemID(broken), redfishmock.PowerOn)).To(Succeed())
		expectSettled(ctx, broken)
	}, SpecTimeout(scenarioMax))
})

var _ = Describe("metalheal's NodeHealthCheck beside medik8s'", func() {
	It("creates the same SelfNodeRemediation as medik8s', but where docs/interop.md says why, and the two checks never share a node (scenario 4)", func(ctx SpecContext) {
		const name = "snr-check" // both checks have this name: their lease holders must still differ
		const oursKey, theirsKey = "interop.metalheal.io/snr-metalheal", "interop.metalheal.io/snr-medik8s"
		nodes := pool.take(ctx, "snr", 3)
		oursNode, theirsNode, shared := nodes[0], nodes[1], nodes[2]
		label(ctx, oursNode, oursKey)
		label(ctx, theirsNode, theirsKey)
		label(ctx, shared, oursKey, theirsKey)

		By("each check uses an identical Self Node Remediation template, each in its own namespace")
		for _, ns := range []string{snrNamespace, snrPeerNamespace} {
			tpl := object(snrTemplateGVK, ns, "self-node-remediation-automatic-strategy-template")
			Expect(unstructured.SetNestedField(tpl.Object, "Automatic", "spec", "template", "spec", "remediationStrategy")).To(Succeed())
			create(ctx, tpl)
		}
		ours := &v1alpha1.NodeHealthCheck{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.NodeHealthCheckSpec{
				Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: oursKey, Operator: metav1.LabelSelectorOpExists}}},
				UnhealthyConditions: []v1alpha1.NodeUnhealthyCondition{
					{Type: "Ready", Status: "Unknown", Duration: metav1.Duration{Duration: unhealthy}},
					{Type: "Ready", Status: "False", Duration: metav1.Duration{Duration: unhealthy}},
				},
				MaxUnhealthy: ptrIntOrString(intstr.FromString("100%")),
				RemediationTemplate: &v1alpha1.TemplateReference{APIVersion: snrTemplateGVK.GroupVersion().String(),
					Kind: snrTemplateGVK.Kind, Namespace: snrNamespace, Name: "self-node-remediation-automatic-strategy-template"},
				HealthyDelay:          &metav1.Duration{},
				StormCooldownDuration: &metav1.Duration{},
			},
		}
		create(ctx, ours)
		theirs := medik8sCheck(name, theirsKey, map[string]any{
			"remediationTemplate": templateRef(snrTemplateGVK, snrPeerNamespace, "self-node-remediation-automatic-strategy-template"),
		})
		create(ctx, theirs)
		waitObserved(ctx, theirs, 2)

		By("the three nodes' kubelets hang; no Self Node Remediation runs, so the requests stay until the nodes recover")
		for _, n := range nodes {
			breakNode(ctx, n, nodesim.FaultTransient)
		}
		var mine, peer *unstructured.Unstructured
		Eventually(func(g Gomega) {
			mine = object(snrGVK, snrNamespace, oursNode)
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
			peer = object(snrGVK, snrPeerNamespace, theirsNode)
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(peer), peer)).To(Succeed())
			g.Expect(snrsOf(ctx, shared)).To(HaveLen(1), "the shared node gets a request from the check holding its lease")
		}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())

		By("the node both checks select is remediated by one of them only, the holder of its lease")
		Consistently(func(g Gomega) {
			snrs, err := snrsOf(ctx, shared)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(snrs).To(HaveLen(1))
			holder, err := leaseHolder(ctx, shared)
			g.Expect(err).NotTo(HaveOccurred())
			if snrs[0].GetNamespace() == snrNamespace {
				g.Expect(holder).To(Equal(oursHolder(name)))
			} else {
				g.Expect(holder).To(Equal("NodeHealthCheck-" + name))
			}
		}).WithContext(ctx).WithTimeout(checkWindow).WithPolling(poll).Should(Succeed())
		By("the two checks of one name hold leases under different identities")
		Expect(leaseHolder(ctx, oursNode)).To(Equal(oursHolder(name)))
		Expect(leaseHolder(ctx, theirsNode)).To(Equal("NodeHealthCheck-" + name))

		By("the two requests, compared field by field")
		diffs := compareRequests(mine, peer, map[string]string{
			oursNode: "<node>", theirsNode: "<node>", snrNamespace: "<namespace>", snrPeerNamespace: "<namespace>", name: "<check>",
			string(ours.UID): "<check-uid>", string(theirs.GetUID()): "<check-uid>", nodeUID(ctx, oursNode): "<node-uid>",
		})
		AddReportEntry("SelfNodeRemediation: metalheal's NodeHealthCheck vs medik8s'", diffs.String())
		Expect(diffs.paths()).To(ConsistOf(snrDifferences), "the differences docs/interop.md explains:\n%s", diffs)

		By("the nodes recover: each check deletes its own request and releases its lease")
		for _, n := range nodes {
			Expect(h.Sim.ClearFault(n)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, ns := range []string{snrNamespace, snrPeerNamespace} {
				left, err := listOf(ctx, snrGVK, ns)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(left).To(BeEmpty())
			}
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		expectSettled(ctx, nodes...)
	}, SpecTimeout(scenarioMax))
})

// snrDifferences are the paths where metalheal's NodeHealthCheck's SelfNodeRemediation differs from
// medik8s', every one explained in docs/interop.md ("What differs in the requests").
var snrDifferences = []string{
	"metadata.annotations[cluster.x-k8s.io/cloned-from-groupkind]",
	"metadata.annotations[cluster.x-k8s.io/cloned-from-name]",
	"metadata.labels[app.kubernetes.io/part-of]",
	"metadata.ownerReferences[v1 Node]",
	"metadata.ownerReferences[remediation.metalheal.io/v1alpha1 NodeHealthCheck]",
	"metadata.ownerReferences[remediation.medik8s.io/v1alpha1 NodeHealthCheck]",
}

// snrPeerNamespace holds medik8s' Self Node Remediation template in scenario 4.
const snrPeerNamespace = "interop-snr-peer"

// oursHolder is the lease holder identity of metalheal's NodeHealthCheck of a name.
func oursHolder(name string) string { return "NodeHealthCheck.remediation.metalheal.io-" + name }

// label adds label keys (value "true") to a node.
func label(ctx context.Context, node string, keys ...string) {
	GinkgoHelper()
	n := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	patch := client.MergeFrom(n.DeepCopy())
	for _, k := range keys {
		n.Labels[k] = "true"
	}
	Expect(k8s.Patch(ctx, n, patch)).To(Succeed())
}

// snrsOf lists the SelfNodeRemediations, in any namespace, for a node.
func snrsOf(ctx context.Context, node string) ([]unstructured.Unstructured, error) {
	all, err := listOf(ctx, snrGVK, "")
	if err != nil {
		return nil, err
	}
	var of []unstructured.Unstructured
	for _, s := range all {
		if s.GetName() == node || s.GetAnnotations()[v1alpha1.AnnotationNodeName] == node {
			of = append(of, s)
		}
	}
	return of, nil
}

func nodeUID(ctx context.Context, node string) string {
	GinkgoHelper()
	n := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	return string(n.UID)
}

func conditionStatus(conds []metav1.Condition, condType string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(conds, condType); c != nil {
		return c.Status
	}
	return ""
}
