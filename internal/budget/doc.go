// Package budget is the unhealthy budget, the short-circuit both health checkers apply before they ask for
// any remediation: when too much of a pool is unhealthy at once (a network partition, a broken switch, a
// bad rollout) remediating node after node would make things worse, so remediation pauses.
//
// One rule for both checkers, the Cluster API book's ("Remediation Short-Circuiting"):
//
//   - maxUnhealthy: an integer, or a percentage of the total number of targets rounded DOWN. Remediation is
//     allowed while the number of unhealthy targets does not exceed it. With 25 targets and 40%, up to 10
//     unhealthy targets are remediated; with 6 targets and 40%, up to 2.
//   - unhealthyRange "[min-max]": takes precedence over maxUnhealthy. Remediation is allowed while
//     min <= unhealthy <= max.
//   - minHealthy (NodeHealthCheck): an integer, or a percentage of the total rounded UP, so that the
//     stated floor is never undercut (51% of 5 targets is 3 healthy targets, not 2). Remediation is allowed
//     while the number of healthy targets is at least minHealthy. It cannot be combined with the other two.
//
// When nothing is set there is no limit (Cluster API's default of maxUnhealthy 100%). Percentages must lie
// in 0%..100% and integers must not be negative; anything else is an *InvalidValueError.
//
// Decision.RemediationsAllowed is what Cluster API reports in status.remediationsAllowed: how many more
// targets may become unhealthy before remediation stops, zero when it is stopped.
package budget
