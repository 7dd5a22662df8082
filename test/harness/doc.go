// Package harness assembles the whole local story for the demo, the end-to-end suite and the benchmarks:
// a real control plane (test/world), a Redfish BMC simulator serving one system per node
// (test/redfish-mock), simulated kubelets tied to those systems' power (test/nodesim), one BMC object and
// credentials Secret per node, metalheal's deployable RBAC (config/default) bound to a dedicated user, and
// any number of manager processes — the real binary, run as production runs it, under that user. Their
// /metrics is HTTPS and read, as a Prometheus would, with the token of a service account bound to
// metalheal-metrics-reader (Manager.Metrics).
//
//	h, err := harness.Start(ctx, harness.Options{Workers: 5})
//	defer h.Stop()
//	m, err := h.StartManager(ctx)          // the real manager binary, as its own process
//	h.Mock.SetPowerState("2", redfishmock.PowerOff)
//	body, err := m.Metrics(ctx)            // its Prometheus metrics, over HTTPS with a scraper's token
//	m.Kill()                               // SIGKILL, mid-remediation if you like
//
// StartWorkloadClusters adds Cluster API workload clusters, each its own control plane and node
// simulator, whose hosts are systems of the same Redfish mock and whose Node names repeat across
// clusters; the management cluster (the harness's world) gets their Clusters, kubeconfig Secrets,
// Machines and BMCs, as Cluster API and an admin would make them. GrantClusterNamespace gives the manager
// what config/cluster-api grants in the Clusters' namespace.
package harness
