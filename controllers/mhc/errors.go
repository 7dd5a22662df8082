package mhc

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// InvalidSpecError reports a MachineHealthCheck spec the controller cannot act on. Retrying does not help
// until the spec changes.
type InvalidSpecError struct {
	// Field is the offending field's JSON path.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *InvalidSpecError) Error() string {
	return fmt.Sprintf("invalid MachineHealthCheck spec: %s: %s", e.Field, e.Reason)
}

// WorkloadClusterError reports that a workload cluster's Nodes could not be read through its kubeconfig
// Secret. It never includes the kubeconfig.
type WorkloadClusterError struct {
	// Cluster is the Cluster's namespace and name.
	Cluster types.NamespacedName
	// Err is the cause.
	Err error
}

func (e *WorkloadClusterError) Error() string {
	return fmt.Sprintf("workload cluster %s: %v", e.Cluster, e.Err)
}

func (e *WorkloadClusterError) Unwrap() error { return e.Err }
