package monitoring

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []string
	}{
		{"a bare metric", `up`, []string{"up"}},
		{"matchers with names and operators in strings", `absent(up{job="a or b", x=~"by (y)"} == 1)`, []string{"up"}},
		{"aggregation with by after", `sum(rate(a_total[5m])) by (phase, b)`, []string{"a_total"}},
		{"aggregation with by before", `max by (checker, healthcheck) (a) > on (checker) max by (checker) (b)`, []string{"a", "b"}},
		{"unless on ()", `count(up == 1) > 0 unless on () max(c) == 1`, []string{"up", "c"}},
		{"histogram quantile", `histogram_quantile(0.9, sum by (le) (rate(d_bucket{x="1"}[$__rate_interval])))`, []string{"d_bucket"}},
		{"numbers and scientific notation", `e > 3 * 3600 and f < 1e3`, []string{"e", "f"}},
		{"group_left with and without labels", `g * on (a) group_left (b) h + i * on (a) group_left j`, []string{"g", "h", "i", "j"}},
		{"grafana variable in matcher and range", `k{healthcheck=~"$healthcheck"}[${__range}]`, []string{"k"}},
		{"grafana label_values", `label_values(metalheal_healthcheck_targets, healthcheck)`, []string{"metalheal_healthcheck_targets"}},
		{"offset", `l offset 5m`, []string{"l"}},
		{"subquery", `max_over_time(m[1h:1m])`, []string{"m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(MetricNames(tc.expr)).To(Equal(tc.want))
		})
	}
}
