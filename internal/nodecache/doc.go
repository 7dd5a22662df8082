// Package nodecache says what of a Node the manager keeps in its caches: the local cache and every
// workload cluster's Node cache use the same transform (Slim), so that whoever controls a cluster's Nodes
// (its kubelets, a workload cluster's admin) cannot grow the shared manager with what no controller reads.
package nodecache
