// Package leases coordinates who may act on a Node, through node leases that are wire-compatible with
// medik8s/common's lease manager, so metalheal, node-maintenance-operator, NodeHealthCheck and the
// medik8s remediators all respect each other.
//
// A node lease is a coordination.k8s.io/v1 Lease named "node-<nodename>" in one namespace shared by
// everyone (DefaultNamespace, "medik8s-leases", unless changed with WithNamespace), owned by the Node (so it
// is garbage-collected with it), whose holderIdentity is "<Kind>-<name>" of the object acting on the node
// (see HolderIdentity), or "<Kind>.<group>-<name>" for a kind whose name another project uses too
// (QualifiedHolderIdentity: metalheal's NodeHealthCheck beside medik8s'). A lease is valid until
// renewTime+leaseDurationSeconds; after that anyone may take it over.
//
//   - RequestLease creates the lease, renews it when we already hold it, takes it over when it has expired,
//     and otherwise returns an *AlreadyHeldError naming the holder and when its lease runs out. Callers
//     hand off on that error: no remediation starts, an event says who holds the node, retry at Until.
//     A lease without a holder counts as free.
//   - RequestLeaseFrom is RequestLease that also takes over a valid lease held by one of the holders it
//     is given: those acting for us (a health check takes the lease over from the remediator of its own
//     request, which took it first).
//   - InvalidateLease releases the lease by deleting it, but only if we hold it. Releasing a lease that
//     does not exist, or that someone else holds, is a no-op that returns nil: after the call we do not
//     hold the lease, which is all a finalizer cleaning up "the lease we took" needs to know. (medik8s'
//     manager returns an error for someone else's lease; we do not make callers filter it.)
//   - HolderOf and GetLease tell callers who holds a node.
//
// Time comes from the injected clock. Updates use the lease's resourceVersion, so two managers racing for
// the same lease cannot both win; the loser re-reads and decides again (a few times, then it returns the
// conflict for the caller to requeue). A Manager keeps no state of its own and is safe for concurrent use.
//
// The cache trap: the Manager reads leases through the client it is given. With a controller-runtime
// cached client, the first Get of one Lease quietly starts an informer over every Lease the cache may see,
// including the kubelets' node heartbeats in kube-node-lease (one per node, renewed every 10 s). Give the
// Manager a client whose Lease cache is restricted to the lease namespace, e.g. in cache.Options:
//
//	ByObject: map[client.Object]cache.ByObject{
//		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{leases.DefaultNamespace: {}}},
//	}
//
// or one that does not cache Leases at all (client.CacheOptions{DisableFor: ...}). A cache shows a lease
// some time after it was written, so with a cached client also pass WithLiveReader (a manager's API
// reader): after a lost race, the next attempt reads the lease from the API server rather than the same
// stale copy.
//
// The lease namespace must exist; RequestLease returns a *NamespaceNotFoundError when it does not, unless
// the Manager was made WithNamespaceCreation (for a cluster no one prepared, such as a Cluster API
// workload cluster): it then creates the namespace and the lease.
package leases
