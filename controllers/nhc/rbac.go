package nhc

// The NodeHealthCheck controller reads Nodes, takes node leases (only in the lease namespace, which the
// deployment ships: config/default) and creates remediation requests of any kind. Access to the template
// and remediation kinds is not listed here: it comes through the aggregated ClusterRole ext-remediation
// (config/rbac), which every remediator extends by labelling a ClusterRole
// rbac.ext-remediation/aggregate-to-ext-remediation: "true".
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=nodehealthchecks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=nodehealthchecks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=nodehealthchecks/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=medik8s-leases
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
