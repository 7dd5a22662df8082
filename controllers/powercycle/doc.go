// Package powercycle is metalheal's bundled remediator. It reconciles PowerCycleRemediation requests
// with an explicit state machine (Pending → PoweringOff → PoweredOff → PoweringOn → WaitingForNode →
// Succeeded, plus Retrying, Escalating and Failed) whose only memory is the request's status, powering
// hosts off and on through the BMC drivers of pkg/bmc. It also keeps the BMC inventory current: every BMC
// object is checked for reachability, valid credentials and power state.
package powercycle
