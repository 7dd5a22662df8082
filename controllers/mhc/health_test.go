package mhc

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capierrors "sigs.k8s.io/cluster-api/api/deprecated/errors"

	"github.com/metalheal/metalheal/internal/conditions"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// readyCriteria are the user guide's example conditions: Ready Unknown or False for 300s.
var readyCriteria = []conditions.Criterion{
	{Type: "Ready", Status: "Unknown", Duration: 300 * time.Second},
	{Type: "Ready", Status: "False", Duration: 300 * time.Second},
}

func unitMachine(name string, mutate ...func(*clusterv1.Machine)) *clusterv1.Machine {
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	m.Status.NodeRef.Name = "node-" + name
	for _, f := range mutate {
		f(m)
	}
	return m
}

func unitNode(name string, conds ...corev1.NodeCondition) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: conds}}
}

func nodeCond(status corev1.ConditionStatus, since time.Duration) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(t0.Add(-since))}
}

func TestCheckTarget(t *testing.T) {
	spec := checkSpec{Criteria: readyCriteria, NodeStartupTimeout: 10 * time.Minute}
	noNode := func(m *clusterv1.Machine) { m.Status.NodeRef.Name = "" }
	createdAgo := func(d time.Duration) func(*clusterv1.Machine) {
		return func(m *clusterv1.Machine) { m.CreationTimestamp = metav1.NewTime(t0.Add(-d)) }
	}
	tests := []struct {
		name          string
		spec          checkSpec
		in            targetInput
		wantState     healthState
		wantReason    string
		wantExpiredAt time.Time
		wantNextCheck time.Time
	}{
		{
			name:      "Ready=True is healthy, nothing to wait for",
			in:        targetInput{Machine: unitMachine("m"), Node: unitNode("node-m", nodeCond(corev1.ConditionTrue, time.Hour))},
			wantState: stateHealthy,
		},
		{
			name:          "Ready=Unknown for less than its timeout is still healthy and looks again at the expiry",
			in:            targetInput{Machine: unitMachine("m"), Node: unitNode("node-m", nodeCond(corev1.ConditionUnknown, 2*time.Minute))},
			wantState:     stateHealthy,
			wantNextCheck: t0.Add(3 * time.Minute),
		},
		{
			name:          "Ready=Unknown for exactly its timeout is unhealthy",
			in:            targetInput{Machine: unitMachine("m"), Node: unitNode("node-m", nodeCond(corev1.ConditionUnknown, 5*time.Minute))},
			wantState:     stateUnhealthy,
			wantReason:    clusterv1.MachineHealthCheckUnhealthyNodeReason,
			wantExpiredAt: t0,
		},
		{
			name:          "Ready=False for longer than its timeout is unhealthy",
			in:            targetInput{Machine: unitMachine("m"), Node: unitNode("node-m", nodeCond(corev1.ConditionFalse, 7*time.Minute))},
			wantState:     stateUnhealthy,
			wantReason:    clusterv1.MachineHealthCheckUnhealthyNodeReason,
			wantExpiredAt: t0.Add(-2 * time.Minute),
		},
		{
			name:      "a Node without a Ready condition is not unhealthy by its conditions",
			in:        targetInput{Machine: unitMachine("m"), Node: unitNode("node-m")},
			wantState: stateHealthy,
		},
		{
			name:       "a nodeRef to a deleted Node is unhealthy at once",
			in:         targetInput{Machine: unitMachine("m"), NodeMissing: true},
			wantState:  stateUnhealthy,
			wantReason: clusterv1.MachineHealthCheckNodeDeletedReason,
		},
		{
			name:          "no Node yet, within nodeStartupTimeout: pending until it expires",
			in:            targetInput{Machine: unitMachine("m", noNode, createdAgo(4*time.Minute))},
			wantState:     statePending,
			wantNextCheck: t0.Add(6 * time.Minute),
		},
		{
			name:          "no Node after nodeStartupTimeout is unhealthy",
			in:            targetInput{Machine: unitMachine("m", noNode, createdAgo(10*time.Minute))},
			wantState:     stateUnhealthy,
			wantReason:    clusterv1.MachineHealthCheckNodeStartupTimeoutReason,
			wantExpiredAt: t0,
		},
		{
			name: "the startup clock starts when the Machine's infrastructure became ready",
			in: targetInput{Machine: unitMachine("m", noNode, createdAgo(time.Hour), func(m *clusterv1.Machine) {
				m.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineInfrastructureReadyCondition, Status: metav1.ConditionTrue,
					LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute))}}
			})},
			wantState:     statePending,
			wantNextCheck: t0.Add(9 * time.Minute),
		},
		{
			name:      "nodeStartupTimeout 0 disables the startup check",
			spec:      checkSpec{Criteria: readyCriteria},
			in:        targetInput{Machine: unitMachine("m", noNode, createdAgo(24*time.Hour))},
			wantState: statePending,
		},
		{
			name: "a terminal failure is unhealthy at once",
			in: targetInput{Machine: unitMachine("m", func(m *clusterv1.Machine) {
				m.Status.Deprecated = &clusterv1.MachineDeprecatedStatus{V1Beta1: &clusterv1.MachineV1Beta1DeprecatedStatus{
					FailureReason: ptr.To(capierrors.CreateMachineError), FailureMessage: ptr.To("instance terminated")}}
			}), Node: unitNode("node-m", nodeCond(corev1.ConditionTrue, time.Hour))},
			wantState:  stateUnhealthy,
			wantReason: clusterv1.MachineHealthCheckUnhealthyMachineReason,
		},
		{
			name: "the remediate-machine annotation is unhealthy at once, even with a healthy Node",
			in: targetInput{Machine: unitMachine("m", func(m *clusterv1.Machine) {
				m.Annotations = map[string]string{clusterv1.RemediateMachineAnnotation: ""}
			}), Node: unitNode("node-m", nodeCond(corev1.ConditionTrue, time.Hour))},
			wantState:  stateUnhealthy,
			wantReason: clusterv1.MachineHealthCheckHasRemediateAnnotationReason,
		},
		{
			name: "a worker is not judged while the Cluster's control plane is not initialized",
			in: targetInput{Machine: unitMachine("m"), NodeMissing: true, Cluster: &clusterv1.Cluster{Status: clusterv1.ClusterStatus{
				Conditions: []metav1.Condition{{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionFalse}}}}},
			wantState: statePending,
		},
		{
			name: "a control plane Machine is judged before the control plane is initialized",
			in: targetInput{Machine: unitMachine("m", func(m *clusterv1.Machine) {
				m.Labels = map[string]string{clusterv1.MachineControlPlaneLabel: ""}
			}), NodeMissing: true, Cluster: &clusterv1.Cluster{Status: clusterv1.ClusterStatus{
				Conditions: []metav1.Condition{{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionFalse}}}}},
			wantState:  stateUnhealthy,
			wantReason: clusterv1.MachineHealthCheckNodeDeletedReason,
		},
		{
			name: "a Machine condition matching unhealthyMachineConditions for its timeout: unhealthy, though the Node is Ready",
			spec: withMachineCriteria(spec),
			in: targetInput{Machine: unitMachine("m", machineCond("InfrastructureReady", metav1.ConditionFalse, 10*time.Minute)),
				Node: unitNode("node-m", nodeCond(corev1.ConditionTrue, time.Hour))},
			wantState:     stateUnhealthy,
			wantReason:    clusterv1.MachineHealthCheckUnhealthyMachineReason,
			wantExpiredAt: t0,
		},
		{
			name: "a Machine condition within its timeout: the Node decides, and the check looks again at the expiry",
			spec: withMachineCriteria(spec),
			in: targetInput{Machine: unitMachine("m", machineCond("InfrastructureReady", metav1.ConditionFalse, 4*time.Minute)),
				Node: unitNode("node-m", nodeCond(corev1.ConditionTrue, time.Hour))},
			wantState:     stateHealthy,
			wantNextCheck: t0.Add(6 * time.Minute),
		},
		{
			name: "a Machine condition is looked at even without a Node",
			spec: withMachineCriteria(spec),
			in: targetInput{Machine: unitMachine("m", noNode, createdAgo(time.Minute),
				machineCond("InfrastructureReady", metav1.ConditionFalse, 10*time.Minute))},
			wantState:     stateUnhealthy,
			wantReason:    clusterv1.MachineHealthCheckUnhealthyMachineReason,
			wantExpiredAt: t0,
		},
		{
			name: "no Machine is judged while the Cluster's infrastructure is not ready",
			in: targetInput{Machine: unitMachine("m"), NodeMissing: true, Cluster: &clusterv1.Cluster{Status: clusterv1.ClusterStatus{
				Conditions: []metav1.Condition{{Type: clusterv1.ClusterInfrastructureReadyCondition, Status: metav1.ConditionUnknown}}}}},
			wantState: statePending,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := spec
			if tt.spec.Criteria != nil {
				s = tt.spec
			}
			v := checkTarget(s, tt.in, t0)
			g.Expect(v.State).To(Equal(tt.wantState), "verdict %+v", v)
			g.Expect(v.Reason).To(Equal(tt.wantReason))
			g.Expect(v.ExpiredAt).To(BeTemporally("==", tt.wantExpiredAt))
			g.Expect(v.NextCheck).To(BeTemporally("==", tt.wantNextCheck))
			if tt.wantState == stateUnhealthy {
				g.Expect(v.Message).To(HavePrefix("Health check failed: "))
			}
		})
	}
}

// withMachineCriteria adds unhealthyMachineConditions InfrastructureReady=False for 10m to spec.
func withMachineCriteria(spec checkSpec) checkSpec {
	spec.MachineCriteria = []conditions.Criterion{{Type: "InfrastructureReady", Status: "False", Duration: 10 * time.Minute}}
	return spec
}

// machineCond sets one of the Machine's conditions, with status for the given time.
func machineCond(condType string, status metav1.ConditionStatus, since time.Duration) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: condType, Status: status,
			LastTransitionTime: metav1.NewTime(t0.Add(-since))})
	}
}

func TestTerminalFailureMessageIsBounded(t *testing.T) {
	g := NewWithT(t)
	long := string(make([]rune, 1000))
	m := unitMachine("m", func(m *clusterv1.Machine) {
		m.Status.Deprecated = &clusterv1.MachineDeprecatedStatus{V1Beta1: &clusterv1.MachineV1Beta1DeprecatedStatus{FailureMessage: &long}}
	})
	msg, failed := terminalFailure(m)
	g.Expect(failed).To(BeTrue())
	g.Expect(len([]rune(msg))).To(BeNumerically("<=", maxFailureMessage+3))
}
