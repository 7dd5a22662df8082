// Package bmcdrivers builds the registry of every BMC driver metalheal ships (Redfish and its vendor
// aliases, IPMI, Ironic). The manager and `kubectl metalheal bmc check` both build theirs here, so an
// admin's credentials check reaches the BMC through exactly the driver code the remediator uses.
package bmcdrivers
