// Package ironic is the bmc.Driver for hosts enrolled in OpenStack Ironic (metal3 clusters, standalone
// Ironic): instead of talking to the BMC, it asks Ironic to change the node's power state, so Ironic's
// own view of the node stays right.
//
// The address is ironic://host[:6385]/NODE (ironic+https for TLS), NODE being the node's UUID or name.
// With credentials the driver authenticates with HTTP basic auth (Ironic's http_basic strategy), without
// them it sends none (noauth). It speaks API microversion 1.27, the first with soft power off; the
// diagnostic interrupt (inject_nmi) alone asks for 1.29, the first with it.
//
// Requests go to Ironic's origin (the scheme://host:port of the address) only: a redirect within it is
// followed, one that leaves it ends in a *bmc.RedirectError (ErrUnsupported) before anything is sent there,
// for gophercloud puts the basic credentials in every request and Go keeps them on a redirect to another
// port or scheme of the same host. Every answer, error answers included, is read to at most
// bmc.MaxResponseBytes; a larger one ends the call with a *bmc.ResponseTooLargeError (ErrUnreachable) as
// soon as that much has arrived. gophercloud reads an error answer whole and drops the read's error, so the
// driver's transport records an answer cut off in the call's context, and the call reports that.
//
// Ironic answers 409 Conflict while another operation holds the node's lock; the driver retries power
// requests with a bounded exponential backoff until its context ends.
package ironic
