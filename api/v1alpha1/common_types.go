package v1alpha1

// TemplateReference names a remediation template: any kind whose name ends in "Template" and whose
// spec.template holds the spec of the remediation request to create (the external remediation contract).
// +kubebuilder:validation:XValidation:rule="self.kind.endsWith('Template') && size(self.kind) > 8",message="kind must name a remediation template kind ending in 'Template', e.g. PowerCycleRemediationTemplate"
type TemplateReference struct {
	// apiVersion is the template's group/version, e.g. remediation.metalheal.io/v1alpha1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$`
	APIVersion string `json:"apiVersion"`

	// kind is the template's kind, e.g. PowerCycleRemediationTemplate.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind"`

	// name is the template's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// namespace is the template's namespace. For a MachineHealthCheck it must be empty or the check's own
	// namespace; a NodeHealthCheck is cluster-scoped and requires it.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// ConditionStatusString is a node condition's status as a health check matches it.
// +kubebuilder:validation:Enum=True;False;Unknown
type ConditionStatusString string
