package powerwatch

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
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
	cases := []struct {
		name string
		cond *corev1.NodeCondition
		want action
	}{
		{"no condition: none is added", nil, actNone},
		{"True: set False", &corev1.NodeCondition{Status: corev1.ConditionTrue}, actPoweredOn},
		{"False already: nothing", &corev1.NodeCondition{Status: corev1.ConditionFalse}, actNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(decideOn(tc.cond)).To(Equal(tc.want))
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
