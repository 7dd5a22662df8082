// Package enginetest is the health checks' conformance kit (STYLE.md: one behaviour, one place). The
// rules the NodeHealthCheck and the MachineHealthCheck both promise — storm and cooldown, healthyDelay,
// node leases, control plane one at a time, overlapping checks, repeat back-off, the exclude label, and
// every case of the escalation walk — are written once, as Rows: a Scenario in neutral terms (a check's
// policy, its targets, their requests, leases and status, now) and the Outcome it must lead to (the
// requests to create, mark and delete, the skips, the leases, the conditions, the events, when to look
// again).
//
// Each checker runs the table from its own test package through an Adapter that builds its pure
// decision's input from the Scenario and reads the Outcome from its plan; the adapter says only how its
// kind differs (Nodes or Machines, the names of its fields and events). Run runs every Row as a subtest:
//
//	func TestParity(t *testing.T) { enginetest.Run(t, adapter{}) }
//
// A row a checker fails because it really behaves otherwise is not weakened: the adapter names it in
// KnownDrift with the difference. Run still runs it, passes while it fails, and fails once it passes,
// so the list of drifts stays explicit and can only shrink.
//
// Only tests import this package.
package enginetest
