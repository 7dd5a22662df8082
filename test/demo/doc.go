// Command demo tells metalheal's story on one machine, from nothing: it starts a real control plane
// (etcd, kube-apiserver, kube-controller-manager from ./bin), a Redfish BMC simulator with a handful of
// hosts, simulated kubelets tied to those hosts' power, and the real manager binary as its own process
// under its deployed RBAC (all of it test/harness). It applies a NodeHealthCheck and a
// PowerCycleRemediationTemplate like config/samples but with short timeouts, hangs one node's kubelet (a
// fault a power cycle cures), and prints what happens, as it happens, with times relative to the break:
//
//	+0.0s   failure injected     the kubelet of worker-2 hangs; its host stays powered on
//	+8.4s   node NotReady        Ready=Unknown (NodeStatusUnknown): Kubelet stopped posting node status.
//	+13.4s  EMR created          PowerCycleRemediation metalheal-system/worker-2, by NodeHealthCheck demo
//	...
//	+22.9s  lease released       medik8s-leases/node-worker-2 deleted
//
// then a summary (time to detect, to fence, to recover, total). Every line comes from watching the API
// (Node conditions and taints, the remediation's status, the node lease) or from the BMC simulator's
// power hook — never from the manager's logs. It exits 0 once the node is back and everything is clean,
// and non-zero with the reason and the manager's log otherwise.
//
//	go run ./test/demo                 # make demo
//	go run ./test/demo --keep          # make demo ARGS=--keep: leave it running, print a kubeconfig
//	go run ./test/demo --workers 6
//	go run ./test/demo --story=power-cut   # a host's power is cut: fenced on its BMC's word, Node still Ready
//
// The story's bookkeeping (which step happened when, the summary) is story.go, free of I/O; run in
// demo.go drives the world and is what demo_test.go runs end to end.
package main
