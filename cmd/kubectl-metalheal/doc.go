// Command kubectl-metalheal is the kubectl plugin for metalheal (`kubectl metalheal`, installed by copying
// it onto the PATH or through krew: plugins/krew/metalheal.yaml). It answers an admin's questions
// with the admin's own kubeconfig:
//
//   - status: every NodeHealthCheck and MachineHealthCheck with its pool, budget, storm and in-flight
//     remediations, the remediations under way, and the BMCs that are not ready;
//   - timeline NODE: what happened to a node, as the demo tells it (internal/timeline), rebuilt from the
//     remediation's status, events, the Node, the node lease and the host's BMC's record of its ended
//     remediations (which outlives the requests and their events);
//   - history NODE: the host's last ended remediations as its BMC records them;
//   - bmc check NODE: the host's power state read through the manager's own driver code
//     (internal/bmcaccess, internal/bmcdrivers), to test a BMC's address and credentials.
//
// Each command prints a table or, with -o json|yaml, an object. No secret is ever printed.
package main
