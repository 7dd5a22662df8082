package nhc

// The NodeHealthCheck controller reads Nodes, creates remediation requests of any kind (through the
// aggregated ClusterRole metalheal-ext-remediation, see config/rbac) and takes node leases.
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=nodehealthchecks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=nodehealthchecks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=nodehealthchecks/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
