// Package world runs a real, local Kubernetes control plane for end-to-end tests, the demo and the
// benchmarks: etcd, kube-apiserver and kube-controller-manager, each its own process started from the
// binaries in ./bin (built by `make envtest-bins`), on free loopback ports, in a temporary directory.
//
// etcd and kube-apiserver come up through controller-runtime's envtest (which makes their certificates
// and service-account keys); kube-controller-manager is started next to them with a kubeconfig of its
// own. The controller-manager runs the controllers whose behaviour metalheal depends on, so that they
// are Kubernetes' own and not imitations: the garbage collector, the node lifecycle controller (with a
// short grace period, so a node that stops heartbeating turns Ready=Unknown within seconds), taint-based
// eviction, PodGC (which force-deletes terminating pods on nodes that are not Ready and carry the
// node.kubernetes.io/out-of-service taint: the non-graceful node shutdown flow), the namespace controller
// and the service-account controller. Nothing else runs: no scheduler, no kubelets (see test/nodesim).
// metalheal's CRDs (config/crd/bases) are installed before the controller-manager starts, so its garbage
// collector knows them from the start.
//
//	w, err := world.Start(ctx, world.Options{})
//	defer w.Stop()
//	cfg := w.RESTConfig()   // admin (system:masters)
//	path := w.Kubeconfig()  // kubectl --kubeconfig=path get nodes
//
// The context bounds start-up only; the world lives until Stop. Process logs are in w.Dir()/logs.
// StopAPIServer and StartAPIServer stop the kube-apiserver process and start it again on the same
// address, certificates and etcd (an API server down for a while, etcd running on): clients that knew it
// reconnect to the same endpoint and find what was stored before. The controller-manager goes and comes
// back with it, as a real one that loses its leader lease does.
// Several worlds may run side by side (a Cluster API management cluster and its workload clusters, see
// test/harness): Options.Name tells their directories apart, and each lists only its own Processes.
package world
