package bmcinventory

// Event reasons of the BMC inventory, emitted on the BMCs when their state changes, never on a check that
// finds what the last one found.
const (
	// EventBMCUnreachable (Warning): a BMC stopped answering, or timed out.
	EventBMCUnreachable = "BMCUnreachable"
	// EventBMCCredentialsInvalid (Warning): a BMC refused its credentials, or its Secret is missing or
	// incomplete.
	EventBMCCredentialsInvalid = "BMCCredentialsInvalid"
	// EventBMCMisconfigured (Warning): a BMC's address is invalid, or no driver here can use it.
	EventBMCMisconfigured = "BMCMisconfigured"
	// EventBMCRecovered (Normal): a BMC that had a problem answered and accepted its credentials again.
	EventBMCRecovered = "BMCRecovered"
)

// Event actions (the events.k8s.io "action" field): what the controller was doing.
const (
	// ActionCheckBMC is the BMC inventory's periodic reachability and credentials check.
	ActionCheckBMC = "CheckBMC"
)
