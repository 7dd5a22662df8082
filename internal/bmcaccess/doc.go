// Package bmcaccess turns a BMC object into a working bmc.Driver, and keeps one driver per BMC so that
// every controller talking to the same host shares its session.
//
// An Access reads BMC objects and their credential Secrets through a (cache-backed) client, only in the
// manager's own namespace, and builds drivers through a bmc.Registry:
//
//	access := bmcaccess.New(mgr.GetClient(), namespace, registry, bmcaccess.Options{})
//	b, driver, err := access.ForNode(ctx, "worker-7") // the BMC whose spec.nodeName is worker-7
//	driver, err := access.ForBMC(ctx, b)              // the driver of one BMC object
//
// Drivers are cached by the BMC's UID. A cached driver is rebuilt, and the old one closed (logging out
// of its session), when the BMC's generation changes (its spec was edited) or its Secret's
// resourceVersion changes (the credentials were rotated). Forget drops a deleted BMC's driver.
//
// Failures are *Error values of one kind (ErrBMCNotFound, ErrSecretNotFound, ErrInvalidCredentials,
// ErrInvalidAddress, bmc.ErrUnsupported); the drivers' own errors carry the kinds of package bmc. Reason
// maps either to the condition reason of api/v1alpha1. No error, log line or report made here ever holds
// a password: driver errors are scrubbed once more on their way out.
//
// ForNode and the BMC inventory controller's Secret watch look BMCs up by field indexes (IndexNodeName,
// IndexSecretName); SetupIndexes registers them, once per Access however many controllers ask.
package bmcaccess
