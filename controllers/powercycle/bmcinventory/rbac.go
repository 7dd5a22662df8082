package bmcinventory

// The BMC inventory reads the BMCs, their credential Secrets and their CA bundles (Secrets or ConfigMaps)
// in the manager's own namespace only (a namespaced Role), and emits events on the BMCs. Least privilege:
// it writes only a BMC's status (a merge patch), so BMCs themselves are read-only; their spec is the
// administrator's.
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=bmcs,verbs=get;list;watch,namespace=metalheal-system
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=bmcs/status,verbs=patch,namespace=metalheal-system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch,namespace=metalheal-system
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch,namespace=metalheal-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
