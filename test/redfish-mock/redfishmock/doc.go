// Package redfishmock simulates Redfish BMCs for tests, the demo and benchmarks.
//
// One Mock serves a Redfish service root with any number of ComputerSystems (thousands are cheap: a map
// behind one mutex, no goroutine per system). It speaks enough real Redfish for real clients (gofish,
// sushy, redfishtool): the service root, the Systems collection, ComputerSystem with its
// #ComputerSystem.Reset action, and a SessionService whose Sessions collection logs in (X-Auth-Token) and
// out. Everything but the service root and the login needs credentials, as a session token or HTTP basic
// auth.
//
// A Mock is built fluently and then started:
//
//	m, err := redfishmock.New().WithSystems(3).WithCredentials("admin", "secret").WithPowerDelay(5 * time.Second).Start()
//	defer m.Close()
//	// m.URL(), m.SystemPath("1"), m.PowerState("1"), m.Requests() ...
//
// Power transitions take the configured delay on an injected clock (a fake clock in unit tests): the
// system shows PoweringOn or PoweringOff meanwhile, and OnPowerChange hooks hear every step. Faults are
// injected per system or for the whole service, from Go (SetFaults, SetGlobalFaults) or, when the control
// endpoint is on, over HTTP under /mock/ (see control.go). A system's host answers the resets its BMC only
// passes on (WithHost, SetHost): it may ignore GracefulShutdown, and may power itself off, or reboot, some
// time after an Nmi, as a host writing a kernel dump does. Every Redfish request is recorded with the kind
// of authentication it carried, so tests can assert on what a client really sent.
//
// An EventService (linked from the service root) offers a Server-Sent Events stream at its
// ServerSentEventUri: every step of every power change (a reset, the control endpoint's, a transition's
// end, a host acting on its own) reaches the open streams of the system's account as a Redfish Event
// record (ResourceEvent.1.3.0.ResourcePoweredOff and the like, its OriginOfCondition the system), with a
// keep-alive comment when there has been nothing to say for a while (WithEventKeepAlive). A stream is a
// goroutine blocked on a channel, so a thousand are cheap; a power change never waits for a reader, and a
// reader 64 events behind has its stream dropped (SlowEventStreams). Tests drop every open stream
// (DropEventStreams), or disable or remove the service (SetEventService), to send clients back to polling.
//
// Production code never imports this package.
package redfishmock
