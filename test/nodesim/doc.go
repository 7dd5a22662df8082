// Package nodesim simulates the kubelets of thousands of nodes in one process, so the node lifecycle
// controller, health checkers and remediators see Nodes that live and die like real ones.
//
// A simulated kubelet does what a real one does towards the API server, and nothing else: it registers its
// Node (labels, capacity, addresses, a Ready=True status with a boot ID), renews the node's Lease in
// kube-node-lease every LeaseInterval (10s, the kubelet's default), posts its status every StatusInterval
// (5 minutes, the kubelet's nodeStatusReportFrequency) or at once when the Node it reads back is not
// Ready while it is alive, marks pods bound to its node Running, and finishes the deletion of its pods.
// The heartbeats of every node share one scheduler (a heap of due times) and a few workers: no goroutine
// per node. Timers run on an injected clock.
//
// Each node lives on a host whose power comes from a PowerSource, e.g. the Redfish mock (RedfishPower):
//
//	power off        → the kubelet stops at once: no lease renewals, no status; the real node lifecycle
//	                   controller marks the node Ready=Unknown after its grace period
//	power on         → after BootDelay the kubelet starts: it posts Ready=True (new boot ID) and renews
//	FaultTransient   → the kubelet hangs while the host stays on; a power cycle cures it
//	FaultPersistent  → the host never comes back, however often it is power-cycled, until ClearFault
//
// With Options.KubeletPorts each kubelet also listens on a real TCP port of 127.0.0.1, published in its
// Node's status (InternalIP and daemonEndpoints.kubeletEndpoint.Port) and closed while the host has no
// power, for whoever probes a kubelet to tell a live host from a dead one. Off by default.
//
// Pods on a node whose kubelet is down are left alone, as on a dead host: only PodGC (after the
// out-of-service taint) or the kubelet's return removes them.
//
//	cs, _ := nodesim.NewClient(cfg, "nodesim")
//	power, _ := nodesim.RedfishPowerByID(mock, func(id string) string { return "worker-" + id })
//	sim := nodesim.New(cs, nodesim.Options{Power: power, LeaseInterval: 2 * time.Second, BootDelay: 3 * time.Second})
//	_ = sim.Start(ctx)                                            // runs until ctx is done
//	_ = sim.AddNodes(ctx, nodesim.Nodes("worker", 3, nil)...)      // worker-1..3, Ready
//	_ = mock.SetPowerState("2", redfishmock.PowerOff)              // worker-2 goes silent
//
// The simulator's decisions live in fleet, a plain data structure with no clock and no I/O; Simulator puts
// it behind a mutex and does the API calls.
package nodesim
