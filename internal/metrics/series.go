package metrics

// Label combinations registered at start, so that dashboards and alerts find these series (at zero)
// before the first remediation request: the detection histogram of each checker, and the requests each
// creates of metalheal's own remediation kind.
func init() {
	for _, checker := range []string{CheckerNHC, CheckerMHC} {
		DetectionDelay.WithLabelValues(checker)
		RemediationsCreated.WithLabelValues(checker, "PowerCycleRemediation")
	}
}
