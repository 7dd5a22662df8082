// Package nhc is the NodeHealthCheck controller: for clusters without a Machine API it checks Nodes
// directly against a NodeHealthCheck's conditions and, within the unhealthy budget, creates an external
// remediation request (any kind, from a template) for each Node that stays unhealthy, deleting it once
// the Node is healthy again.
package nhc
