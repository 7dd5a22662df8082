// Package engine holds the rules the NodeHealthCheck and the MachineHealthCheck share, written once and
// decided as pure functions of what a check observed and now. The two controllers are adapters around
// it: each says which targets its kind selects (Nodes, Machines), how a target's health is read, and how
// a remediation is written; the engine (with internal/gates, internal/budget, internal/backoff and
// internal/template) decides what happens to a target's remediation.
//
//   - Escalate walks a target's remediation steps: it ends the current step when its timeout passes, its
//     request reports Succeeded=False, or its step left the spec (marking the request timed out, except
//     the last step's failed request, which is left as its remediator left it), asks again for a current
//     request that vanished, starts the next step once every ended step's request is finished with the
//     host (one hand per host: template.HandOver), and says when to look again. Its memory is the check's
//     status: one Record per step started, adopted from the requests themselves when the status lost them.
//   - Pass decides a check's unhealthy targets, the same for both kinds: per target the walk (Escalate) and
//     its events, the Node's lease kept while the check's requests live, the target's holds, and its start,
//     which Admit puts through the Gate in the order the targets' criteria expired; and (Healthy) a target
//     healthy again, its requests held for healthyDelay, then deleted. The adapters map each Outcome to
//     their status entries and events; Executor writes it.
//   - DecideCheckWide sets the check-wide conditions (Disabled, Paused, RemediationAllowed, StormActive
//     with its cooldown) from the check's Disabled cause, the budget and the pause requests, with the
//     events of their transitions, the same for both kinds.
//   - HealthyHold keeps a target healthy again under remediation for healthyDelay, or until a person
//     confirms it (a negative delay); Unconfirm removes the confirmation once it has served.
//   - Dry run (SkipDryRun, WouldCreate): a check decides everything and starts nothing.
//   - Gate applies the gates of a new start in one order for both kinds (the overlapping rule, the repeat
//     back-off, control-plane targets one at a time and the Node's lease, dry run); a Skip is the
//     target's skip, and Skip.Event its event, once per reason and message.
//   - Starter makes the writes that start or keep a remediation, the same for both kinds: a Node's lease
//     (a control-plane start under the manager's gates.ControlPlaneClaim; a lease someone else holds is a
//     Skip) and a remediation request (one the check made already is adopted, anyone else's is a
//     RemediationExists Skip), and lets a lease go (Release). Send makes a new request's two writes in the
//     one order both kinds follow: the lease first, except a worker's PowerCycleRemediation (LeaseAfter),
//     whose lease LeasesAfter takes once every request of the pass went out, deleting the request again
//     (a Skip) should someone else hold it by then.
//   - Executor carries out what a pass decided, the same for both kinds and in one order (the leases the
//     check no longer needs let go first, then each target's writes one after the other, the targets
//     together, then LeasesAfter and the own writes of the targets that have just failed, then a report of
//     each request sent); its hooks say how a kind differs: what a request is made of, its own write (a
//     Machine's conditions), and what it records of each write. Delete deletes a request, and InParallel
//     sends writes about different objects together. StatusWrites writes a check's status, also when it
//     seems unchanged but was decided from a copy older than the check's last status write.
//   - Templates reads and checks a check's remediation templates before anything is decided, the same for
//     both kinds (StepRefs lists a spec's steps in order, KindStates says which kinds can be read): a
//     template missing or unusable is a Cause, the check's Disabled condition, while its targets are still
//     read and reported and the steps under way still end. RecentWrites remembers the requests a check has
//     just created or deleted (the Executor records them) while its cache lags behind: one create and one
//     delete per request.
//   - WatchChecks is how both kinds watch their own checks: a check looks again at its own spec and
//     annotations (CheckChanged), not at its status writes, and every other check of its kind (PeersOf) at
//     what the overlapping rule reads of it (PeerChanged: its spec, its deletion, and of its status only
//     PeerStatus, disabled or not and the targets it is remediating).
//   - NodeChanged (NodeUpdates) and LeaseChanged are the watch filters both kinds use; RequestKind is how
//     both watch a remediation kind (ChecksOwning maps a request to its check, RequestChanged drops the
//     remediator's progress reports, and metalheal's own kind is read from the remediator's typed
//     informer, TypedRequest), ListRequests lists a kind's requests from the cache, typed or unstructured,
//     and Pending says a check waits for a kind's first watch; RequeueAfter is when a check is looked at
//     again; RequestOf and MarkTimedOut read and mark a remediation request of any kind.
//
// The admission gates (overlap, control plane one at a time, node leases: gates.Admission and
// gates.ControlPlaneClaim) live in internal/gates. Package enginetest holds the table both checkers must
// pass. docs/healthchecks.md describes these rules for administrators.
package engine
