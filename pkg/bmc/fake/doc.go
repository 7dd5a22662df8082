// Package fake provides a recording, in-memory bmc.Driver for tests of code that power-cycles hosts.
//
// A Driver simulates one host behind its BMC: a power state that PowerOn and PowerOff change (at once,
// or after a number of PowerState reads to simulate a slow host), a host that may ignore a graceful
// shutdown (IgnoreGracefulShutdown) and may power off or reboot on its own after a diagnostic interrupt
// (AfterDiagnose), an event stream of its power changes (WatchPower: a test pushes events, drops the
// streams, or makes the BMC offer none), errors queued per operation, and a record of every call. A Factory plugs into a bmc.Registry and hands out one Driver per address, so a
// test can reach the host a controller talks to:
//
//	hosts := fake.NewFactory(bmc.PowerStateOn)
//	_ = registry.Register(bmc.DriverRedfish, hosts.New)
//	...
//	hosts.Driver("redfish://10.0.0.1/redfish/v1/Systems/1").FailNext(bmc.OperationPowerOff, bmc.ErrTimeout)
//
// Everything here is safe for concurrent use.
package fake
