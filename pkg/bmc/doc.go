// Package bmc talks to baseboard management controllers: the out-of-band controllers that can power a
// host off and on even when its operating system is dead.
//
// A Driver is a small interface (PowerState, PowerOn, PowerOff) implemented once per protocol: Redfish,
// IPMI and OpenStack Ironic. PowerOff without force is a graceful shutdown, which a BMC may not offer.
// A driver that can also send its host a diagnostic interrupt (an NMI, for a kernel dump) is a Diagnoser;
// callers go through Diagnose, which answers ErrUnsupported for the others, as for a BMC that refuses. A Registry, built explicitly in main, maps an address scheme to the factory
// of its driver; Registry.New parses a BMC address (metal3's conventions, see ParseAddress) and returns a
// ready driver. Errors are typed so callers can branch on what went wrong (errors.Is(err, ErrUnreachable),
// ErrAuthentication, ErrUnsupported, ErrTimeout) without ever seeing a credential in a message.
//
// HTTP-based drivers talk to the BMC and nothing else: CheckRedirect follows a redirect only within the
// BMC's origin (scheme, host and port) and refuses any other with a *RedirectError before anything is
// sent there, so credentials and session tokens never leave the BMC; LimitResponse cuts every answer at
// MaxResponseBytes with a *ResponseTooLargeError. The Redfish and Ironic drivers report the first as
// ErrUnsupported (the BMC cannot be used as addressed) and the second as ErrUnreachable (a bad answer).
//
// Certificates are verified against the system's authorities, or, when Options.CABundle holds PEM
// certificates (a site's private CA), against those only; ParseCABundle refuses a bundle without a usable
// certificate. A certificate that does not verify is an ErrUnreachable wrapping a *CertificateError, whose
// message names the two ways out (a CA bundle, or no verification). IPMI has no certificates.
//
// A BMC's hostname is looked up as written, as an absolute name, never under the search domains of the
// pod's resolver (ClusterFirst, ndots 5), where anyone who may create a namespace could answer for it:
// HTTP transports dial through DialContext, IPMI gives ipmitool an address from LookupHost. The TLS server
// name and the Host header keep the name as the address has it.
//
// Drivers never see Kubernetes: they report noteworthy things through a plain func(reason, message string).
package bmc
