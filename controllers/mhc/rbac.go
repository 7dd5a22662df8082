package mhc

// The MachineHealthCheck controller reads Cluster API Machines and Clusters, marks Machines for
// remediation and creates remediation requests (aggregated ClusterRole metalheal-ext-remediation).
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=machinehealthchecks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=machinehealthchecks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=machinehealthchecks/finalizers,verbs=update
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;machines/status,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
