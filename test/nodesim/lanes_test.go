package nodesim_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"

	"github.com/metalheal/metalheal/test/nodesim"
)

// leaseGate holds the lease requests of one node while it is closed: an API server slow to answer that
// node's heartbeats.
type leaseGate struct {
	node string
	held chan struct{} // gets a value when a request is held

	mu     sync.Mutex
	closed chan struct{} // nil while open
}

func (g *leaseGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

func (g *leaseGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

func (g *leaseGate) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed != nil
}

func (g *leaseGate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if strings.HasSuffix(req.URL.Path, "/leases/"+g.node) {
			g.mu.Lock()
			closed := g.closed
			g.mu.Unlock()
			if closed != nil {
				select {
				case g.held <- struct{}{}:
				default:
				}
				select {
				case <-closed:
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
			}
		}
		return rt.RoundTrip(req)
	})
}

// A host that boots registers while every heartbeat worker waits on the API server: its kubelet is its
// own process, and does not queue behind other kubelets' lease renewals.
func TestBootDoesNotWaitForHeartbeats(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := sharedWorld(t)
	ctx := t.Context()

	gate := &leaseGate{node: "lanes-1", held: make(chan struct{}, 1)}
	t.Cleanup(gate.open)
	cfg := rest.CopyConfig(w.RESTConfig())
	cfg.WrapTransport = gate.wrap
	cs, err := nodesim.NewClient(cfg, "lanes")
	g.Expect(err).NotTo(HaveOccurred())

	booted := make(chan string, 8)
	sim := nodesim.New(cs, nodesim.Options{
		Name: "lanes", Workers: 1, LeaseInterval: leaseInterval, BootDelay: -1,
		OnBoot: func(node string, _ time.Time) { booted <- node },
	})
	g.Expect(sim.Start(ctx)).To(Succeed())
	t.Cleanup(func() { _ = sim.RemoveAll(context.WithoutCancel(ctx)) })
	g.Expect(sim.AddNodes(ctx, nodesim.Nodes("lanes", 2, nil)...)).To(Succeed())
	var up []string // OnBoot may be heard just after AddNodes returns
	g.Eventually(func() []string { up = append(up, drain(booted)...); return up }).Should(ConsistOf("lanes-1", "lanes-2"))

	// The one heartbeat worker is held by lanes-1's next renewal.
	gate.close()
	g.Eventually(gate.held).WithTimeout(3 * leaseInterval).Should(Receive())

	// lanes-2's host is power-cycled; it boots at once and registers, the heartbeat worker still held.
	g.Expect(sim.SetPower("lanes-2", false)).To(Succeed())
	g.Expect(sim.SetPower("lanes-2", true)).To(Succeed())
	g.Eventually(booted).WithTimeout(10 * time.Second).Should(Receive(Equal("lanes-2")))
	g.Expect(gate.isClosed()).To(BeTrue(), "the heartbeat worker is still held")
}

// drain returns what ch holds now.
func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case s := <-ch:
			out = append(out, s)
		default:
			return out
		}
	}
}
