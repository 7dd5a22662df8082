package powercycle

// The remediator works PowerCycleRemediations, reads BMCs, their credential Secrets and their CA bundles
// (Secrets or ConfigMaps; only in the manager's own namespace: a namespaced Role), taints Nodes, deletes
// Machines when it escalates, and takes node leases (only in the lease namespace: a namespaced Role
// there). It never creates a remediation request: that is the checkers' right (the remediation-requester
// ClusterRole, config/rbac).
//
// Least privilege: BMCs are read-only; their status is patched (the BMC inventory, bmcinventory/rbac.go,
// writes its checks there, and the remediator each host's record of its recent remediations). A Machine is deleted only by the escalation of a request the remediator trusts, and the
// Machine is the request's owner, so in the request's namespace: delete on Machines is granted per
// trusted namespace (a Role in the manager's namespace here; config/components/kubeconfig-readers and the
// Helm chart's remediationNamespaces add one in each namespace of --remediation-namespaces), never
// cluster-wide. Nodes are cluster-scoped, so the taints (an update of the Node) need update on every
// Node.
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=powercycleremediations,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=powercycleremediations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=powercycleremediations/finalizers,verbs=update
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=powercycleremediationtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=bmcs,verbs=get;list;watch,namespace=metalheal-system
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=bmcs/status,verbs=patch,namespace=metalheal-system
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=delete,namespace=metalheal-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=medik8s-leases
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch,namespace=metalheal-system
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch,namespace=metalheal-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
