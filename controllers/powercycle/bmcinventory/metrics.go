package bmcinventory

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Checks counts the checks of the BMC inventory, by result: CheckSucceeded, the reason of the condition
// that says what is wrong (AuthenticationFailed, SecretNotFound, InvalidCredentials, InvalidAddress,
// Unsupported, Unreachable, Timeout), or SkippedRemediating (a periodic check left to the remediator at
// work on the BMC's host).
var Checks = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "metalheal_bmc_checks_total",
	Help: "Checks of the BMC inventory, by result: CheckSucceeded, the reason of the condition that says what is wrong, or SkippedRemediating.",
}, []string{"result"})

func init() {
	ctrlmetrics.Registry.MustRegister(Checks)
}
