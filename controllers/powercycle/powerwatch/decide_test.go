package powerwatch

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecideOff(t *testing.T) {
	cases := []struct {
		name    string
		kubelet kubelet
		warned  action
		want    action
	}{
		{"the kubelet is silent too: fence", kubeletSilent, actNone, actPoweredOff},
		{"silent after a contradiction: fence (the host went down since)", kubeletSilent, actContradicted, actPoweredOff},
		{"the kubelet answers: contradicted", kubeletAnswered, actNone, actContradicted},
		{"still answering: said once already", kubeletAnswered, actContradicted, actNone},
		{"answering after an unverifiable reading: contradicted", kubeletAnswered, actUnverifiable, actContradicted},
		{"no endpoint: unverifiable, never a fence", kubeletNoEndpoint, actNone, actUnverifiable},
		{"no endpoint again: said once already", kubeletNoEndpoint, actUnverifiable, actNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(decideOff(tc.kubelet, tc.warned)).To(Equal(tc.want))
		})
	}
}

func TestDecideOn(t *testing.T) {
	off := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	cond := func(status corev1.ConditionStatus) *corev1.NodeCondition {
		return &corev1.NodeCondition{Status: status, LastTransitionTime: metav1.NewTime(off)}
	}
	ready := func(status corev1.ConditionStatus, heartbeat time.Time) *corev1.NodeCondition {
		return &corev1.NodeCondition{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(heartbeat)}
	}
	cases := []struct {
		name  string
		cond  *corev1.NodeCondition
		ready *corev1.NodeCondition
		want  action
	}{
		{"no condition: none is added", nil, ready(corev1.ConditionTrue, off), actNone},
		{"False already: nothing", cond(corev1.ConditionFalse), ready(corev1.ConditionTrue, off.Add(time.Hour)), actNone},
		{"True, the kubelet Ready since: set False", cond(corev1.ConditionTrue), ready(corev1.ConditionTrue, off.Add(90*time.Second)), actPoweredOn},
		{"True, Ready only by the dead kubelet's last word: wait", cond(corev1.ConditionTrue), ready(corev1.ConditionTrue, off.Add(-time.Second)), actAwaitKubelet},
		{"True, the same second: wait (times are in seconds)", cond(corev1.ConditionTrue), ready(corev1.ConditionTrue, off), actAwaitKubelet},
		{"True, the kubelet reported NotReady since: wait", cond(corev1.ConditionTrue), ready(corev1.ConditionFalse, off.Add(time.Minute)), actAwaitKubelet},
		{"True, no Ready condition: wait", cond(corev1.ConditionTrue), nil, actAwaitKubelet},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(decideOn(tc.cond, tc.ready)).To(Equal(tc.want))
		})
	}
}

func TestKubeletEndpoint(t *testing.T) {
	node := func(port int32, addrs ...corev1.NodeAddress) *corev1.Node {
		n := &corev1.Node{}
		n.Status.Addresses = addrs
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
		return n
	}
	internal := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	cases := []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"InternalIP and port", node(10250, internal("10.0.0.7")), "10.0.0.7:10250"},
		{"the first InternalIP, not the hostname", node(10250, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "w-7"}, internal("10.0.0.7"), internal("10.0.0.8")), "10.0.0.7:10250"},
		{"IPv6", node(10250, internal("fd00::7")), "[fd00::7]:10250"},
		{"no port", node(0, internal("10.0.0.7")), ""},
		{"no InternalIP", node(10250, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.7"}), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(kubeletEndpoint(tc.node)).To(Equal(tc.want))
		})
	}
}
