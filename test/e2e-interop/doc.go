// Package interop is metalheal's interoperability suite: the other ecosystems' real managers drive
// metalheal's remediator, and metalheal's checks drive their remediators' kinds, in the local world of
// test/e2e (etcd, kube-apiserver, kube-controller-manager, the Redfish mock, simulated kubelets).
//
// hack/build-peers.sh builds Cluster API v1.14.2's core manager and medik8s node-healthcheck-operator
// v0.12.0 from the Go module proxy into ./bin and renders each one's config/default. The suite installs
// each peer's CRDs and its own RBAC exactly as rendered, serves their admission and conversion webhooks from
// their local processes, and runs each as its service account (docs/interop.md lists the few flags that
// differ from a pod). Cluster API's controllers run their real flow against stand-in infrastructure kinds;
// Self Node Remediation's and metal3's kinds are CRDs written from their published fields (testdata/crds),
// with nothing running them.
//
// Scenarios: (1) Cluster API's MachineHealthCheck → PowerCycleRemediation; (2) medik8s' NodeHealthCheck
// with one metalheal template; (3) medik8s escalating between two metalheal templates on a host that never
// comes back; (4) metalheal's and medik8s' NodeHealthChecks side by side → SelfNodeRemediation, compared
// field by field, and one lease holder per node; (5) metalheal's and Cluster API's MachineHealthChecks side
// by side → Metal3Remediation, compared field by field; (6) Cluster API's and metalheal's
// MachineHealthChecks → PowerCycleRemediation for hosts of a separate workload cluster (its own API
// server, test/harness's fleet) whose Node names repeat the management cluster's; and the samples for
// Cluster API and medik8s users accepted by the peers' CRDs and webhooks.
//
// The suite is guarded by the interop build tag:
//
//	make test-e2e-interop                                                   # builds the peers once, then runs all (~3 min)
//	go test -tags interop -count=1 -v ./test/e2e-interop/ -ginkgo.v -ginkgo.focus='scenario 4'
//
// METALHEAL_KEEP_WORLD=1 keeps the world's directory (kubeconfig, every process's logs) after the run.
package interop
