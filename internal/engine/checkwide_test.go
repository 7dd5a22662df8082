package engine

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// TestDisableEnable: Disabled is news (the adapter's warning) when the check becomes disabled, or for
// another reason, never for a new message alone; Enabled when a disabled check works again.
func TestDisableEnable(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	disabled := func(reason, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionTrue, Reason: reason, Message: msg}}
	}
	enabled := []metav1.Condition{{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAsExpected}}
	for name, tc := range map[string]struct {
		conds   []metav1.Condition
		disable string // the reason, "" to enable
		want    bool
	}{
		"no condition yet, disabled: news":        {disable: "TemplateNotFound", want: true},
		"enabled, disabled: news":                 {conds: enabled, disable: "TemplateNotFound", want: true},
		"disabled, for the same reason: not news": {conds: disabled("TemplateNotFound", "an older message"), disable: "TemplateNotFound"},
		"disabled, for another reason: news":      {conds: disabled("TemplateInvalid", "m"), disable: "TemplateNotFound", want: true},
		"disabled, enabled: news":                 {conds: disabled("TemplateNotFound", "m"), want: true},
		"enabled, enabled: not news":              {conds: enabled},
		"no condition yet, enabled: not news":     {},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			conds := append([]metav1.Condition(nil), tc.conds...)
			if tc.disable != "" {
				g.Expect(Disable(&conds, 3, tc.disable, "msg", now)).To(Equal(tc.want))
				g.Expect(meta.FindStatusCondition(conds, v1alpha1.ConditionDisabled)).To(And(HaveField("Status", metav1.ConditionTrue),
					HaveField("Reason", tc.disable), HaveField("Message", "msg"), HaveField("ObservedGeneration", int64(3))))
				return
			}
			g.Expect(Enable(&conds, 3, "works", now)).To(Equal(tc.want))
			g.Expect(meta.FindStatusCondition(conds, v1alpha1.ConditionDisabled)).To(And(HaveField("Status", metav1.ConditionFalse),
				HaveField("Message", "works")))
		})
	}
}
