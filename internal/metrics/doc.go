// Package metrics holds the Prometheus metrics the health checkers share. Both checkers report under the
// same names with a checker label ("nodehealthcheck" or "machinehealthcheck"), so one dashboard serves
// both. The metrics are registered with controller-runtime's registry, served on the manager's
// /metrics endpoint.
package metrics
