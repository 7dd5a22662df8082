package nhc

import (
	"testing"
	"time"

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
func (w *world) setProcessing(emr *unstructured.Unstructured, status metav1.ConditionStatus) {
	w.t.Helper()
	w.g.Expect(k8s.Get(w.ctx, client.ObjectKeyFromObject(emr), emr)).To(Succeed())
	w.g.Expect(unstructured.SetNestedSlice(emr.Object, []any{map[string]any{
		"type": "Processing", "status": string(status), "reason": "Test", "message": "test",
		"lastTransitionTime": t0.Format(time.RFC3339),
	}}, "status", "conditions")).To(Succeed())
	w.g.Expect(k8s.Status().Update(w.ctx, emr)).To(Succeed())
}

// TestEscalationWaitsForHandOver, against the API server: after step 1 times out, step 2's request is
// created only once step 1's request reports Processing=False; a step of the same kind and namespace gets
// a name of its own, and step 1's request is neither deleted nor renamed.
func TestEscalationWaitsForHandOver(t *testing.T) {
	tests := []struct {
		name   string
		second func(w *world) (v1alpha1.TemplateReference, schema.GroupVersionKind)
	}{
		{name: "different kinds", second: func(w *world) (v1alpha1.TemplateReference, schema.GroupVersionKind) {
			return w.fenceTemplate("fence", map[string]any{"template": map[string]any{"spec": map[string]any{}}}), fenceRemediation
		}},
		{name: "same kind and namespace", second: func(w *world) (v1alpha1.TemplateReference, schema.GroupVersionKind) {
			return w.pcTemplate("power-off"), pcRemediation
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			g := w.g
			pc := w.pcTemplate("pc")
			secondRef, secondKind := tt.second(w)
			check := w.check("nhc", nil, escalating(
				v1alpha1.EscalatingRemediation{RemediationTemplate: pc, Order: 1, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
				v1alpha1.EscalatingRemediation{RemediationTemplate: secondRef, Order: 2, Timeout: metav1.Duration{Duration: 10 * time.Minute}},
			))
			sick := w.node("w1", corev1.ConditionUnknown, t0)
			secondName := sick.Name
			if secondKind == pcRemediation {
				secondName = template.LaterStepName(sick.Name, secondRef.Name)
			}
			// requestsOfSecond are step 2's requests (for the same kind, those other than step 1's).
			requestsOfSecond := func() []string {
				var out []string
				for _, n := range names(w.remediations(secondKind, check)) {
					if secondKind != pcRemediation || n != sick.Name {
						out = append(out, n)
					}
				}
				return out
			}

			start := t0.Add(5 * time.Minute)
			w.clk.SetTime(start)
			w.reconcile(check)
			first := w.remediations(pcRemediation, check)
			g.Expect(names(first)).To(Equal([]string{sick.Name}), "step 1 has the contract name")
			w.setProcessing(&first[0], metav1.ConditionTrue)

			timedOut := start.Add(5 * time.Minute)
			w.clk.SetTime(timedOut)
			res := w.reconcile(check)
			g.Expect(w.remediations(pcRemediation, check)[0].GetAnnotations()).To(HaveKey(template.AnnotationTimedOut))
			g.Expect(requestsOfSecond()).To(BeEmpty(), "no step 2 while step 1 still acts on the host")
			g.Expect(entry(check, sick).WaitingFor).To(Equal(pcRemediation.Kind + " " + pcNS + "/" + sick.Name))
			g.Expect(w.rec.with(EventWaitingForHandOver)).To(HaveLen(1))
			g.Expect(res.RequeueAfter).To(Equal(template.HandOverBound), "look again at the bound")

			w.clk.SetTime(timedOut.Add(time.Minute))
			w.reconcile(check)
			g.Expect(requestsOfSecond()).To(BeEmpty())
			g.Expect(w.rec.with(EventWaitingForHandOver)).To(HaveLen(1), "said once")

			w.setProcessing(&first[0], metav1.ConditionFalse)
			w.clk.SetTime(timedOut.Add(time.Minute + time.Second))
			w.reconcile(check)
			g.Expect(requestsOfSecond()).To(Equal([]string{secondName}))
			second := w.remediations(secondKind, check)
			for _, o := range second {
				g.Expect(o.GetAnnotations()).To(HaveKeyWithValue(template.AnnotationNodeName, sick.Name))
			}
			still := w.remediations(pcRemediation, check)
			g.Expect(names(still)).To(ContainElement(sick.Name), "step 1's request is not deleted")
			for _, o := range still {
				g.Expect(o.GetDeletionTimestamp()).To(BeNil())
			}
			e := entry(check, sick)
			g.Expect(e.WaitingFor).To(BeEmpty())
			g.Expect(e.Remediations).To(HaveLen(2))
			g.Expect(e.Remediations[1].Name).To(Equal(secondName))
			g.Expect(w.rec.with(EventHandOverTimedOut)).To(BeEmpty())

			// Both requests live on; another pass changes nothing.
			w.clk.SetTime(timedOut.Add(2 * time.Minute))
			w.reconcile(check)
			g.Expect(requestsOfSecond()).To(Equal([]string{secondName}))
			g.Expect(names(w.remediations(pcRemediation, check))).To(ContainElement(sick.Name))
			g.Expect(entry(check, sick).Remediations).To(HaveLen(2))
			g.Expect(w.rec.with(EventRemediationCreated)).To(HaveLen(2))
		})
	}
}
