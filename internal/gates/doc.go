// Package gates holds the safety rules both health checkers apply before they ask for a remediation, so
// that the NodeHealthCheck and the MachineHealthCheck decide them the same way:
//
//   - Storm: while the unhealthy budget is exceeded, and stormCooldownDuration after it is satisfied
//     again, no new remediation starts (condition StormActive, reasons TooManyUnhealthy and
//     StormCooldown).
//   - Node leases: a valid node lease held by anyone but the check (node-maintenance, another check, a
//     remediator) hands the Node off: nothing starts, the check looks again when the lease runs out. The
//     check renews its own lease at half-time while its requests live, takes it over from the remediator
//     of its own request, and releases it once its requests are gone.
//   - Control plane one at a time: a control-plane Node is not remediated while another control-plane
//     Node is being remediated by any check, or is held by anyone's lease. Two checks of one manager
//     deciding from the same cache could each admit a different one: ControlPlaneClaim (claim.go), shared
//     by every check of the manager, lets one start at a time confirm against the API server that no
//     other control-plane Node's lease is held before it takes its own.
//   - Overlapping checks: a check already remediating a target keeps it; otherwise the oldest check
//     (creation time, then name) that selects the target and finds it unhealthy owns it. The others
//     report the skip.
//
// Every function is pure: the callers observe, these decide, the callers write. The claim alone reads
// and, through the caller's take, writes: the one step that must not be decided from a cache.
package gates
