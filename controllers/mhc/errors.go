package mhc

import (
	"fmt"
)

// InvalidSpecError reports a MachineHealthCheck spec the controller cannot act on. Retrying does not help
// until the spec changes.
type InvalidSpecError struct {
	// Field is the offending field's JSON path.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *InvalidSpecError) Error() string {
	return fmt.Sprintf("invalid MachineHealthCheck spec: %s: %s", e.Field, e.Reason)
}
