package mhc

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
)

// Whoever may write a MachineHealthCheck names its templates, and the kind of request a template makes
// is the template's kind minus "Template". Naming "v1 NodeTemplate", "v1 PodTemplate" (a built-in kind
// that does end in Template) or "cluster.x-k8s.io/v1beta2 MachineTemplate" must not make the manager,
// which every check shares, list and cache every Node, Pod or Machine once more, as unstructured objects
// no transform slims: the check is disabled saying why, and nothing of those kinds is requested from the
// API server. The other checks go on.
var _ = Describe("A check naming built-in or Cluster API kinds as remediation kinds", func() {
	It("makes the manager watch none of them, is disabled saying why, and stops no other check", func(ctx SpecContext) {
		w := newWorld(ctx)
		log := &testenv.RequestLog{}
		w.runManager(ctx, testenv.ManagerOptions{WrapTransport: log.Wrap}, Options{})

		By("a check with a real remediation template works: Machines, Nodes and its kind are watched")
		w.createTemplate(ctx, "reboot", "reboot")
		sick := w.createNode(ctx, k8s, w.nodeName("g"), corev1.ConditionUnknown, time.Hour)
		w.createMachine(ctx, "good-m", withLabels("pool", "g"), withNodeRef(sick.Name))
		w.createCheck(ctx, "good", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "g"}
			mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot"))
		})
		Eventually(func() int { return len(w.powerCycleRemediations(ctx)) }).WithTimeout(eventuallyTimeout).Should(Equal(1))
		nodesPath, podsPath := "/api/v1/nodes", "/api/v1/namespaces/"+w.ns+"/pods"
		machinesPath := "/apis/cluster.x-k8s.io/v1beta2/namespaces/" + w.ns + "/machines"
		nodes, pods, machines := log.RequestsTo(nodesPath), log.RequestsTo(podsPath), log.RequestsTo(machinesPath)
		Expect(nodes).NotTo(BeZero(), "the typed Node informer is the baseline")
		Expect(machines).NotTo(BeZero(), "the typed Machine informer is the baseline")

		By("a namespace's check names Nodes, Pods and Machines as its remediation kinds")
		step := func(order int32, apiVersion, kind string) v1alpha1.EscalatingRemediation {
			return v1alpha1.EscalatingRemediation{Order: order, Timeout: metav1.Duration{Duration: time.Minute},
				RemediationTemplate: v1alpha1.TemplateReference{APIVersion: apiVersion, Kind: kind, Name: "x"}}
		}
		bad := w.createCheck(ctx, "bad", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "b"}
			mhc.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
				step(1, "v1", "NodeTemplate"), step(2, "v1", "PodTemplate"), step(3, "cluster.x-k8s.io/v1beta2", "MachineTemplate")}
		})
		// Whatever the controller decides, it writes a condition of this generation once it has looked.
		Eventually(func() []metav1.Condition { return w.check(ctx, bad.Name).Status.Conditions }).WithTimeout(eventuallyTimeout).
			Should(ContainElement(HaveField("ObservedGeneration", bad.Generation)))

		Expect(log.RequestsTo(nodesPath)).To(Equal(nodes), "no second informer lists or watches every Node")
		Expect(log.RequestsTo(podsPath)).To(Equal(pods), "no informer lists or watches Pods")
		Expect(log.RequestsTo(machinesPath)).To(Equal(machines), "no second informer lists or watches every Machine")
		Expect(meta.FindStatusCondition(w.check(ctx, bad.Name).Status.Conditions, v1alpha1.ConditionDisabled)).To(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonRemediationKindRefused),
			HaveField("Message", And(ContainSubstring("Node"), ContainSubstring("not a remediation kind")))))
		Eventually(w.rec.all).WithTimeout(eventuallyTimeout).Should(ContainElement(And(HaveField("Name", bad.Name),
			HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", EventDisabled))))
		Expect(w.powerCycleRemediations(ctx)).To(HaveLen(1), "the good check's request is still the only one")
	})
})
