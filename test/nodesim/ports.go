package nodesim

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

// KubeletAddress is the InternalIP of the simulated Nodes when Options.KubeletPorts is on: their kubelet
// ports listen there.
const KubeletAddress = "127.0.0.1"

// kubeletPorts are the simulated kubelets' TCP ports (Options.KubeletPorts): one port of KubeletAddress
// per node, kept for the node's life, listening while its host has power. What a prober of the kubelet
// sees: a connection accepted (and closed) while the host is on, refused while it is off. Nothing is
// served on it.
type kubeletPorts struct {
	mu    sync.Mutex
	ports map[string]*kubeletPort
}

type kubeletPort struct {
	port int32
	ln   net.Listener // nil while closed
}

// add gives node a port, listening if on. A node that has one keeps it.
func (k *kubeletPorts) add(node string, on bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ports == nil {
		k.ports = map[string]*kubeletPort{}
	}
	if _, ok := k.ports[node]; ok {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(KubeletAddress, "0"))
	if err != nil {
		return fmt.Errorf("kubelet port of node %q: %w", node, err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	n, _ := strconv.Atoi(port)
	p := &kubeletPort{port: int32(n)}
	k.ports[node] = p
	if on {
		p.serve(ln)
	} else {
		_ = ln.Close()
	}
	return nil
}

// port is node's kubelet port, 0 when it has none.
func (k *kubeletPorts) port(node string) int32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.ports[node]; p != nil {
		return p.port
	}
	return 0
}

// setPower opens node's port (on) or closes it (off). The port is the same after a power cycle.
func (k *kubeletPorts) setPower(node string, on bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.ports[node]
	switch {
	case p == nil:
		return nil
	case !on:
		p.close()
		return nil
	case p.ln != nil:
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(KubeletAddress, strconv.Itoa(int(p.port))))
	if err != nil {
		return fmt.Errorf("reopening the kubelet port %d of node %q: %w", p.port, node, err)
	}
	p.serve(ln)
	return nil
}

// remove closes node's port and forgets it.
func (k *kubeletPorts) remove(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.ports[node]; p != nil {
		p.close()
		delete(k.ports, node)
	}
}

// closeAll closes every port (the simulator stopped).
func (k *kubeletPorts) closeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.ports {
		p.close()
	}
}

// serve accepts connections on ln, closing each at once, until ln is closed.
func (p *kubeletPort) serve(ln net.Listener) {
	p.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed (the kernel still completes connections on a listener nobody accepts from)
			}
			_ = c.Close()
		}
	}()
}

func (p *kubeletPort) close() {
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
}
