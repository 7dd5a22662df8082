// Package harness assembles the whole local story for the demo, the end-to-end suite and the benchmarks:
// a real control plane (test/world), a Redfish BMC simulator serving one system per node
// (test/redfish-mock), simulated kubelets tied to those systems' power (test/nodesim), one BMC object and
// credentials Secret per node, metalheal's deployable RBAC (config/default) bound to a dedicated user, and
// any number of manager processes — the real binary, run as production runs it, under that user.
//
//	h, err := harness.Start(ctx, harness.Options{Workers: 5})
//	defer h.Stop()
//	m, err := h.StartManager(ctx)          // the real manager binary, as its own process
//	h.Mock.SetPowerState("2", redfishmock.PowerOff)
//	m.Kill()                               // SIGKILL, mid-remediation if you like
package harness
