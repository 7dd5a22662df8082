// Package bmcinventory keeps the BMC inventory current, so that an administrator learns that a BMC is
// misconfigured before the node it guards fails. Every BMC object in the manager's namespace is checked
// (reachable, credentials accepted, the host's power state) when it changes, when its credentials Secret
// or CA bundle changes, and once every interval, and the result is reported in its status and, when its
// state changes, in an event.
//
// The periodic checks are spread over the interval: each BMC has its own slot in it, from a hash of its
// UID, so thousands of BMCs created or restarted together never come due together. A restart resumes from
// the status alone (lastChecked and the conditions stand for the last check), and a status is written
// only when an administrator would see a difference, or lastChecked needs a refresh. When is a check
// due, what a check means for the status, and which event a change deserves are pure functions of what
// was observed and the time (status.go); the Reconciler only reads, checks and writes (controller.go).
//
// The inventory shares the drivers with the power-cycle remediator (internal/bmcaccess: one call at a
// time per BMC), and leaves the periodic check of a healthy BMC whose host is being power-cycled to the
// remediator (NodeRemediations).
package bmcinventory
