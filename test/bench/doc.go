// Command bench measures a health checker and metalheal's remediator at scale, in a local world built
// from the end-to-end pieces: a real etcd, kube-apiserver and kube-controller-manager (test/world),
// thousands of simulated kubelets tied to BMC power (test/nodesim), a Redfish BMC simulator
// (test/redfish-mock), and metalheal's deployed RBAC (test/harness). The controller under test runs as
// its own process: metalheal's manager binary by default, or any command (--controller-cmd).
//
// It measures, in phases:
//
//	startup           the controller's initial list and sync (and, for metalheal, the first check of every BMC)
//	steady            no failures, --steady long
//	steady-streams    with --power-watch: the same, once every BMC's spec.powerWatch is on and the manager
//	                  holds one event stream open per BMC (the cost of following every host's power)
//	spread, burst     --failures nodes fail one after another over --spread-over, then all at once
//	floor             before the burst: --floor-rounds rounds of --failures creates the bench sends itself
//	power-single      one PowerCycleRemediation alone, with --bmc-latency per Redfish request
//	power-concurrent  --cycles PowerCycleRemediations created at once
//
// Detection latency is the delay from a failed node's condition expiry (the lastTransitionTime the bench
// wrote on its Ready=False condition, a whole second, plus --unhealthy-duration) to the moment the bench's
// own watch receives the remediation request's ADDED event: a local clock, not creationTimestamp (1s
// granularity). The floor is what the API server alone takes to store as many creates as a burst has
// failures, sent at once by the bench with nothing between them (custom resources shaped like the check's
// requests, which no controller acts on): a burst's requests cannot all be stored sooner, whichever
// controller sends them. The watch runs in a process of its own (the bench's executable, run as
// "bench watch-requests"), so that it does not wait behind the simulated kubelets' goroutines; the API
// server's audit log adds when the request was sent and stored. The controller's CPU time and memory
// come from /proc (per phase: CPU seconds, share of one core, peak RSS); each phase also records what
// makes its figures noisy: the load average, the machine's CPU steal and how far the simulated kubelets
// fell behind. The controller's API requests come from the API server's audit log, filtered by its user
// (metalheal's service account, or a dedicated user for a peer), by verb and resource. The API server's
// and etcd's own metrics add, per phase, how long requests waited in each priority level's fairness
// queue, the watches the API server closed on slow watchers, etcd's time per write and its watch gauges;
// each detected failure records the Redfish requests (the manager's periodic BMC checks) around its
// expiry.
//
// The power-cycle phases time each remediation's first attempt from the stamps of its status (whole
// seconds), and again as its BMC saw it, to the millisecond: the Redfish mock's record of requests and
// its power changes, the simulator's boots, and the audit log give the power-off request, the poll that
// read the host off, the power-on request, the poll that read it on, the node's Ready, the remediator's
// first write after it, and the Succeeded status stored and seen. For metalheal they add the
// remediator's queue waits and the reconciles that waited for its cache (from the manager's metrics).
//
// Peers: --checker measures one of four health checkers in the world its kind checks, with no BMC objects
// and no power cycles (every checker asks for the same PowerCycleRemediation, from one template, and the
// bench heals the node once it sees the request): metalheal-nhc and metalheal-mhc (metalheal's manager
// running that controller alone), medik8s-nhc and capi-mhc (node-healthcheck-operator's and Cluster API's
// managers from `make build-peers`, each under its own config/default RBAC, test/peers). The
// MachineHealthChecks' world adds a Cluster whose kubeconfig Secret is a kubeconfig of the world itself and
// one Machine per Node. "bench peers" (`make bench-peers`) runs each checker --runs times, interleaved, a
// fresh world per run, and prints the medians, ranges and ratios side by side (peerstable.go).
//
// Fleet: --world=fleet (`make bench-fleet`) runs a management cluster and --clusters workload clusters of
// --nodes-per-cluster, each its own control plane (harness.StartWorkloadClusters), with one
// MachineHealthCheck per cluster (fleet.go). It measures the manager at rest with one cluster connected,
// then with all, each for --steady (the difference, per cluster added, is what a connection costs), then
// the spread and the burst with the failed hosts round-robin across the clusters; no floor, no power-cycle
// phases.
//
// Output: a table on stdout, ending with the targets (MET, MISSED, or reported for a world the target is
// not for: latency targets are for 1,000 nodes, cost targets and the wave guard for 5,000), and a JSON
// file (--out). `make bench` runs 5,000 nodes and `make bench-small` 1,000; BENCHMARKS.md records the
// figures.
package main
