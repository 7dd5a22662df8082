// Package ironic is the bmc.Driver for hosts enrolled in OpenStack Ironic (metal3 clusters, standalone
// Ironic): instead of talking to the BMC, it asks Ironic to change the node's power state, so Ironic's
// own view of the node stays right.
//
// The address is ironic://host[:6385]/NODE (ironic+https for TLS), NODE being the node's UUID or name.
// With credentials the driver authenticates with HTTP basic auth (Ironic's http_basic strategy), without
// them it sends none (noauth). It speaks API microversion 1.27, the first with soft power off.
//
// Ironic answers 409 Conflict while another operation holds the node's lock; the driver retries power
// requests with a bounded exponential backoff until its context ends.
package ironic
