// Package bmcaccess turns a BMC object into a working bmc.Driver, and keeps one driver per BMC so that
// every controller talking to the same host shares its session.
//
// An Access reads BMC objects and their credential Secrets through a (cache-backed) client, only in the
// manager's own namespace, and builds drivers through a bmc.Registry:
//
//	access := bmcaccess.New(mgr.GetClient(), namespace, registry, bmcaccess.Options{})
//	b, driver, err := access.ForHost(ctx, bmcaccess.Host{Node: "worker-7"}) // the BMC of this cluster's worker-7
//	driver, err := access.ForBMC(ctx, b)                                    // the driver of one BMC object
//
// A host is a Node of the cluster the manager runs in, or of a Cluster API workload cluster (Host.Cluster;
// the BMC's spec.cluster): node names repeat across clusters, and a BMC is never guessed from one.
//
// A BMC may name, in spec.caBundleRef, a Secret or ConfigMap of the same namespace whose key holds the CA
// bundle its certificate is verified against (a site's private CA); the PEM reaches the driver through
// bmc.Options.CABundle. A bundle that is missing is ErrCABundleNotFound, one without a usable certificate
// ErrCABundleInvalid: conditions for the BMC, never a crash.
//
// Drivers are cached by the BMC's UID. A cached driver is rebuilt, and the old one closed (logging out
// of its session), when the BMC's generation changes (its spec was edited), its Secret's resourceVersion
// changes (the credentials were rotated) or its CA bundle's object changes. Forget drops a deleted BMC's
// driver.
//
// Failures are *Error values of one kind (ErrBMCNotFound, ErrBMCAmbiguous, ErrSecretNotFound, ErrInvalidCredentials,
// ErrCABundleNotFound, ErrCABundleInvalid, ErrInvalidAddress, bmc.ErrUnsupported); the drivers' own
// errors carry the kinds of package bmc. Reason maps either to the condition reason of api/v1alpha1 (a
// certificate that does not verify: CertificateVerificationFailed). No error, log line or report made
// here ever holds a password: driver errors are scrubbed once more on their way out.
//
// ForHost and the BMC inventory controller's Secret and ConfigMap watches look BMCs up by field indexes
// (IndexHost, IndexNodeName, IndexSecretName, IndexCABundle); SetupIndexes registers them, once per Access however
// many controllers ask.
package bmcaccess
