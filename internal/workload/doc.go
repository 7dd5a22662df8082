// Package workload reaches Cluster API workload clusters from the management cluster.
//
// In Cluster API's usual topology the Machines live in a management cluster and their Nodes in workload
// clusters, one per Cluster, each reached through the Secret <cluster>-kubeconfig in the Cluster's
// namespace (key "value"). Clusters keeps one connection per workload cluster, shared by every controller
// of the manager: a cache of its Nodes (slimmed as the manager's own Node cache is, see
// internal/nodecache) and of its node leases (the lease namespace only, slimmed too) for the health
// checks' reads and watches and the remediator's waits, and an uncached client, each call bounded, for
// the writes (taints, node leases, the lease namespace on first use) and the reads that must be live (the
// control-plane claim's). A connection is made on first use, its first lists bounded, and dropped when its
// Cluster goes, a watch breaks or a call is not answered, so that a rotated kubeconfig is picked up and a
// cluster that stops answering costs each caller at most a call's bound:
//
//	c, remote, err := clusters.Get(ctx, apiReader, types.NamespacedName{Namespace: "fleet", Name: "edge-a"})
//	// remote=false: the Cluster has no kubeconfig Secret; its Nodes are the management cluster's own
//
// For safety a kubeconfig may carry only inline credentials: one that refers to local files or credential
// plugins is refused (ErrUnsafeKubeconfig), so that whoever can write a Secret cannot make the manager
// read its own files or run commands. Errors never include the kubeconfig.
package workload
