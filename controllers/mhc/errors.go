package mhc

import (
	"fmt"
	"strings"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
)

// InvalidSpecError reports a MachineHealthCheck spec the controller cannot act on, which the API server let
// through: the check is disabled (its reason, InvalidSpecError.reason) until the spec changes.
type InvalidSpecError struct {
	// Field is the offending field's JSON path.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *InvalidSpecError) Error() string {
	return fmt.Sprintf("invalid MachineHealthCheck spec: %s: %s", e.Field, e.Reason)
}

// reason is the Disabled condition's reason for the error, the NodeHealthCheck's for the same fields.
func (e *InvalidSpecError) reason() string {
	switch {
	case e.Field == "selector":
		return v1alpha1.ReasonInvalidSelector
	case strings.HasPrefix(e.Field, "remediationTemplate"):
		return v1alpha1.ReasonTemplateInvalid
	default:
		return v1alpha1.ReasonInvalidBudget
	}
}
