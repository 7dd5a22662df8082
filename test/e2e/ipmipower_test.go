//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
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

// startIPMIHost adds a node of group whose host is behind a real IPMI BMC (ipmi_sim, started with opts),
// registered by its simulated kubelet, with its BMC object and credentials Secret; all go when the spec
// ends. The node's power is the simulated host's (see ipmiPower).
func startIPMIHost(ctx context.Context, node, group string, opts ...ipmisim.Option) *ipmisim.Sim {
	GinkgoHelper()
	sim := ipmisim.Start(ginkgoTB{}, opts...)
	power := newIPMIPower(node, sim)
	Expect(power.PoweredOn(node)).To(BeTrue())
	power.Subscribe(func(node string, on bool) { _ = h.Sim.SetPower(node, on) })
	ipmiHosts.Store(node, power)
	DeferCleanup(func() { ipmiHosts.Delete(node) })
	pollCtx, stopPolling := context.WithCancel(context.Background())
	go power.run(pollCtx)
	DeferCleanup(stopPolling)
	Expect(h.Sim.AddNodes(ctx, nodesim.NodeSpec{Name: node, Labels: map[string]string{
		"node-role.kubernetes.io/worker": "", groupLabel: group}})).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(h.Sim.Remove(ctx, node)).To(Succeed()) })
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: harness.Namespace, Name: node + "-ipmi-credentials"},
		StringData: map[string]string{"username": ipmisim.Username, "password": ipmisim.Password},
	}
	Expect(k8s.Create(ctx, secret)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, secret)).To(Succeed()) })
	bmc := &v1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Namespace: harness.Namespace, Name: node},
		Spec: v1alpha1.BMCSpec{
			NodeName:             node,
			Address:              sim.Address,
			CredentialsSecretRef: v1alpha1.SecretReference{Name: secret.Name},
		},
	}
	Expect(k8s.Create(ctx, bmc)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, bmc)).To(Succeed()) })
	return sim
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
