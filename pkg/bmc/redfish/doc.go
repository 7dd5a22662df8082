// Package redfish is the bmc.Driver for Redfish BMCs, built on gofish's resource models.
//
// A driver logs in lazily on its first call: it reads the service root, opens a session
// (POST SessionService/Sessions, then X-Auth-Token) or falls back to HTTP basic auth when the service has
// no SessionService, and keeps the session for every later call. A 401 on a cached session means the BMC
// dropped it: the driver logs in again once and retries. Close logs out.
//
// The ComputerSystem is the one the BMC address names (/redfish/v1/Systems/ID) or, when it names none,
// the only one the service lists. Power on is the On reset; power off is ForceOff, or GracefulShutdown
// when not forced. Both are no-ops when the system is already there. The diagnostic interrupt is the Nmi
// reset. A reset type the system does not list among its allowed ones (ResetType@Redfish.AllowableValues)
// is never sent: the call fails as unsupported, and nothing is sent in its place.
//
// The drivers share one HTTP transport (per TLS setting). A BMC keeps its connection between calls while
// it is polled (idle connections close after 15 s), also when many BMCs share one address (a chassis
// manager, a Redfish proxy, an emulator), and every answer is read to its end so that its connection can
// be kept.
//
// The driver sends requests to the BMC's origin (the scheme://host:port of its address) only. It follows a
// redirect within the BMC (sushy-tools answers a system addressed by name with a 307 to its UUID) and
// refuses one that leaves it with a *bmc.RedirectError before anything is sent: Go's client would forward
// the X-Auth-Token anywhere, and basic credentials to another port or scheme of the same host. A link in
// the BMC's answers that is not a path on the BMC is refused too. Every answer is read to at most
// bmc.MaxResponseBytes; a larger one ends the call with a *bmc.ResponseTooLargeError as soon as that much
// has arrived (at once when its length is declared), whether the BMC keeps sending or stalls.
//
// The driver is a bmc.PowerWatcher: WatchPower follows the EventService's Server-Sent Events stream
// (ServerSentEventUri) and calls back for each event whose OriginOfCondition is its system. Opening the
// stream is a call like the others (under the lock, within Options.Timeout); reading it is not: it holds
// no lock and has no deadline, only bounds on one event (64 KiB) and on silence (5 minutes). A BMC
// without a stream to offer is unsupported, and its caller polls.
//
// Every call is bounded by its context and by Options.Timeout. gofish's own client keeps the context it
// was connected with, so the driver hands gofish a small common.Client of its own, bound to each call's
// context. Errors are *bmc.Error of one kind (unreachable, authentication, unsupported, timeout); the
// password and the session token are scrubbed from every message.
package redfish
