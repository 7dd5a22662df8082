package bmcinventory

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/metrics"
)

// The inventory's state gauges say what is true now (BMCs unreachable, BMCs whose credentials are wrong),
// so an alert can fire on it. The collector lists the BMCs from the manager's cache at scrape time rather
// than keep gauges up to date on every check: the numbers are right after a restart or a lost leadership
// without bookkeeping of our own. Only the elected manager reports them (a standby's cache does not watch
// BMCs; two replicas would double sums).

var (
	descBMCs = prometheus.NewDesc("metalheal_bmcs",
		"BMCs in the manager's namespace.", nil, nil)
	descBMCsUnreachable = prometheus.NewDesc("metalheal_bmcs_unreachable",
		"BMCs whose last check did not reach them (Reachable=False).", nil, nil)
	descBMCsCredentials = prometheus.NewDesc("metalheal_bmcs_credentials_invalid",
		"BMCs whose credentials are missing or were refused at the last check (CredentialsValid=False).", nil, nil)
)

// StateCollector reports the BMC inventory's state gauges.
type StateCollector struct {
	reader    client.Reader
	namespace string
	elected   <-chan struct{}
}

// NewStateCollector reads the BMCs of namespace from reader (the manager's cache) at scrape time once
// elected (the manager's Elected channel) is closed. Register it with the metrics registry.
func NewStateCollector(reader client.Reader, namespace string, elected <-chan struct{}) *StateCollector {
	return &StateCollector{reader: reader, namespace: namespace, elected: elected}
}

func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBMCs
	ch <- descBMCsUnreachable
	ch <- descBMCsCredentials
}

func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	if !metrics.Elected(c.elected) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), metrics.ListTimeout)
	defer cancel()
	var list v1alpha1.BMCList
	if err := c.reader.List(ctx, &list, client.InNamespace(c.namespace), client.UnsafeDisableDeepCopy); err != nil {
		ctrl.Log.WithName("metrics").Error(err, "Listing BMCs for their state gauges")
		return
	}
	unreachable, badCredentials := bmcState(list.Items)
	ch <- prometheus.MustNewConstMetric(descBMCs, prometheus.GaugeValue, float64(len(list.Items)))
	ch <- prometheus.MustNewConstMetric(descBMCsUnreachable, prometheus.GaugeValue, float64(unreachable))
	ch <- prometheus.MustNewConstMetric(descBMCsCredentials, prometheus.GaugeValue, float64(badCredentials))
}

// bmcState counts the BMCs whose last check did not reach them, and those whose credentials are wrong.
func bmcState(items []v1alpha1.BMC) (unreachable, badCredentials int) {
	for i := range items {
		conds := items[i].Status.Conditions
		if meta.IsStatusConditionFalse(conds, v1alpha1.ConditionReachable) {
			unreachable++
		}
		if meta.IsStatusConditionFalse(conds, v1alpha1.ConditionCredentialsValid) {
			badCredentials++
		}
	}
	return unreachable, badCredentials
}
