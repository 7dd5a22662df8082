// Package backoff is the repeat-remediation back-off both health checkers apply before they start a new
// remediation of a target (a Node, or a Machine): a host that comes back Ready and fails again minutes
// later is not power-cycled again and again, forever. The NodeHealthCheck proposal names the need
// ("incrementally back-off" repeated remediation).
//
// The rule, one for both checkers: count the remediations of the target started within the last window
// (escalation steps of one remediation count once: only its first request). While fewer than after were
// started, a new remediation starts at once. From then on the next one waits initial after the last one
// started, doubling with every further remediation in the window, at most max:
//
//	remediations in the window   k < after   k = after   k = after+1   k = after+2   ...
//	wait after the last start    none        initial     2·initial     4·initial     ... (at most max)
//
// Remediations drop out of the count as they leave the window, so a target that stays healthy for a
// window is forgotten. Decide is pure (history, now, policy in; may start now, else until when out): the
// memory is the checks' status (a few start times per target remediated recently), so a restart keeps it.
package backoff
