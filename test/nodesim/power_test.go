package nodesim_test

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

type powerEvent struct {
	node string
	on   bool
}

func TestRedfishPower(t *testing.T) {
	g := NewWithT(t)
	m, err := redfishmock.New().WithSystems(3).Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Close)
	// System 3 is nobody's node.
	p, err := nodesim.NewRedfishPower(m, map[string]string{"1": "worker-1", "2": "worker-2"})
	g.Expect(err).NotTo(HaveOccurred())
	var events []powerEvent
	p.Subscribe(func(node string, on bool) { events = append(events, powerEvent{node, on}) })

	// The mock has no power delay: hooks run in SetPowerState, before it returns.
	g.Expect(m.SetPowerState("2", redfishmock.PowerOff)).To(Succeed())
	g.Expect(m.SetPowerState("3", redfishmock.PowerOff)).To(Succeed())
	g.Expect(m.SetPowerState("2", redfishmock.PowerOn)).To(Succeed())
	g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
	g.Expect(events).To(Equal([]powerEvent{{"worker-2", false}, {"worker-2", true}, {"worker-1", false}}))

	for node, want := range map[string]bool{"worker-1": false, "worker-2": true, "not-tied": true} {
		on, err := p.PoweredOn(node)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(on).To(Equal(want), node)
	}
	id, ok := p.System("worker-2")
	g.Expect(ok).To(BeTrue())
	g.Expect(id).To(Equal("2"))
	node, ok := p.Node("1")
	g.Expect(ok).To(BeTrue())
	g.Expect(node).To(Equal("worker-1"))
}

func TestRedfishPowerRefusesANodeTiedTwice(t *testing.T) {
	g := NewWithT(t)
	m, err := redfishmock.New().WithSystems(2).Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Close)
	_, err = nodesim.NewRedfishPower(m, map[string]string{"1": "worker", "2": "worker"})
	g.Expect(err).To(HaveOccurred())
}

func TestRedfishPowerByID(t *testing.T) {
	g := NewWithT(t)
	m, err := redfishmock.New().WithSystems(12).Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Close)
	p, err := nodesim.RedfishPowerByID(m, func(id string) string { return "worker-" + id })
	g.Expect(err).NotTo(HaveOccurred())
	// Nodes names the nodes as the mock numbers its systems.
	for _, spec := range nodesim.Nodes("worker", 12, nil) {
		_, ok := p.System(spec.Name)
		g.Expect(ok).To(BeTrue(), spec.Name)
	}
}

// With KubeletPorts, each kubelet's port is published in its Node's status and answers while the host
// has power: refused from the power-off, open again (the same port) from the power-on.
func TestKubeletPortsFollowThePower(t *testing.T) {
	g := NewWithT(t)
	w := sharedWorld(t)
	ctx := t.Context()
	cs, err := nodesim.NewClient(w.RESTConfig(), "ports")
	g.Expect(err).NotTo(HaveOccurred())
	m, err := redfishmock.New().WithSystems(2).Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Close)
	power, err := nodesim.RedfishPowerByID(m, func(id string) string { return "ports-" + id })
	g.Expect(err).NotTo(HaveOccurred())
	sim := nodesim.New(cs, nodesim.Options{Name: "ports", Power: power, KubeletPorts: true, BootDelay: -1})
	g.Expect(sim.Start(ctx)).To(Succeed())
	t.Cleanup(func() { _ = sim.RemoveAll(context.WithoutCancel(ctx)) })
	g.Expect(sim.AddNodes(ctx, nodesim.Nodes("ports", 2, nil)...)).To(Succeed())

	endpoint := func(name string) string {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: nodesim.KubeletAddress}))
		port := n.Status.DaemonEndpoints.KubeletEndpoint.Port
		g.Expect(port).To(BeNumerically(">", 0))
		return net.JoinHostPort(nodesim.KubeletAddress, strconv.Itoa(int(port)))
	}
	answers := func(endpoint string) error {
		c, err := net.DialTimeout("tcp", endpoint, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	one, two := endpoint("ports-1"), endpoint("ports-2")
	g.Expect(one).NotTo(Equal(two), "a port per node")
	g.Expect(answers(one)).To(Succeed())

	g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed()) // no power delay: the hooks ran
	g.Expect(answers(one)).To(MatchError(syscall.ECONNREFUSED))
	g.Expect(answers(two)).To(Succeed(), "the other host still runs")

	g.Expect(m.SetPowerState("1", redfishmock.PowerOn)).To(Succeed())
	g.Expect(answers(one)).To(Succeed())
	g.Eventually(func() string { return endpoint("ports-1") }).Should(Equal(one), "the same port after the power cycle")
}

// A heartbeat's status post sends its conditions alone: what registration published (the kubelet's port,
// the node's info) stays. A whole NodeStatus in the patch set the port back to 0 at the first post.
func TestStatusPostKeepsWhatRegistrationSet(t *testing.T) {
	g := NewWithT(t)
	w := sharedWorld(t)
	ctx := t.Context()
	cs, err := nodesim.NewClient(w.RESTConfig(), "status-post")
	g.Expect(err).NotTo(HaveOccurred())
	m, err := redfishmock.New().WithSystems(1).Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Close)
	power, err := nodesim.RedfishPowerByID(m, func(id string) string { return "status-post-" + id })
	g.Expect(err).NotTo(HaveOccurred())
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	sim := nodesim.New(cs, nodesim.Options{Name: "status-post", Power: power, KubeletPorts: true, BootDelay: -1,
		Clock: clk, StatusInterval: time.Minute})
	g.Expect(sim.Start(ctx)).To(Succeed())
	t.Cleanup(func() { _ = sim.RemoveAll(context.WithoutCancel(ctx)) })
	g.Expect(sim.AddNodes(ctx, nodesim.Nodes("status-post", 1, nil)...)).To(Succeed())

	get := func() *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(ctx, "status-post-1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return n
	}
	heartbeat := func(n *corev1.Node) time.Time {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.LastHeartbeatTime.Time
			}
		}
		return time.Time{}
	}
	before := get()
	g.Expect(before.Status.DaemonEndpoints.KubeletEndpoint.Port).To(BeNumerically(">", 0))
	g.Expect(before.Status.NodeInfo.KubeletVersion).NotTo(BeEmpty())
	g.Eventually(func() bool {
		clk.Step(time.Minute)
		return heartbeat(get()).After(heartbeat(before))
	}).Should(BeTrue(), "a status post")
	after := get()
	g.Expect(after.Status.DaemonEndpoints).To(Equal(before.Status.DaemonEndpoints))
	g.Expect(after.Status.NodeInfo).To(Equal(before.Status.NodeInfo))
	g.Expect(after.Status.Addresses).To(Equal(before.Status.Addresses))
}
