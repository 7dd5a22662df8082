package engine

import (
	"fmt"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// SkipDryRun is the skipReason of a target that a check in dry run (spec.dryRun) would remediate: it
// passed every gate, and nothing was started.
const SkipDryRun = v1alpha1.SkipDryRun

// EventWouldRemediate (Normal) says what a check in dry run would have done for a target, once per target
// and step.
const EventWouldRemediate = "WouldRemediate"

// WouldCreate is the skipMessage of a target a check in dry run would create request ref for, from
// template, as step (0-based) of steps.
func WouldCreate(ref Ref, template string, step, steps int) string {
	msg := fmt.Sprintf("Dry run: would create %s from template %s", ref, template)
	if steps > 1 {
		msg += fmt.Sprintf(" (escalation step %d of %d)", step+1, steps)
	}
	return msg
}

// WouldHandToOwner is the skipMessage of a Machine a MachineHealthCheck in dry run would hand to its owner.
const WouldHandToOwner = "Dry run: would mark the Machine for its owner to replace (OwnerRemediated=False)"
