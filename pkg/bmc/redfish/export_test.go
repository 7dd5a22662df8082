package redfish

import (
	"k8s.io/utils/clock"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// The event stream's bounds, for tests.
const (
	MaxEventBytes     = maxEventBytes
	StreamIdleTimeout = streamIdleTimeout
)

// SetClock makes d time its event streams' silence on c.
func SetClock(d bmc.Driver, c clock.WithDelayedExecution) { d.(*driver).clock = c }

// The stream's parsing, for tests.
var (
	ReadEvents  = readEvents
	AboutSystem = aboutSystem
)
