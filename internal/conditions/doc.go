// Package conditions decides whether a target is unhealthy from its conditions, the way both health checkers
// (MachineHealthCheck and NodeHealthCheck) define it.
//
// A criterion {Type, Status, Duration} matches a condition with the same type and status; it has *expired*
// once the condition has held that status for Duration, that is at LastTransitionTime+Duration (the
// "condition expiry" from which detection latency is measured). A target is unhealthy as soon as any one
// criterion has expired (a logical OR, as the NodeHealthCheck proposal puts it).
//
// Evaluate is a pure function of the conditions, the criteria and now. Besides the verdict it returns when
// to look again: the earliest expiry among criteria that match but have not expired yet, so a controller can
// requeue exactly then instead of polling.
//
// Conditions that are absent never match: a Node that has not reported Ready yet is not unhealthy by its
// conditions. Waiting for a Node to appear or to report at all (MachineHealthCheck's nodeStartupTimeout) is
// the caller's decision. A matching condition without a LastTransitionTime is treated as having held its
// status forever, as Cluster API does: it has expired as soon as it matches.
package conditions
