package mhc

// The MachineHealthCheck controller reads Cluster API Machines and Clusters and the Nodes, marks Machines
// for remediation through their status (conditions only, with a merge patch: patch on machines/status),
// and reads a workload cluster's kubeconfig Secret with an uncached, namespaced Get (never list or watch)
// the first time it connects to it.
// Remediation templates and requests of any kind are reached through the aggregated ClusterRole
// ext-remediation (config/rbac/ext_remediation_role.yaml): a remediator grants get/list/watch on its
// template kind and get/list/watch/create/patch/delete on its request kind there.
//
// No Secret rule here: config/default reads Secrets only in the manager's namespace (least privilege).
// Cluster API keeps <cluster>-kubeconfig Secrets in each Cluster's namespace; the kubeconfig-readers
// component (config/components, used by config/cluster-api) grants get on Secrets in exactly those
// namespaces and sets --cluster-namespaces (docs/machinehealthcheck.md). Machines and Clusters are read in
// whichever version is served: the rules name the group, not a version.
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=machinehealthchecks,verbs=get;list;watch
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=machinehealthchecks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines/status,verbs=patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// Node leases (internal/gates: the NodeHealthCheck's rules), only in the lease namespace, and the other
// checks of both kinds for the overlapping and control-plane rules.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=medik8s-leases
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=nodehealthchecks,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
