package template

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestHandOver(t *testing.T) {
	marked := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		processing   metav1.ConditionStatus
		now          time.Time
		want         HandOverState
		wantDeadline time.Time
	}{
		{name: "Processing=False: handed over", processing: metav1.ConditionFalse, now: marked, want: HandedOver},
		{name: "no Processing condition: cannot be waited for", processing: "", now: marked, want: HandedOver},
		{name: "Processing=True just after the mark: holding", processing: metav1.ConditionTrue, now: marked,
			want: Holding, wantDeadline: marked.Add(5 * time.Minute)},
		{name: "Processing=True a moment before the bound: holding", processing: metav1.ConditionTrue,
			now: marked.Add(5*time.Minute - time.Nanosecond), want: Holding, wantDeadline: marked.Add(5 * time.Minute)},
		{name: "Processing=True at the bound: overdue", processing: metav1.ConditionTrue, now: marked.Add(5 * time.Minute),
			want: Overdue, wantDeadline: marked.Add(5 * time.Minute)},
		{name: "Processing=Unknown is not False: holding", processing: metav1.ConditionUnknown, now: marked.Add(time.Minute),
			want: Holding, wantDeadline: marked.Add(5 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, deadline := HandOver(tt.processing, marked, tt.now)
			g.Expect(got).To(Equal(tt.want))
			g.Expect(deadline).To(Equal(tt.wantDeadline))
		})
	}
}

func TestProcessingStatus(t *testing.T) {
	withConditions := func(conds any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"kind": "FooRemediation", "metadata": map[string]any{"name": "w1"}}}
		if conds != nil {
			u.Object["status"] = map[string]any{"conditions": conds}
		}
		return u
	}
	cond := func(typ, status string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": "R", "message": "", "lastTransitionTime": "2030-01-01T12:00:00Z"}
	}
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		want metav1.ConditionStatus
	}{
		{name: "no status", obj: withConditions(nil), want: ""},
		{name: "other conditions only", obj: withConditions([]any{cond("Succeeded", "False")}), want: ""},
		{name: "Processing=True", obj: withConditions([]any{cond("Succeeded", "Unknown"), cond("Processing", "True")}), want: metav1.ConditionTrue},
		{name: "Processing=False", obj: withConditions([]any{cond("Processing", "False")}), want: metav1.ConditionFalse},
		{name: "conditions not a list: unreadable, not done", obj: withConditions("broken"), want: metav1.ConditionUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(ProcessingStatus(tt.obj)).To(Equal(tt.want))
		})
	}
}

func TestRequestName(t *testing.T) {
	pc := schema.GroupKind{Group: "remediation.metalheal.io", Kind: "PowerCycleRemediation"}
	fence := schema.GroupKind{Group: "fence.example.com", Kind: "FenceRemediation"}
	reboot := StepKey{Kind: pc, Namespace: "metalheal-system", Template: "reboot"}
	powerOff := StepKey{Kind: pc, Namespace: "metalheal-system", Template: "power-off"}
	fenceStep := StepKey{Kind: fence, Namespace: "ops", Template: "fence"}
	elsewhere := StepKey{Kind: pc, Namespace: "other", Template: "power-off"}
	tests := []struct {
		name  string
		steps []StepKey
		i     int
		want  string
	}{
		{name: "first step: the contract name", steps: []StepKey{reboot, powerOff}, i: 0, want: "worker-1"},
		{name: "later step of another kind: the contract name", steps: []StepKey{reboot, fenceStep}, i: 1, want: "worker-1"},
		{name: "later step of the same kind in another namespace: the contract name", steps: []StepKey{reboot, elsewhere}, i: 1, want: "worker-1"},
		{name: "later step of the same kind and namespace: a name of its own", steps: []StepKey{reboot, powerOff}, i: 1,
			want: LaterStepName("worker-1", "power-off")},
		{name: "a step in between of another kind changes nothing", steps: []StepKey{reboot, fenceStep, powerOff}, i: 2,
			want: LaterStepName("worker-1", "power-off")},
		{name: "index out of range: the contract name", steps: []StepKey{reboot}, i: 3, want: "worker-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(RequestName("worker-1", tt.steps, tt.i)).To(Equal(tt.want))
		})
	}
}

func TestLaterStepName(t *testing.T) {
	long := strings.Repeat("a", 200) + ".b"
	tests := []struct {
		name       string
		target     string
		template   string
		wantPrefix string
	}{
		{name: "short names are kept whole", target: "worker-1", template: "power-off", wantPrefix: "worker-1-power-off-"},
		{name: "dotted names stay valid", target: "node.example.com", template: "rack.a", wantPrefix: "node.example.com-rack.a-"},
		{name: "long names are cut, never ending in a dot or dash", target: long, template: strings.Repeat("c", 100)},
		{name: "a cut at a dot is trimmed", target: strings.Repeat("n", 243) + ".x", template: "t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := LaterStepName(tt.target, tt.template)
			g.Expect(validation.IsDNS1123Subdomain(got)).To(BeEmpty(), "%q is a valid object name", got)
			g.Expect(got).To(MatchRegexp(`-[0-9a-f]{8}$`))
			g.Expect(LaterStepName(tt.target, tt.template)).To(Equal(got), "deterministic")
			g.Expect(got).NotTo(Equal(tt.target))
			if tt.wantPrefix != "" {
				g.Expect(got).To(HavePrefix(tt.wantPrefix))
			}
		})
	}
	g := NewWithT(t)
	g.Expect(LaterStepName("worker-1", "power-off")).NotTo(Equal(LaterStepName("worker-1-power", "off")),
		"the hash tells apart pairs that join to the same text")
	g.Expect(LaterStepName(long, strings.Repeat("c", 100)+"1")).NotTo(Equal(LaterStepName(long, strings.Repeat("c", 100)+"2")),
		"names cut to the same prefix differ by their hash")
}
