package mhc

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/metalheal/metalheal/internal/conditions"
	"github.com/metalheal/metalheal/internal/engine"
)

// healthState is what the check concludes about one target.
type healthState int

const (
	// stateHealthy: no criterion has expired.
	stateHealthy healthState = iota
	// statePending: not judged yet, e.g. the Machine is still waiting for its Node within
	// nodeStartupTimeout. A pending Machine is neither healthy nor unhealthy.
	statePending
	// stateUnhealthy: a criterion has expired; the Machine needs remediation.
	stateUnhealthy
)

func (s healthState) String() string {
	switch s {
	case stateHealthy:
		return "Healthy"
	case statePending:
		return "Pending"
	default:
		return "Unhealthy"
	}
}

// maxFailureMessage bounds how much of a Machine's failure message is copied into conditions and events.
const maxFailureMessage = 256

// verdict is the outcome of checkTarget.
type verdict struct {
	State healthState
	// Reason is Cluster API's HealthCheckSucceeded reason when unhealthy: UnhealthyNode,
	// NodeStartupTimeout, NodeDeleted, UnhealthyMachine or HasRemediateAnnotation.
	Reason string
	// Message explains the verdict for the Machine's HealthCheckSucceeded condition.
	Message string
	// ExpiredAt is the instant the criterion that made the target unhealthy expired; zero when the
	// criterion has no such instant (an annotation, a terminal failure, a deleted Node).
	ExpiredAt time.Time
	// NextCheck is the earliest instant at which the verdict can change by the passage of time alone
	// (a condition or the node startup timeout expiring); zero if none.
	NextCheck time.Time
}

// checkSpec is what a MachineHealthCheck says about health.
type checkSpec struct {
	Criteria []conditions.Criterion
	// MachineCriteria are matched against the Machine's own conditions (unhealthyMachineConditions).
	MachineCriteria []conditions.Criterion
	// NodeStartupTimeout is how long a Machine may wait for its Node; 0 disables the check.
	NodeStartupTimeout time.Duration
}

// targetInput is what checkTarget looks at for one Machine.
type targetInput struct {
	Machine *clusterv1.Machine
	// Node is the Machine's Node; nil when the Machine has no nodeRef or the Node was not found.
	Node *corev1.Node
	// NodeMissing is true when the Machine has a nodeRef but its Node does not exist.
	NodeMissing bool
	// Cluster is the Machine's Cluster; nil when the check has no clusterName or the Cluster is absent.
	Cluster *clusterv1.Cluster
}

// checkTarget decides whether one Machine is healthy at now, and when to look again. Criteria, in order
// (the first that applies wins):
//
//   - the cluster.x-k8s.io/remediate-machine annotation: unhealthy at once;
//   - a terminal failure (status.deprecated.v1beta1.failureReason or failureMessage): unhealthy at once;
//   - a Machine condition matching an unhealthyMachineConditions entry for its timeout: unhealthy, whatever
//     the Node's state (Cluster API v1.14's rule); one that may still expire is looked at again then;
//   - a Cluster whose infrastructure is not ready, or whose control plane is not initialized (for a
//     worker Machine), does not penalise its Machines: pending;
//   - a nodeRef to a Node that no longer exists: unhealthy at once;
//   - no Node yet: unhealthy once nodeStartupTimeout has passed since the Machine (or its
//     infrastructure, or its Cluster) became ready to get one; pending until then, or forever when the
//     timeout is 0;
//   - a Node condition matching an unhealthy condition for its timeout: unhealthy.
func checkTarget(spec checkSpec, in targetInput, now time.Time) verdict {
	m := in.Machine
	if _, ok := m.Annotations[clusterv1.RemediateMachineAnnotation]; ok {
		return verdict{State: stateUnhealthy, Reason: clusterv1.MachineHealthCheckHasRemediateAnnotationReason,
			Message: "Health check failed: marked for remediation via the " + clusterv1.RemediateMachineAnnotation + " annotation"}
	}
	if msg, failed := terminalFailure(m); failed {
		return verdict{State: stateUnhealthy, Reason: clusterv1.MachineHealthCheckUnhealthyMachineReason,
			Message: "Health check failed: the Machine reports a terminal failure: " + msg}
	}
	byMachine := conditions.Evaluate(conditions.MetaConditions(m.Status.Conditions), spec.MachineCriteria, now)
	if byMachine.Unhealthy {
		return verdict{State: stateUnhealthy, Reason: clusterv1.MachineHealthCheckUnhealthyMachineReason,
			Message: fmt.Sprintf("Health check failed: condition %s on Machine has been %s for more than %s",
				byMachine.Matched.Type, byMachine.Matched.Status, byMachine.Matched.Duration),
			ExpiredAt: byMachine.ExpiredAt, NextCheck: byMachine.NextCheck}
	}
	v := checkByNode(spec, in, now)
	v.NextCheck = engine.Earliest(v.NextCheck, byMachine.NextCheck)
	return v
}

// checkByNode applies the criteria after the Machine's own: the Cluster's readiness, the Node's presence
// and its conditions.
func checkByNode(spec checkSpec, in targetInput, now time.Time) verdict {
	m := in.Machine
	if c := in.Cluster; c != nil {
		if cond := meta.FindStatusCondition(c.Status.Conditions, clusterv1.ClusterInfrastructureReadyCondition); cond != nil && cond.Status != metav1.ConditionTrue {
			return verdict{State: statePending, Message: "The Cluster's infrastructure is not ready"}
		}
		if !isControlPlaneMachine(m) {
			if cond := meta.FindStatusCondition(c.Status.Conditions, clusterv1.ClusterControlPlaneInitializedCondition); cond != nil && cond.Status != metav1.ConditionTrue {
				return verdict{State: statePending, Message: "The Cluster's control plane is not initialized"}
			}
		}
	}
	if in.NodeMissing {
		return verdict{State: stateUnhealthy, Reason: clusterv1.MachineHealthCheckNodeDeletedReason,
			Message: fmt.Sprintf("Health check failed: Node %s has been deleted", m.Status.NodeRef.Name)}
	}
	if in.Node == nil {
		return checkNodeStartup(spec, in, now)
	}
	res := conditions.Evaluate(conditions.NodeConditions(in.Node.Status.Conditions), spec.Criteria, now)
	if res.Unhealthy {
		return verdict{State: stateUnhealthy, Reason: clusterv1.MachineHealthCheckUnhealthyNodeReason,
			Message: fmt.Sprintf("Health check failed: condition %s on Node %s has been %s for more than %s",
				res.Matched.Type, in.Node.Name, res.Matched.Status, res.Matched.Duration),
			ExpiredAt: res.ExpiredAt, NextCheck: res.NextCheck}
	}
	return verdict{State: stateHealthy, NextCheck: res.NextCheck}
}

// checkNodeStartup judges a Machine that has no Node yet.
func checkNodeStartup(spec checkSpec, in targetInput, now time.Time) verdict {
	if spec.NodeStartupTimeout <= 0 {
		return verdict{State: statePending, Message: "Waiting for a Node (nodeStartupTimeout is disabled)"}
	}
	// The clock starts at the latest of: the Machine's creation, its infrastructure becoming ready, the
	// Cluster's infrastructure becoming ready and its control plane being initialized.
	start := in.Machine.CreationTimestamp.Time
	later := func(conds []metav1.Condition, condType string) {
		if c := meta.FindStatusCondition(conds, condType); c != nil && c.Status == metav1.ConditionTrue && c.LastTransitionTime.After(start) {
			start = c.LastTransitionTime.Time
		}
	}
	later(in.Machine.Status.Conditions, clusterv1.MachineInfrastructureReadyCondition)
	if in.Cluster != nil {
		later(in.Cluster.Status.Conditions, clusterv1.ClusterInfrastructureReadyCondition)
		later(in.Cluster.Status.Conditions, clusterv1.ClusterControlPlaneInitializedCondition)
	}
	expiry := start.Add(spec.NodeStartupTimeout)
	if now.Before(expiry) {
		return verdict{State: statePending, Message: "Waiting for a Node", NextCheck: expiry}
	}
	return verdict{State: stateUnhealthy, Reason: clusterv1.MachineHealthCheckNodeStartupTimeoutReason,
		Message:   fmt.Sprintf("Health check failed: no Node joined within %s", spec.NodeStartupTimeout),
		ExpiredAt: expiry}
}

// terminalFailure reports the Machine's terminal failure (Cluster API's failureReason and failureMessage,
// kept under status.deprecated.v1beta1 in v1beta2), shortened for conditions and events.
func terminalFailure(m *clusterv1.Machine) (string, bool) {
	d := m.Status.Deprecated
	if d == nil || d.V1Beta1 == nil || (d.V1Beta1.FailureReason == nil && d.V1Beta1.FailureMessage == nil) {
		return "", false
	}
	var msg string
	if d.V1Beta1.FailureReason != nil {
		msg = string(*d.V1Beta1.FailureReason)
	}
	if d.V1Beta1.FailureMessage != nil {
		if msg != "" {
			msg += ": "
		}
		msg += *d.V1Beta1.FailureMessage
	}
	return truncate(msg, maxFailureMessage), true
}

// isControlPlaneMachine reports whether the Machine is part of a control plane (Cluster API's label).
func isControlPlaneMachine(m *clusterv1.Machine) bool {
	_, ok := m.Labels[clusterv1.MachineControlPlaneLabel]
	return ok
}

// truncate shortens s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "..."
}
