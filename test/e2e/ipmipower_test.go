//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"

	"github.com/metalheal/metalheal/test/ipmisim"
	"github.com/metalheal/metalheal/test/nodesim"
)

// ipmiPollInterval is how often an ipmiPower looks at its simulator's host.
const ipmiPollInterval = 100 * time.Millisecond

// ipmiPower is the nodesim.PowerSource of one node whose host sits behind a real IPMI BMC (ipmi_sim): the
// host has power while the simulator's host process runs (ipmi_sim starts it on power-on and kills it on
// power-off). ipmi_sim has no hook to hear that from, so ipmiPower polls the process and reports each
// change to its subscribers and to the timeline ("power/<node>").
type ipmiPower struct {
	node string
	sim  *ipmisim.Sim

	mu   sync.Mutex
	on   bool
	subs []func(node string, on bool)
}

var _ nodesim.PowerSource = (*ipmiPower)(nil)

func newIPMIPower(node string, sim *ipmisim.Sim) *ipmiPower {
	return &ipmiPower{node: node, sim: sim, on: sim.HostPoweredOn()}
}

// PoweredOn reports whether the host runs; any other node is on, as PowerSource wants.
func (p *ipmiPower) PoweredOn(node string) (bool, error) {
	if node != p.node {
		return true, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.on, nil
}

// Subscribe registers fn to hear the host's power changes.
func (p *ipmiPower) Subscribe(fn func(node string, on bool)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subs = append(p.subs, fn)
}

// run polls the host until ctx is done.
func (p *ipmiPower) run(ctx context.Context) {
	tick := time.NewTicker(ipmiPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		on := p.sim.HostPoweredOn()
		p.mu.Lock()
		changed := on != p.on
		p.on = on
		subs := p.subs
		p.mu.Unlock()
		if !changed {
			continue
		}
		state := "Off"
		if on {
			state = "On"
		}
		tl.record("power/"+p.node, state)
		for _, fn := range subs {
			fn(p.node, on)
		}
	}
}

// ginkgoTB lets helpers written for a *testing.T (test/ipmisim) run inside a Ginkgo spec: a failure fails
// the spec, cleanups run when it ends, temporary directories are the spec's. The embedded testing.TB is
// never called; it only gives the type testing.TB's unexported method. Only what ipmisim uses is here.
type ginkgoTB struct {
	testing.TB
}

func (ginkgoTB) Helper()                           {}
func (ginkgoTB) Fatalf(format string, args ...any) { Fail(fmt.Sprintf(format, args...)) }
func (ginkgoTB) TempDir() string                   { return GinkgoT().TempDir() }
func (ginkgoTB) Cleanup(fn func())                 { DeferCleanup(fn) }
func (ginkgoTB) Logf(format string, args ...any)   { fmt.Fprintf(GinkgoWriter, format+"\n", args...) }
