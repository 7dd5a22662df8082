// Package monitoring tests the monitoring bundle (config/prometheus, config/grafana): the alert rules pass
// `promtool check rules`, every alert has promtool unit tests that fire it and leave it silent, every alert
// links a runbook section of docs/operations.md, and every metric the rules and the dashboard name is one
// the real manager exposes, read from a scrape of it in a local world (test/harness). promtool comes from
// Debian's prometheus package (hack/install-test-deps.sh); the tests fail without it.
package monitoring
