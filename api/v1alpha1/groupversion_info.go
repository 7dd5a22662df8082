package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "remediation.metalheal.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&MachineHealthCheck{}, &MachineHealthCheckList{},
		&NodeHealthCheck{}, &NodeHealthCheckList{},
		&PowerCycleRemediationTemplate{}, &PowerCycleRemediationTemplateList{},
		&PowerCycleRemediation{}, &PowerCycleRemediationList{},
		&BMC{}, &BMCList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
