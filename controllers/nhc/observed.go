package nhc

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/conditions"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
)

// observed is everything decide needs to know about one NodeHealthCheck, read from the informer cache by
// observe. It holds no client: decide is a pure function of it and now.
type observed struct {
	// Check is the NodeHealthCheck; its status is the controller's memory.
	Check *v1alpha1.NodeHealthCheck
	// Nodes are the Nodes the selector matches. They are shared with the cache: read, never write.
	Nodes []*corev1.Node
	// Tracked are Nodes the check still remediates (status entries, remediation requests) that the
	// selector no longer matches; a nil value means the Node is gone.
	Tracked map[string]*corev1.Node
	// Steps are the remediation steps in order: one for remediationTemplate, one per escalation step.
	Steps []engine.Step
	// Disabled is set when a template is missing or malformed: no new remediation can start.
	Disabled *cause
	// Ours are the remediation requests this check created (owner reference to its UID), by Node name.
	Ours map[string][]remediationObject
	// Unread are the Nodes whose status records requests of a kind that cannot be read now (its watch
	// failed: the check is disabled). Those requests may still act on the Nodes: the check keeps the Nodes'
	// entries and leases as they are until it can read them again.
	Unread map[string]bool
	// Foreign are remediation requests of the steps' kinds and namespaces that this check did not create,
	// keyed by reference, valued by who owns them ("NodeHealthCheck other", or "").
	Foreign map[emrRef]string
	// Leases are the node leases in the lease namespace, by Node name.
	Leases map[string]leaseInfo
	// Peers are the other NodeHealthChecks (not being deleted, not disabled), for the overlapping rule.
	Peers []peer
	// BusyControlPlane are control-plane Nodes that other checks are remediating now, or whose lease
	// someone else holds.
	BusyControlPlane []string
	// Holder is the lease holder identity of this check, "NodeHealthCheck.remediation.metalheal.io-<name>".
	Holder string
	// LeaseDuration is how long a node lease is taken for; it is renewed at half-time.
	LeaseDuration time.Duration
}

// cause is why a whole check cannot remediate, with a condition reason and a message for humans.
type cause = engine.Cause

// emrRef identifies a remediation request.
type emrRef = engine.Ref

// remediationObject is a remediation request as the cache shows it (what the engine decides from).
type remediationObject = engine.Request

// leaseInfo is who holds a node lease and until when (the rules on it are internal/gates').
type leaseInfo = gates.Lease

// peer is another NodeHealthCheck as the overlapping rule sees it.
type peer struct {
	Name     string
	Created  time.Time
	Selector labels.Selector
	Criteria []conditions.Criterion
	// InFlight are the Nodes it is remediating.
	InFlight map[string]bool
}
