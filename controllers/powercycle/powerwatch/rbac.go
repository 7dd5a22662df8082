package powerwatch

// The power watch reads BMCs in the manager's own namespace (their credential Secrets and CA bundles
// through internal/bmcaccess, granted by the BMC inventory's and the remediator's markers) and Nodes,
// emits events on the BMCs, and writes one condition of a Node's status. Least privilege: patch on
// nodes/status only, a subresource of its own; the manager still may not patch Nodes (their spec, labels
// or taints).
// +kubebuilder:rbac:groups=remediation.metalheal.io,resources=bmcs,verbs=get;list;watch,namespace=metalheal-system
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
