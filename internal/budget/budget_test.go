package budget

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func pct(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
func num(i int) *intstr.IntOrString    { v := intstr.FromInt32(int32(i)); return &v }

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name                string
		policy              Policy
		total, unhealthy    int
		wantAllowed         bool
		wantRemediations    int32
		wantMessageContains string
	}{
		// The Cluster API book, "With an Absolute Value": maxUnhealthy 2.
		{name: "book absolute: 2 unhealthy of 10 remediated", policy: Policy{MaxUnhealthy: num(2)}, total: 10, unhealthy: 2, wantAllowed: true, wantRemediations: 0},
		{name: "book absolute: 3 unhealthy of 10 not remediated", policy: Policy{MaxUnhealthy: num(2)}, total: 10, unhealthy: 3},
		{name: "book absolute: independent of pool size", policy: Policy{MaxUnhealthy: num(2)}, total: 1000, unhealthy: 3},
		{name: "absolute: 1 unhealthy leaves room for 1 more", policy: Policy{MaxUnhealthy: num(2)}, total: 10, unhealthy: 1, wantAllowed: true, wantRemediations: 1},
		// "With Percentages": 40% of 25 is 10, 40% of 6 is 2.4 rounded down to 2.
		{name: "book percent: 10 of 25 remediated", policy: Policy{MaxUnhealthy: pct("40%")}, total: 25, unhealthy: 10, wantAllowed: true, wantRemediations: 0, wantMessageContains: "at most 10 allowed"},
		{name: "book percent: 11 of 25 not remediated", policy: Policy{MaxUnhealthy: pct("40%")}, total: 25, unhealthy: 11},
		{name: "book percent: 1 of 25 leaves 9", policy: Policy{MaxUnhealthy: pct("40%")}, total: 25, unhealthy: 1, wantAllowed: true, wantRemediations: 9},
		{name: "book percent rounds down: 2 of 6 remediated", policy: Policy{MaxUnhealthy: pct("40%")}, total: 6, unhealthy: 2, wantAllowed: true, wantRemediations: 0, wantMessageContains: "at most 2 allowed"},
		{name: "book percent rounds down: 3 of 6 not remediated", policy: Policy{MaxUnhealthy: pct("40%")}, total: 6, unhealthy: 3},
		{name: "100% always allows", policy: Policy{MaxUnhealthy: pct("100%")}, total: 5, unhealthy: 5, wantAllowed: true, wantRemediations: 0},
		{name: "0% allows only a healthy pool", policy: Policy{MaxUnhealthy: pct("0%")}, total: 5, unhealthy: 1},
		{name: "0 unhealthy of 0 targets", policy: Policy{MaxUnhealthy: pct("40%")}, total: 0, unhealthy: 0, wantAllowed: true},
		// "With a range of values": [3-5] with 10 targets.
		{name: "book range: 2 unhealthy not remediated", policy: Policy{UnhealthyRange: "[3-5]"}, total: 10, unhealthy: 2},
		{name: "book range: 3 unhealthy remediated", policy: Policy{UnhealthyRange: "[3-5]"}, total: 10, unhealthy: 3, wantAllowed: true, wantRemediations: 2},
		{name: "book range: 5 unhealthy remediated", policy: Policy{UnhealthyRange: "[3-5]"}, total: 10, unhealthy: 5, wantAllowed: true, wantRemediations: 0},
		{name: "book range: 6 unhealthy not remediated", policy: Policy{UnhealthyRange: "[3-5]"}, total: 10, unhealthy: 6},
		{name: "book range: same for any pool size", policy: Policy{UnhealthyRange: "[3-5]"}, total: 500, unhealthy: 4, wantAllowed: true, wantRemediations: 1},
		{name: "range takes precedence over maxUnhealthy", policy: Policy{MaxUnhealthy: num(1), UnhealthyRange: "[3-5]"}, total: 10, unhealthy: 4, wantAllowed: true, wantRemediations: 1},
		{name: "range takes precedence even when it forbids", policy: Policy{MaxUnhealthy: num(10), UnhealthyRange: "[3-5]"}, total: 10, unhealthy: 1},
		{name: "range [0-0] allows only a healthy pool", policy: Policy{UnhealthyRange: "[0-0]"}, total: 10, unhealthy: 0, wantAllowed: true},
		// minHealthy (NodeHealthCheck), percent rounded up.
		{name: "minHealthy 51% of 5 needs 3 healthy: 2 unhealthy ok", policy: Policy{MinHealthy: pct("51%")}, total: 5, unhealthy: 2, wantAllowed: true, wantRemediations: 0, wantMessageContains: "at least 3 required"},
		{name: "minHealthy 51% of 5 needs 3 healthy: 3 unhealthy stops", policy: Policy{MinHealthy: pct("51%")}, total: 5, unhealthy: 3},
		{name: "minHealthy 40% of 6 rounds up to 3", policy: Policy{MinHealthy: pct("40%")}, total: 6, unhealthy: 3, wantAllowed: true, wantRemediations: 0, wantMessageContains: "at least 3 required"},
		{name: "minHealthy 40% of 6: 4 unhealthy stops", policy: Policy{MinHealthy: pct("40%")}, total: 6, unhealthy: 4},
		{name: "minHealthy absolute", policy: Policy{MinHealthy: num(7)}, total: 10, unhealthy: 1, wantAllowed: true, wantRemediations: 2},
		{name: "minHealthy larger than the pool stops", policy: Policy{MinHealthy: num(7)}, total: 5, unhealthy: 0},
		// No policy: no limit.
		{name: "no policy allows everything", policy: Policy{}, total: 4, unhealthy: 4, wantAllowed: true, wantRemediations: 0, wantMessageContains: "no limit"},
		{name: "no policy headroom is the healthy count", policy: Policy{}, total: 4, unhealthy: 1, wantAllowed: true, wantRemediations: 3},
		// Out-of-range counts are clamped.
		{name: "unhealthy above total is clamped", policy: Policy{MaxUnhealthy: num(3)}, total: 3, unhealthy: 9, wantAllowed: true, wantRemediations: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d, err := Evaluate(tt.policy, tt.total, tt.unhealthy)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Allowed).To(Equal(tt.wantAllowed))
			g.Expect(d.RemediationsAllowed).To(Equal(tt.wantRemediations))
			g.Expect(d.Message).NotTo(BeEmpty())
			if tt.wantMessageContains != "" {
				g.Expect(d.Message).To(ContainSubstring(tt.wantMessageContains))
			}
		})
	}
}

func TestEvaluateInvalid(t *testing.T) {
	tests := []struct {
		name      string
		policy    Policy
		wantField string
	}{
		{name: "percent above 100", policy: Policy{MaxUnhealthy: pct("120%")}, wantField: "maxUnhealthy"},
		{name: "negative percent", policy: Policy{MaxUnhealthy: pct("-1%")}, wantField: "maxUnhealthy"},
		{name: "not a number", policy: Policy{MaxUnhealthy: pct("abc")}, wantField: "maxUnhealthy"},
		{name: "string number without percent", policy: Policy{MaxUnhealthy: pct("3")}, wantField: "maxUnhealthy"},
		{name: "fractional percent", policy: Policy{MaxUnhealthy: pct("12.5%")}, wantField: "maxUnhealthy"},
		{name: "negative integer", policy: Policy{MaxUnhealthy: num(-1)}, wantField: "maxUnhealthy"},
		{name: "range reversed", policy: Policy{UnhealthyRange: "[5-3]"}, wantField: "unhealthyRange"},
		{name: "range without brackets", policy: Policy{UnhealthyRange: "3-5"}, wantField: "unhealthyRange"},
		{name: "range with spaces", policy: Policy{UnhealthyRange: "[3 - 5]"}, wantField: "unhealthyRange"},
		{name: "range negative", policy: Policy{UnhealthyRange: "[-1-5]"}, wantField: "unhealthyRange"},
		{name: "range garbage", policy: Policy{UnhealthyRange: "abc"}, wantField: "unhealthyRange"},
		{name: "range bound overflows", policy: Policy{UnhealthyRange: "[1-99999999999999999999]"}, wantField: "unhealthyRange"},
		{name: "invalid range wins even with a valid maxUnhealthy", policy: Policy{MaxUnhealthy: num(2), UnhealthyRange: "[5-3]"}, wantField: "unhealthyRange"},
		{name: "minHealthy above 100%", policy: Policy{MinHealthy: pct("101%")}, wantField: "minHealthy"},
		{name: "minHealthy negative", policy: Policy{MinHealthy: num(-3)}, wantField: "minHealthy"},
		{name: "minHealthy with maxUnhealthy", policy: Policy{MinHealthy: num(1), MaxUnhealthy: num(1)}, wantField: "minHealthy"},
		{name: "minHealthy with unhealthyRange", policy: Policy{MinHealthy: num(1), UnhealthyRange: "[1-2]"}, wantField: "minHealthy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d, err := Evaluate(tt.policy, 10, 1)
			g.Expect(d).To(Equal(Decision{}))
			var inv *InvalidValueError
			g.Expect(errors.As(err, &inv)).To(BeTrue(), "error %v is not an *InvalidValueError", err)
			g.Expect(inv.Field).To(Equal(tt.wantField))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantField))
		})
	}
}

func TestParseUnhealthyRange(t *testing.T) {
	tests := map[string]struct {
		in             string
		wantLo, wantHi int
		wantErr        bool
	}{
		"simple":      {in: "[3-5]", wantLo: 3, wantHi: 5},
		"equal":       {in: "[2-2]", wantLo: 2, wantHi: 2},
		"multi digit": {in: "[10-200]", wantLo: 10, wantHi: 200},
		"reversed":    {in: "[5-3]", wantErr: true},
		"empty":       {in: "", wantErr: true},
		"one bound":   {in: "[3]", wantErr: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			lo, hi, err := ParseUnhealthyRange(tt.in)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect([]int{lo, hi}).To(Equal([]int{tt.wantLo, tt.wantHi}))
		})
	}
}
