package nodesim_test

import (
	"testing"

	. "github.com/onsi/gomega"

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
