// Package v1alpha1 is metalheal's API, group remediation.metalheal.io, version v1alpha1.
//
// Health checkers (MachineHealthCheck for Cluster API Machines, NodeHealthCheck for bare Nodes) decide
// that a target is unhealthy and create an external remediation request (an EMR) from a template. The
// bundled remediator acts on PowerCycleRemediation EMRs: it power-cycles the host through the BMC that
// a BMC object describes. Every field is validated by the API server (OpenAPI bounds and CEL rules), so
// a bad spec is refused with a message that names the field instead of misbehaving at 3 a.m.
//
// This package imports only the standard library, k8s.io/api and k8s.io/apimachinery: it is cheap to
// import and holds no business logic.
//
// +kubebuilder:object:generate=true
// +groupName=remediation.metalheal.io
package v1alpha1
