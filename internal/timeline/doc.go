// Package timeline tells one node's remediation as a story: the steps a broken node goes through, from
// the failure to the clean end, named and worded once for everything that shows them. The demo
// (test/demo) prints the steps as it watches them happen; `kubectl metalheal timeline` (cmd/kubectl-metalheal)
// rebuilds them after the fact from what the cluster keeps: the remediation's status, events, the Node's
// conditions and taints, the node lease, and the host's BMC's record of its ended remediations, which
// outlives the requests and their events (Build). Both print Entry lines with FormatEntry, so an admin
// reading a real cluster's timeline reads the same words as the demo's.
package timeline
