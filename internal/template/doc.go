// Package template turns a remediation template into an external remediation request (EMR), the contract
// between a health checker and a remediator (Cluster API's external remediation proposal, as medik8s'
// NodeHealthCheck also implements it).
//
// A template is an object of any kind whose name ends in "Template" (PowerCycleRemediationTemplate,
// Metal3RemediationTemplate, SelfNodeRemediationTemplate, ...). Its spec.template holds the EMR's spec and
// optional metadata (labels, annotations). Instantiate builds the EMR as unstructured data, so a checker can
// drive any remediator without importing its types:
//
//   - kind is the template's kind minus "Template"; apiVersion and namespace are the template's;
//   - the name is the caller's choice: RequestName gives the contract name (the Machine's name for
//     MachineHealthCheck, the Node's for NodeHealthCheck) to the first step, and a name of its own to a
//     later escalation step whose request would otherwise take the same name;
//   - it is owned (not controlled) by the target, so it never outlives it, and by the health check;
//   - annotations record the node, the template and where it was cloned from.
//
// The constants in this package are the keys both sides agree on: the annotations a checker writes, the
// label that excludes a node from remediation, and the conditions a remediator reports on its EMR
// (Processing, Succeeded, PermanentNodeDeletionExpected), which FindCondition reads back.
//
// One hand per host: a checker starts the next escalation step only once the previous step's request is
// finished with the host (HandOver: gone, Processing=False, no Processing condition at all, or
// HandOverBound after its timed-out mark), so two remediations never act on one host at once.
package template
