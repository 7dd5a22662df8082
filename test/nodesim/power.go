package nodesim

import (
	"fmt"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// PowerSource tells the simulator whether hosts have power: the BMC simulator the remediator talks to.
type PowerSource interface {
	// PoweredOn reports whether a node's host has power now. A host the source does not know is on.
	PoweredOn(node string) (bool, error)
	// Subscribe registers fn to hear every change of any host's power from now on (on: the host has power).
	// fn is quick and never blocks; it may be called from any goroutine.
	Subscribe(fn func(node string, on bool))
}

// AlwaysOn is the PowerSource of hosts nobody switches off (SetPower still can).
type AlwaysOn struct{}

// PoweredOn reports true.
func (AlwaysOn) PoweredOn(string) (bool, error) { return true, nil }

// Subscribe does nothing: nothing changes.
func (AlwaysOn) Subscribe(func(string, bool)) {}

// RedfishPower ties nodes to the systems of a Redfish mock: a node's host has power while its system's
// PowerState is On. PoweringOff already counts as off (the host is shutting down) and PoweringOn as still
// off (the boot delay starts when the power is on).
type RedfishPower struct {
	mock         *redfishmock.Mock
	nodeOfSystem map[string]string
	systemOfNode map[string]string
}

// NewRedfishPower ties each system ID in nodeOfSystem to the node named there. Every system and node
// appears once.
func NewRedfishPower(m *redfishmock.Mock, nodeOfSystem map[string]string) (*RedfishPower, error) {
	p := &RedfishPower{mock: m, nodeOfSystem: map[string]string{}, systemOfNode: map[string]string{}}
	for system, node := range nodeOfSystem {
		if other, ok := p.systemOfNode[node]; ok {
			return nil, fmt.Errorf("node %q is tied to systems %q and %q", node, other, system)
		}
		p.nodeOfSystem[system], p.systemOfNode[node] = node, system
	}
	return p, nil
}

// RedfishPowerByID ties every system of the mock to a node named by name(systemID), e.g.
// func(id string) string { return "worker-" + id }.
func RedfishPowerByID(m *redfishmock.Mock, name func(systemID string) string) (*RedfishPower, error) {
	nodes := map[string]string{}
	for _, id := range m.SystemIDs() {
		nodes[id] = name(id)
	}
	return NewRedfishPower(m, nodes)
}

// System returns the ID of a node's system.
func (p *RedfishPower) System(node string) (string, bool) {
	id, ok := p.systemOfNode[node]
	return id, ok
}

// Node returns the node of a system.
func (p *RedfishPower) Node(systemID string) (string, bool) {
	n, ok := p.nodeOfSystem[systemID]
	return n, ok
}

// PoweredOn reports whether the node's system is On.
func (p *RedfishPower) PoweredOn(node string) (bool, error) {
	id, ok := p.systemOfNode[node]
	if !ok {
		return true, nil
	}
	state, err := p.mock.PowerState(id)
	if err != nil {
		return false, fmt.Errorf("power state of node %q: %w", node, err)
	}
	return state == redfishmock.PowerOn, nil
}

// Subscribe hears the mock's power changes of the tied systems.
func (p *RedfishPower) Subscribe(fn func(node string, on bool)) {
	p.mock.OnPowerChange(func(id string, _, to redfishmock.PowerState) {
		if node, ok := p.nodeOfSystem[id]; ok {
			fn(node, to == redfishmock.PowerOn)
		}
	})
}
