//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The recorder is a remediator of the suite's own: its kind RecordingRemediation (with templates
// RecordingRemediationTemplate) is what a third-party remediator ships, and the recorder only says that it
// acts (Processing=True) on each request it sees, and records what it sees. It never touches a host.
var (
	recorderGroup    = "recorder.e2e.metalheal.io"
	recordingGVK     = schema.GroupVersionKind{Group: recorderGroup, Version: "v1", Kind: "RecordingRemediation"}
	recordingTmplGVK = schema.GroupVersionKind{Group: recorderGroup, Version: "v1", Kind: "RecordingRemediationTemplate"}
)

// escalateOnce power-cycles once, waiting 10s for the node, then leaves the host off and fenced with
// Succeeded=False.
func escalateOnce(s *v1alpha1.PowerCycleRemediationSpec) {
	s.Strategy = v1alpha1.StrategyEscalate
	s.DeleteAfterRetries = ptr.To[int32](1)
	s.PowerOnTimeoutSeconds = 10
}

var _ = Describe("One hand per host", func() {
	It("a NodeHealthCheck escalating from a power cycle to another remediator: the fenced host is handed over as it is, and the next request starts only when the first is done with it", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		const group = "handover-nhc"
		nodes := pool.take(ctx, group, 2)
		broken, bystander := nodes[0], nodes[1]
		reportOnFailure(start, nodes...)
		installRecorder(ctx)

		createTemplate(ctx, harness.Namespace, group, remediation(escalateOnce))
		createRecordingTemplate(ctx, harness.Namespace, group+"-record")
		createNodeHealthCheck(ctx, group, maxUnhealthy(intstr.FromInt32(1)), func(n *v1alpha1.NodeHealthCheck) {
			first := *n.Spec.RemediationTemplate
			n.Spec.RemediationTemplate = nil
			n.Spec.EscalatingRemediations = []v1alpha1.EscalatingRemediation{
				{RemediationTemplate: first, Order: 0, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
				{RemediationTemplate: v1alpha1.TemplateReference{APIVersion: recordingTmplGVK.GroupVersion().String(),
					Kind: recordingTmplGVK.Kind, Name: group + "-record", Namespace: harness.Namespace},
					Order: 1, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
			}
		})
		pcr := pcrKey(broken)
		pcrObj := "pcr/" + pcr.Namespace + "/" + pcr.Name
		recObj := "rec/" + harness.Namespace + "/" + broken

		By("the host breaks for good")
		Expect(h.Sim.InjectFault(broken, nodesim.FaultPersistent)).To(Succeed())

		By("one power cycle fails; our remediator leaves the host off and fenced and gives up (Succeeded=False)")
		Eventually(func() bool { return tl.has(pcrObj, "Succeeded=False", start) }).
			WithContext(ctx).WithTimeout(remedyWait).WithPolling(poll).Should(BeTrue())

		By("the check moves on to the recorder only once our request has handed the host over")
		Eventually(func() bool { return tl.has(recObj, "Processing=True", start) }).
			WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(BeTrue(), func() string { return tl.dump(start, broken) })
		tl.storedBefore(ctx, start, [2]string{pcrObj, "timed-out"}, [2]string{recObj, "created"})
		p, err := getPCR(ctx, pcr)
		Expect(err).NotTo(HaveOccurred())
		Expect(p).NotTo(BeNil())
		Expect(conditionOf(p, v1alpha1.ConditionProcessing).Status).To(Equal(metav1.ConditionFalse), "our request is done with the host")

		By("the host stays as our remediator left it: off and fenced, while the recorder holds it")
		Consistently(func(g Gomega) {
			g.Expect(hostPower(broken)).To(Equal(string(redfishmock.PowerOff)))
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintOutOfService)).To(BeTrue())
			p, err := getPCR(ctx, pcr)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).NotTo(BeNil(), "the check keeps every request while the node is unhealthy")
		}).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(poll).Should(Succeed())
		Expect(resets(broken)).To(Equal([]string{"ForceOff", "On", "ForceOff"}), "one power cycle, then the fence; never powered on after it")
		expectFencedThroughout(start, broken)
		expectOneHand(ctx, start, broken, pcrObj, recObj)

		By("an administrator repairs the host and powers it on: the check deletes both requests, our remediator cleans up as the last one")
		Expect(h.Sim.ClearFault(broken)).To(Succeed())
		Expect(h.Mock.SetPowerState(harness.SystemID(broken), redfishmock.PowerOn)).To(Succeed())
		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
		Eventually(func() bool { return tl.has(recObj, "deleted", start) }).
			WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(BeTrue())
		Expect(resets(broken)).To(Equal([]string{"ForceOff", "On", "ForceOff"}), "metalheal never powered the fenced host back on")
		Expect(resets(bystander)).To(BeEmpty())
	}, SpecTimeout(scenarioMax))

	It("medik8s-style overlap: the next request is created the moment the first is marked timed out; the first hands the host over as it is", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		broken := pool.take(ctx, "handover-overlap", 1)[0]
		reportOnFailure(start, broken)
		first := client.ObjectKey{Namespace: harness.Namespace, Name: broken + "-step-1"}
		second := client.ObjectKey{Namespace: harness.Namespace, Name: broken + "-step-2"}
		firstObj := "pcr/" + first.Namespace + "/" + first.Name
		secondObj := "pcr/" + second.Namespace + "/" + second.Name

		By("the host breaks for good; a checker asks for a power cycle that escalates (what medik8s' first step would create)")
		Expect(h.Sim.InjectFault(broken, nodesim.FaultPersistent)).To(Succeed())
		createRequest(ctx, first, broken, remediation(escalateOnce))

		By("one power cycle fails; the request leaves the host off and fenced and gives up")
		Eventually(func() bool { return tl.has(firstObj, "Succeeded=False", start) }).
			WithContext(ctx).WithTimeout(remedyWait).WithPolling(poll).Should(BeTrue())

		By("the checker marks it timed out and, in the same breath, creates the next step: fence only")
		p, err := getPCR(ctx, first)
		Expect(err).NotTo(HaveOccurred())
		patch := client.MergeFrom(p.DeepCopy())
		metav1.SetMetaDataAnnotation(&p.ObjectMeta, v1alpha1.AnnotationTimedOut, time.Now().UTC().Format(time.RFC3339))
		Expect(k8s.Patch(ctx, p, patch)).To(Succeed())
		createRequest(ctx, second, broken, remediation(func(s *v1alpha1.PowerCycleRemediationSpec) { s.Strategy = v1alpha1.StrategyPowerOff }))

		By("the second request finds the host off, fences it and succeeds; the first reports that it handed the host over")
		Eventually(func(g Gomega) {
			p2, err := getPCR(ctx, second)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p2).NotTo(BeNil())
			g.Expect(conditionOf(p2, v1alpha1.ConditionSucceeded).Status).To(Equal(metav1.ConditionTrue))
			p1, err := getPCR(ctx, first)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p1).NotTo(BeNil())
			g.Expect(conditionOf(p1, v1alpha1.ConditionProcessing).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(p1.Finalizers).NotTo(BeEmpty(), "the first request keeps its finalizer until it is deleted")
			lease, err := nodeLease(ctx, broken)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(lease).NotTo(BeNil())
			g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Equal("PowerCycleRemediation-"+second.Name)), "the second request took the node's lease over")
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed(), func() string { return tl.dump(start, broken) })
		Consistently(func(g Gomega) {
			g.Expect(hostPower(broken)).To(Equal(string(redfishmock.PowerOff)))
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintOutOfService)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(poll).Should(Succeed())
		Expect(powerOnsAfterFence(broken)).To(BeEmpty(), "no power-on after the first fence: %v", resets(broken))
		expectFencedThroughout(start, broken)
		expectOneHand(ctx, start, broken, firstObj, secondObj)

		By("both requests are deleted: the last one cleans up as its strategy says (power-off: the host stays off), taints and lease go")
		for _, key := range []client.ObjectKey{first, second} {
			Expect(k8s.Delete(ctx, &v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})).To(Succeed())
		}
		waitGone(ctx, first, settledWait)
		waitGone(ctx, second, settledWait)
		Eventually(func(g Gomega) {
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintOutOfService)).To(BeFalse())
			g.Expect(hasTaint(ctx, broken, v1alpha1.TaintRemediation)).To(BeFalse())
			g.Expect(nodeLease(ctx, broken)).To(BeNil())
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		Expect(powerOnsAfterFence(broken)).To(BeEmpty(), "the fence-only request left the host off: %v", resets(broken))

		By("an administrator repairs the host and powers it on")
		Expect(h.Sim.ClearFault(broken)).To(Succeed())
		Expect(h.Mock.SetPowerState(harness.SystemID(broken), redfishmock.PowerOn)).To(Succeed())
		expectSettled(ctx, broken)
	}, SpecTimeout(scenarioMax))
})

// createRequest creates a PowerCycleRemediation for a node the way a checker would (named by it, the
// node named by the medik8s annotation, no owner), and deletes it afterwards.
func createRequest(ctx context.Context, key client.ObjectKey, node string, spec v1alpha1.PowerCycleRemediationSpec) {
	GinkgoHelper()
	p := &v1alpha1.PowerCycleRemediation{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Annotations: map[string]string{v1alpha1.AnnotationNodeName: node}},
		Spec: spec,
	}
	Expect(k8s.Create(ctx, p)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed()) })
}

// powerOnsAfterFence lists the power-ons a node's host accepted after the last forced power-off of its
// record (the fence).
func powerOnsAfterFence(node string) []string {
	GinkgoHelper()
	r := resets(node)
	last := -1
	for i, x := range r {
		if x == "ForceOff" {
			last = i
		}
	}
	Expect(last).NotTo(Equal(-1), "the host was never powered off: %v", r)
	var ons []string
	for _, x := range r[last+1:] {
		if x == "On" {
			ons = append(ons, x)
		}
	}
	return ons
}

// expectFencedThroughout fails unless the node's out-of-service taint, once on, never came off since
// start.
func expectFencedThroughout(start time.Time, node string) {
	GinkgoHelper()
	key := "node/" + node
	Expect(tl.has(key, "taint+"+v1alpha1.TaintOutOfService, start)).To(BeTrue(), "never fenced:\n%s", tl.dump(start, node))
	Expect(tl.has(key, "taint-"+v1alpha1.TaintOutOfService, start)).To(BeFalse(), "the fence came off while the host was dead:\n%s", tl.dump(start, node))
}

// expectOneHand fails unless, at every instant the watches saw, at most one of a node's requests acted
// on it (Processing=True). The requests' writes are ordered by their revisions (one etcd).
func expectOneHand(ctx context.Context, start time.Time, node string, objects ...string) {
	GinkgoHelper()
	type change struct {
		rev    int64
		object string
		acting bool
	}
	var changes []change
	for _, o := range objects {
		for _, e := range tl.all(o, start) {
			switch e.What {
			case "Processing=True":
				changes = append(changes, change{e.Revision, o, true})
			case "Processing=False", "deleted":
				changes = append(changes, change{e.Revision, o, false})
			}
		}
	}
	slices.SortFunc(changes, func(a, b change) int { return int(a.rev - b.rev) })
	acting := map[string]bool{}
	for _, c := range changes {
		acting[c.object] = c.acting
		var now []string
		for o, a := range acting {
			if a {
				now = append(now, o)
			}
		}
		Expect(len(now)).To(BeNumerically("<=", 1), "at revision %d these requests acted on %s at once: %s\n%s",
			c.rev, node, strings.Join(now, ", "), tl.dump(start, node))
	}
}

// installRecorder defines the recorder's kinds, grants the health checks access to them the way a
// third-party remediator does (a ClusterRole with medik8s' aggregation label), and runs the recorder for
// the rest of the scenario.
func installRecorder(ctx context.Context) {
	GinkgoHelper()
	for _, kind := range []string{recordingGVK.Kind, recordingTmplGVK.Kind} {
		createCRD(ctx, kind)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-recorder-ext-remediation",
			Labels: map[string]string{"rbac.ext-remediation/aggregate-to-ext-remediation": "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{recorderGroup},
			Resources: []string{"recordingremediations", "recordingremediationtemplates"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}
	Expect(k8s.Create(ctx, role)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, role))).To(Succeed()) })
	Eventually(func(g Gomega) {
		// The role reaches the manager through aggregation (the controller-manager's): wait for it, so that
		// the manager never meets the kind before it may watch it.
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: harness.ManagerUser,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: recorderGroup, Resource: "recordingremediations", Verb: "watch"},
		}}
		g.Expect(k8s.Create(ctx, review)).To(Succeed())
		g.Expect(review.Status.Allowed).To(BeTrue())
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())

	recCtx, stop := context.WithCancel(context.Background())
	DeferCleanup(stop)
	c, err := newCache(k8s.Scheme())
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(recordingGVK)
	inf, err := c.GetInformer(ctx, u)
	Expect(err).NotTo(HaveOccurred())
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			obj := o.(*unstructured.Unstructured)
			tl.recordStored(nsKey("rec", obj), "created", obj)
			go actOn(recCtx, client.ObjectKeyFromObject(obj))
		},
		UpdateFunc: func(o, n any) {
			was, is := processing(o.(*unstructured.Unstructured)), processing(n.(*unstructured.Unstructured))
			if was != is && is != "" {
				tl.recordStored(nsKey("rec", n.(client.Object)), "Processing="+is, n.(client.Object))
			}
		},
		DeleteFunc: func(o any) { tl.deleted("rec", o) },
	})
	Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(recCtx) }()
	Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
}

// actOn is the recorder acting on a request: it only says so (Processing=True).
func actOn(ctx context.Context, key client.ObjectKey) {
	defer GinkgoRecover()
	Eventually(func(g Gomega) {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(recordingGVK)
		g.Expect(client.IgnoreNotFound(k8s.Get(ctx, key, obj))).To(Succeed())
		if obj.GetUID() == "" {
			return // gone
		}
		conds := []any{map[string]any{"type": v1alpha1.ConditionProcessing, "status": "True", "reason": "Recording",
			"message": "The recorder holds the node", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}
		g.Expect(unstructured.SetNestedSlice(obj.Object, conds, "status", "conditions")).To(Succeed())
		g.Expect(k8s.Status().Update(ctx, obj)).To(Succeed())
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
}

// processing is the status of a request's Processing condition ("" when it has none).
func processing(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == v1alpha1.ConditionProcessing {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// createRecordingTemplate creates a RecordingRemediationTemplate and deletes it afterwards.
func createRecordingTemplate(ctx context.Context, namespace, name string) {
	GinkgoHelper()
	t := &unstructured.Unstructured{}
	t.SetGroupVersionKind(recordingTmplGVK)
	t.SetNamespace(namespace)
	t.SetName(name)
	Expect(unstructured.SetNestedMap(t.Object, map[string]any{"template": map[string]any{"spec": map[string]any{}}}, "spec")).To(Succeed())
	Expect(k8s.Create(ctx, t)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, t))).To(Succeed()) })
}

// createCRD defines one of the recorder's namespaced kinds (schema-less, with a status subresource) and
// waits for it to be served; it stays for the rest of the suite (deleting it would race the manager's
// informers of the kind).
func createCRD(ctx context.Context, kind string) {
	GinkgoHelper()
	plural := strings.ToLower(kind) + "s"
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": plural + "." + recorderGroup},
		"spec": map[string]any{
			"group": recorderGroup,
			"names": map[string]any{"kind": kind, "listKind": kind + "List", "plural": plural, "singular": strings.ToLower(kind)},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			}},
		},
	}}
	Expect(ignoreAlreadyExists(k8s.Create(ctx, crd))).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(crd), crd)).To(Succeed())
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		g.Expect(conds).To(ContainElement(And(HaveKeyWithValue("type", "Established"), HaveKeyWithValue("status", "True"))))
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	Eventually(func() error {
		_, err := k8s.RESTMapper().RESTMapping(schema.GroupKind{Group: recorderGroup, Kind: kind}, "v1")
		return err
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed(), fmt.Sprintf("the API serves %s", kind))
}
