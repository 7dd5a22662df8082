// Package powerwatch learns of a host's power loss from its BMC, not from its kubelet's silence, so that a
// health check can fence the host at once instead of after the node lifecycle controller's grace period
// and the check's duration.
//
// For every BMC of the manager's namespace with spec.powerWatch, one goroutine follows the host's power:
// through the BMC's event stream when it offers one (bmc.WatchPower: Redfish Server-Sent Events), and by
// reading the power state every pollIntervalSeconds while no stream is open (IPMI, Ironic, a Redfish BMC
// without a stream, a dropped stream that is being opened again, with backoff). Each event or poll reads
// PowerState; what an event says is never trusted.
//
// What a reading means is decided in one place (decide.go):
//
//   - On: the Node condition PoweredOff, if True, turns False (BMCReportedOn) once the kubelet has
//     reported Ready since it turned True (the host is back, not booting); the watch polls till then.
//   - Off while a metalheal remediation is at work on the host (its own power-off): nothing.
//   - Off otherwise: the BMC is read again (its confirmed reading), then the host's kubelet is probed (a
//     TCP connect to the Node's InternalIP and kubelet port, bounded): a second, independent reading. A
//     kubelet that answers contradicts the BMC: one PowerReadingContradicted warning on the BMC, nothing
//     else. One that does not answer agrees: PoweredOff=True (BMCReportedOff), written as a strategic merge
//     patch of that condition alone in the Node's status, as node-problem-detector writes its own.
//
// A NodeHealthCheck or MachineHealthCheck that lists {type: PoweredOff, status: "True", duration: 0s}
// then asks for a remediation at once, under the same lease, storm and budget rules as any other; the
// remediator finds the host off on its first reading and puts the out-of-service taint on.
//
// Watcher is both the controller that follows BMC objects (Reconcile: a watch is started, restarted on a
// new generation, stopped when the BMC or its powerWatch goes) and the runnable that owns the goroutines
// (Start): when the manager stops, or loses its leadership, every watch ends with it.
package powerwatch
