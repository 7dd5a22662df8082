package powerwatch

// Event reasons of the power watch, emitted on the BMCs on a change, never for every reading.
const (
	// EventHostPoweredOff (Normal): the BMC reported the host off, a second reading agreed, and the Node
	// condition PoweredOff was set True.
	EventHostPoweredOff = "HostPoweredOff"
	// EventHostPoweredOn (Normal): the BMC reports the host on again and its kubelet reported Ready since;
	// PoweredOff was set False.
	EventHostPoweredOn = "HostPoweredOn"
	// EventPowerReadingContradicted (Warning): the BMC reported the host off but its kubelet answers: the
	// host runs, so nothing was fenced. Once per contradiction: again only after the BMC read On, or the
	// kubelet stopped answering, in between.
	EventPowerReadingContradicted = "PowerReadingContradicted"
	// EventPowerReadingUnverifiable (Warning): the BMC reported the host off, but its Node publishes no
	// kubelet endpoint (InternalIP and kubelet port) to check that against: nothing was fenced. Once per
	// episode, as for a contradiction.
	EventPowerReadingUnverifiable = "PowerReadingUnverifiable"
)

// ActionWatchPower is the events' action: the power watch of a host.
const ActionWatchPower = "WatchPower"
