package main

import (
	"github.com/metalheal/metalheal/internal/bmcdrivers"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// newBMCRegistry returns the registry of every BMC driver the manager supports (internal/bmcdrivers,
// shared with `kubectl metalheal bmc check`). Drivers it builds are counted in metrics (nil counts
// nothing).
func newBMCRegistry(metrics *bmc.Metrics) *bmc.Registry { return bmcdrivers.NewRegistry(metrics) }
