// Package ipmi is the IPMI-over-LAN bmc.Driver, for BMCs that speak no Redfish.
//
// It drives the ipmitool command through bmclib's ipmitool provider: IPMI v2.0 (lanplus), cipher suite 3
// (RAKP-HMAC-SHA1 authentication, HMAC-SHA1-96 integrity, AES-CBC-128 confidentiality), administrator
// privilege. The password reaches ipmitool through its environment, never its command line. The
// ipmitool binary must be installed (Debian/Ubuntu: apt-get install ipmitool); New fails with
// bmc.ErrUnsupported when it is not. A graceful power-off is chassis power soft (an ACPI shutdown request),
// the diagnostic interrupt chassis power diag; a BMC that refuses either ("Invalid data field in request")
// fails with bmc.ErrUnsupported.
//
// ipmitool says "Unable to establish IPMI v2 / RMCP+ session" whether the password is wrong or nobody
// answers. To tell the two apart the driver then sends an RMCP presence ping (see Ping): a BMC that
// answers it refused our credentials (bmc.ErrAuthentication); one that does not is bmc.ErrUnreachable.
package ipmi
