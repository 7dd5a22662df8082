// Package bmc talks to baseboard management controllers: the out-of-band controllers that can power a
// host off and on even when its operating system is dead.
//
// A Driver is a small interface (PowerState, PowerOn, PowerOff) implemented once per protocol: Redfish,
// IPMI and OpenStack Ironic. A Registry, built explicitly in main, maps an address scheme to the factory
// of its driver; Registry.New parses a BMC address (metal3's conventions, see ParseAddress) and returns a
// ready driver. Errors are typed so callers can branch on what went wrong (errors.Is(err, ErrUnreachable),
// ErrAuthentication, ErrUnsupported, ErrTimeout) without ever seeing a credential in a message.
//
// Drivers never see Kubernetes: they report noteworthy things through a plain func(reason, message string).
package bmc
