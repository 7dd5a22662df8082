// Package e2e is metalheal's end-to-end suite: the system as production runs it, as separate processes,
// under what production will do to it.
//
// One world (test/harness) serves the whole suite: etcd, kube-apiserver and kube-controller-manager (garbage
// collection, node lifecycle, taint eviction, PodGC), Cluster API's CRDs, the Redfish BMC simulator with one
// system per worker, simulated kubelets tied to those systems' power, and the real manager binary running
// as its own process under config/default's RBAC, with leader election on. Each scenario takes fresh
// worker nodes from the pool, labels them as its group, and checks them with a NodeHealthCheck (or a
// MachineHealthCheck) of its own; it breaks them the way production does (a hung kubelet, a host that never
// comes back, a storm, a BMC that is slow, failing or dead, a manager killed mid-flight) and asserts the end
// state of every object and every simulated host: no remediation request left, no taint, no node lease,
// no finalizer, every host powered on, every node Ready — unless the scenario says otherwise.
//
// The Cluster API fleet scenario adds, for its duration, workload clusters of its own (each its own
// control plane and simulated kubelets, hosts in the same Redfish mock, Node names repeating the
// management cluster's), described in the management cluster as Cluster API would, and asserts per host:
// which cluster's Node, which Redfish system, which lease namespace. Another stops a workload cluster's
// API server mid-remediation (test/world) and starts it again: reported on the request and the check,
// nothing sent to the host while it lasts, one power cycle in all.
//
// Two instruments make the assertions precise:
//
//   - a timeline records, as they happen, every power change of every simulated host (the Redfish mock's
//     hook, or the IPMI simulator's host process) and what watches see of Nodes, Pods, remediation requests
//     and Machines, so ordering ("pods left only after the host was confirmed off and fenced") is asserted on
//     timestamps;
//   - a phase gate (a ValidatingAdmissionPolicy whose parameters name a request and a phase) refuses a
//     remediation's status update that would leave that phase: the manager does the phase's work, cannot
//     record that it moved on, and is killed right there — the worst moment for a crash — to prove that a
//     restart resumes from status alone.
//
// The suite is guarded by the e2e build tag, so `go test ./...` (make test) does not run it; `make
// test-e2e` does:
//
//	go test -tags e2e -count=1 -timeout 20m -v ./test/e2e/ -ginkgo.v                      # all (~4 min)
//	go test -tags e2e -count=1 -v ./test/e2e/ -ginkgo.v -ginkgo.focus='killed mid-remediation' # one scenario
//
// METALHEAL_KEEP_WORLD=1 keeps the world's directory (kubeconfig, the control plane's and every manager's
// logs) for inspection after the run.
package e2e
