//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// leaseNamespace holds the node maintenance leases (the manager's default, medik8s').
const leaseNamespace = "medik8s-leases"

// ipmiHosts are the nodes whose host is an IPMI simulator (node name → *ipmiPower), not a Redfish system.
var ipmiHosts sync.Map

// hostPower is what a node's BMC simulator says of its host's power: "On", "Off", "PoweringOn", ...
func hostPower(node string) (string, error) {
	if p, ok := ipmiHosts.Load(node); ok {
		if on, _ := p.(*ipmiPower).PoweredOn(node); on {
			return string(redfishmock.PowerOn), nil
		}
		return string(redfishmock.PowerOff), nil
	}
	state, err := h.Mock.PowerState(harness.SystemID(node))
	return string(state), err
}

// resets lists the Redfish resets a node's system accepted, oldest first.
func resets(node string) []string {
	GinkgoHelper()
	r, err := h.Mock.Resets(harness.SystemID(node))
	Expect(err).NotTo(HaveOccurred())
	return r
}

// powerCycledOnce is the record of a host power-cycled exactly once: one forced power-off, one power-on.
var powerCycledOnce = []string{"ForceOff", "On"}

// expectSettled waits for the end state of healthy, remediated-or-untouched nodes: each Node Ready with
// none of the remediator's taints, its host powered on and its kubelet running, no node lease, and no
// remediation request (hence no finalizer) left for it anywhere.
func expectSettled(ctx context.Context, nodes ...string) {
	GinkgoHelper()
	for _, name := range nodes {
		Eventually(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
			g.Expect(nodeReady(node)).To(Equal(string(corev1.ConditionTrue)), "node %s is not Ready", name)
			g.Expect(node.Spec.Taints).NotTo(ContainElement(HaveField("Key", v1alpha1.TaintRemediation)), "node %s keeps the remediation taint", name)
			g.Expect(node.Spec.Taints).NotTo(ContainElement(HaveField("Key", v1alpha1.TaintOutOfService)), "node %s keeps the out-of-service taint", name)

			power, err := hostPower(name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(power).To(Equal(string(redfishmock.PowerOn)), "the host of %s is not powered on", name)
			state, err := h.Sim.State(name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(state).To(Equal(nodesim.StateRunning), "the kubelet of %s is not running", name)

			g.Expect(nodeLease(ctx, name)).To(BeNil(), "node %s still has a maintenance lease", name)
			g.Expect(remediationsOf(ctx, name)).To(BeEmpty(), "node %s still has remediation requests", name)
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	}
}

// expectCheckSettled waits for a NodeHealthCheck to be back at rest: enabled, no storm, nothing in
// flight, no unhealthy node.
func expectCheckSettled(ctx context.Context, name string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		nhc := &v1alpha1.NodeHealthCheck{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, nhc)).To(Succeed())
		g.Expect(nhc.Status.Phase).To(Equal(v1alpha1.PhaseEnabled))
		g.Expect(nhc.Status.UnhealthyNodes).To(BeEmpty())
		g.Expect(nhc.Status.InFlightRemediations).To(BeEmpty())
		g.Expect(nhc.Status.ObservedNodes).To(Equal(nhc.Status.HealthyNodes))
		g.Expect(meta.IsStatusConditionTrue(nhc.Status.Conditions, v1alpha1.ConditionStormActive)).To(BeFalse())
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
}

// nodeLease is a node's maintenance lease, or nil.
func nodeLease(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: leaseNamespace, Name: "node-" + node}, lease)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return lease, err
}

// remediationsOf lists the remediation requests, in any namespace, acting on or naming a node.
func remediationsOf(ctx context.Context, node string) ([]string, error) {
	var list v1alpha1.PowerCycleRemediationList
	if err := k8s.List(ctx, &list); err != nil {
		return nil, err
	}
	var names []string
	for _, p := range list.Items {
		if p.Status.NodeName == node || p.Annotations[v1alpha1.AnnotationNodeName] == node || p.Name == node {
			names = append(names, fmt.Sprintf("%s/%s (phase %q, finalizers %v)", p.Namespace, p.Name, p.Status.Phase, p.Finalizers))
		}
	}
	return names, nil
}

// hasTaint reports whether a node has a taint with key.
func hasTaint(ctx context.Context, node, key string) (bool, error) {
	n := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return false, err
	}
	return taintKeys(n)[key], nil
}

// waitPhase waits for a remediation request to be in a phase and returns it.
func waitPhase(ctx context.Context, key client.ObjectKey, phase v1alpha1.PowerCyclePhase, timeout time.Duration) *v1alpha1.PowerCycleRemediation {
	GinkgoHelper()
	var pcr *v1alpha1.PowerCycleRemediation
	Eventually(func(g Gomega) {
		var err error
		pcr, err = getPCR(ctx, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pcr).NotTo(BeNil(), "no remediation request %s yet", key)
		g.Expect(pcr.Status.Phase).To(Equal(phase))
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return pcr
}

// waitGone waits for a remediation request to be gone.
func waitGone(ctx context.Context, key client.ObjectKey, timeout time.Duration) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		pcr, err := getPCR(ctx, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pcr).To(BeNil(), "remediation request %s is still there", key)
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// conditionOf returns a request's condition, or an empty one.
func conditionOf(pcr *v1alpha1.PowerCycleRemediation, condType string) metav1.Condition {
	if c := meta.FindStatusCondition(pcr.Status.Conditions, condType); c != nil {
		return *c
	}
	return metav1.Condition{}
}
