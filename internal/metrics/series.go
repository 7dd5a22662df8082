package metrics

// Label combinations registered at start, so that dashboards and alerts find these series (at zero)
// before the first remediation request: the NodeHealthCheck's detection histogram and the requests it
// creates of metalheal's own remediation kind. (The MachineHealthCheck has metrics of its own,
// metalheal_mhc_*, in controllers/mhc.)
func init() {
	DetectionDelay.WithLabelValues(CheckerNHC)
	RemediationsCreated.WithLabelValues(CheckerNHC, "PowerCycleRemediation")
}
