package nhc

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/template"
)

// setProcessing sets the Processing condition on a request, as its remediator would.
func (w *world) setProcessing(ctx context.Context, emr *unstructured.Unstructured, status metav1.ConditionStatus) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(emr), emr)).To(Succeed())
	Expect(unstructured.SetNestedSlice(emr.Object, []any{map[string]any{
		"type": "Processing", "status": string(status), "reason": "Test", "message": "test",
		"lastTransitionTime": t0.Format(time.RFC3339),
	}}, "status", "conditions")).To(Succeed())
	Expect(k8s.Status().Update(ctx, emr)).To(Succeed())
}

// Against the API server: after step 1 times out, step 2's request is
// created only once step 1's request reports Processing=False; a step of the same kind and namespace gets
// a name of its own, and step 1's request is neither deleted nor renamed.
// handOverCase is step 2 of a hand-over spec: its template, and the kind of request it makes.
type handOverCase struct {
	second func(ctx context.Context, w *world) (v1alpha1.TemplateReference, schema.GroupVersionKind)
}

var _ = Describe("Escalation hand-over", func() {
	DescribeTable("creates step 2's request only once step 1's reports Processing=False, and deletes or renames neither",
		func(ctx SpecContext, tt handOverCase) {
			w := newWorld(ctx)
			pc := w.pcTemplate(ctx, "pc")
			secondRef, secondKind := tt.second(ctx, w)
			check := w.check(ctx, "nhc", nil, escalating(
				v1alpha1.EscalatingRemediation{RemediationTemplate: pc, Order: 1, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
				v1alpha1.EscalatingRemediation{RemediationTemplate: secondRef, Order: 2, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
			))
			sick := w.node(ctx, "w1", corev1.ConditionUnknown, t0)
			secondName := sick.Name
			if secondKind == pcRemediation {
				secondName = template.LaterStepName(sick.Name, secondRef.Name)
			}
			// requestsOfSecond are step 2's requests (for the same kind, those other than step 1's).
			requestsOfSecond := func() []string {
				var out []string
				for _, n := range names(w.remediations(ctx, secondKind, check)) {
					if secondKind != pcRemediation || n != sick.Name {
						out = append(out, n)
					}
				}
				return out
			}

			start := t0.Add(5 * time.Minute)
			w.clk.SetTime(start)
			w.reconcile(ctx, check)
			first := w.remediations(ctx, pcRemediation, check)
			Expect(names(first)).To(Equal([]string{sick.Name}), "step 1 has the contract name")
			w.setProcessing(ctx, &first[0], metav1.ConditionTrue)

			timedOut := start.Add(5 * time.Minute)
			w.clk.SetTime(timedOut)
			res := w.reconcile(ctx, check)
			Expect(w.remediations(ctx, pcRemediation, check)[0].GetAnnotations()).To(HaveKey(template.AnnotationTimedOut))
			Expect(requestsOfSecond()).To(BeEmpty(), "no step 2 while step 1 still acts on the host")
			Expect(entry(check, sick).WaitingFor).To(Equal(pcRemediation.Kind + " " + pcNS + "/" + sick.Name))
			Expect(w.rec.With(EventWaitingForHandOver)).To(HaveLen(1))
			Expect(res.RequeueAfter).To(Equal(template.HandOverBound), "look again at the bound")

			w.clk.SetTime(timedOut.Add(time.Minute))
			w.reconcile(ctx, check)
			Expect(requestsOfSecond()).To(BeEmpty())
			Expect(w.rec.With(EventWaitingForHandOver)).To(HaveLen(1), "said once")

			w.setProcessing(ctx, &first[0], metav1.ConditionFalse)
			w.clk.SetTime(timedOut.Add(time.Minute + time.Second))
			w.reconcile(ctx, check)
			Expect(requestsOfSecond()).To(Equal([]string{secondName}))
			second := w.remediations(ctx, secondKind, check)
			for _, o := range second {
				Expect(o.GetAnnotations()).To(HaveKeyWithValue(template.AnnotationNodeName, sick.Name))
			}
			still := w.remediations(ctx, pcRemediation, check)
			Expect(names(still)).To(ContainElement(sick.Name), "step 1's request is not deleted")
			for _, o := range still {
				Expect(o.GetDeletionTimestamp()).To(BeNil())
			}
			e := entry(check, sick)
			Expect(e.WaitingFor).To(BeEmpty())
			Expect(e.Remediations).To(HaveLen(2))
			Expect(e.Remediations[1].Name).To(Equal(secondName))
			Expect(w.rec.With(EventHandOverTimedOut)).To(BeEmpty())

			// Both requests live on; another pass changes nothing.
			w.clk.SetTime(timedOut.Add(2 * time.Minute))
			w.reconcile(ctx, check)
			Expect(requestsOfSecond()).To(Equal([]string{secondName}))
			Expect(names(w.remediations(ctx, pcRemediation, check))).To(ContainElement(sick.Name))
			Expect(entry(check, sick).Remediations).To(HaveLen(2))
			Expect(w.rec.With(EventRemediationCreated)).To(HaveLen(2))
		},
		Entry("different kinds", handOverCase{second: func(ctx context.Context, w *world) (v1alpha1.TemplateReference, schema.GroupVersionKind) {
			return w.fenceTemplate(ctx, "fence", map[string]any{"template": map[string]any{"spec": map[string]any{}}}), fenceRemediation
		}}),
		Entry("same kind and namespace", handOverCase{second: func(ctx context.Context, w *world) (v1alpha1.TemplateReference, schema.GroupVersionKind) {
			return w.pcTemplate(ctx, "power-off"), pcRemediation
		}}),
	)
})
