// Package engine holds the rules the NodeHealthCheck and the MachineHealthCheck share, written once and
// decided as pure functions of what a check observed and now. The two controllers are adapters around
// it: each says which targets its kind selects (Nodes, Machines), how a target's health is read, and how
// a remediation is written; the engine decides what happens to a target's remediation.
//
// Escalate walks a target's remediation steps: it ends the current step when its timeout passes or its
// request reports Succeeded=False (marking the request timed out, except the last step's failed request,
// which is left as its remediator left it), asks again for a current request that vanished, starts the
// next step once every ended step's request is finished with the host (one hand per host:
// template.HandOver), and says when to look again. Its memory is the check's status: one Record per step
// started, adopted from the requests themselves when the status lost them.
//
// docs/healthchecks.md describes these rules for administrators.
package engine
