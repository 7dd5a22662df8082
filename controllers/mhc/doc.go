// Package mhc is the MachineHealthCheck controller: it checks Cluster API Machines
// (cluster.x-k8s.io/v1beta2) and their Nodes against a MachineHealthCheck's criteria and, within the
// unhealthy budget, remediates the unhealthy ones — by marking the Machine for its owner to replace
// (Cluster API's condition-based remediation) or by creating an external remediation request from a
// template.
package mhc
