package powercycle

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/leases"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The remediator's scenarios of issue 33 (items 2, 3 and 8), each acted out from the side of someone who
// should not be able to move a host: a request the remediator refused, a same-named request in another
// trusted namespace, a DaemonSet that writes Node annotations, whoever deletes a Node. One real API server
// and the Redfish mock on a fake clock, Reconcile called directly; the outcomes are read from the API
// server and the mock's record of power requests.
var _ = Describe("Trust, second pass", func() {
	// Item 2. A request the remediator refused names the Node of a host that a trusted power-off request
	// fenced. When the trusted request is deleted, the Node is restored exactly as it is without the refused
	// one: both metalheal taints removed, the lease released, a CleanedUp event and no HandedOver; the host
	// stays off (power-off strategy) and gets no further power request. The refused request is one in a
	// namespace not trusted, or one refused for good in a trusted namespace (a Cluster API request whose Node
	// lives in a workload cluster: Failed, no attempts, Succeeded=False NodeNotInThisCluster).
	type refusedRequestIsNoSiblingCase struct {
		refused string // "", "untrusted" or "refused-in-trusted"

	}
	DescribeTable("refused request is no sibling", func(ctx SpecContext, tc refusedRequestIsNoSiblingCase) {
		w, m, node := oneMockHost(ctx, nil)
		other := w.namespace(ctx, "team-x")
		if tc.refused == "refused-in-trusted" {
			w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.TrustedNamespaces = []string{other} }
		}
		r := w.reconciler()
		trusted := w.remediationIn(ctx, w.ns, node, node, spec(powerOff, 1))
		w.drive(ctx, trusted, same(r), nil, untilPhase(v1alpha1.PhaseSucceeded))
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))
		Expect(resets(m)).To(Equal([]string{"ForceOff"}))

		switch tc.refused {
		case "untrusted":
			// Whoever may create requests in team-x asks for a power-off of the same Node: refused.
			key := w.remediationIn(ctx, other, node, node, spec(powerOff, 1))
			w.drive(ctx, key, same(r), nil, untilSettled)
			Expect(conditionOf(w.get(ctx, key), v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonNamespaceNotTrusted, metav1.ConditionFalse))
		case "refused-in-trusted":
			// Recorded as the remediator refuses a request for good: Failed, no attempt, no finalizer.
			key := w.remediationIn(ctx, other, node, node, spec(powerOff, 1))
			p := w.get(ctx, key)
			p.Status.Phase, p.Status.NodeName = v1alpha1.PhaseFailed, node
			now := metav1.NewTime(w.clock.Now())
			p.Status.LastTransitionTime = &now
			for _, c := range []string{v1alpha1.ConditionProcessing, v1alpha1.ConditionSucceeded} {
				p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionFalse,
					Reason: v1alpha1.ReasonNodeNotInThisCluster, Message: "Refused", LastTransitionTime: now})
			}
			w.must(w.c.Status().Update(ctx, p))
		}
		w.drainEvents()

		w.must(w.c.Delete(ctx, w.get(ctx, trusted)))
		steps := w.drive(ctx, trusted, same(r), nil, untilSettled)
		Expect(steps[len(steps)-1].gone).To(BeTrue(), "the finalizer went")

		Expect(w.taintKeys(ctx, node)).To(BeEmpty(), "the Node is restored: no metalheal taint left")
		Expect(w.lease(ctx, node)).To(BeNil(), "the node lease is released")
		events := w.drainEvents()
		Expect(events).To(ContainElement(HavePrefix("Normal CleanedUp")))
		Expect(events).NotTo(ContainElement(HavePrefix("Normal HandedOver")), "nothing to hand the Node over to")
		Expect(resets(m)).To(Equal([]string{"ForceOff"}), "power-off: the host stays off, as without the refused request")
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOff))
	},
		Entry("no other request", refusedRequestIsNoSiblingCase{}),
		Entry("a refused request in a namespace not trusted", refusedRequestIsNoSiblingCase{refused: "untrusted"}),
		Entry("a request refused for good in a trusted namespace", refusedRequestIsNoSiblingCase{refused: "refused-in-trusted"}),
	)

	// Item 3. Two trusted namespaces each hold a request of the same name for the same Node (a lease holder
	// identity, "PowerCycleRemediation-<name>", names no namespace). Only one of them acts on the host: one
	// power-off reaches the BMC, one request ever holds the node lease, and the other waits in Pending with
	// LeaseAcquired=False. Once the first is deleted the other takes the lease over and carries on, finding
	// the host off already: still one power-off.
	type sameNameInTwoNamespacesCase struct {
		listedFirst bool // the request in the listed namespace is reconciled first

	}
	DescribeTable("same name in two namespaces, one hand", func(ctx SpecContext, tc sameNameInTwoNamespacesCase) {
		w, m, node := oneMockHost(ctx, func(m *redfishmock.Mock) *redfishmock.Mock { return m.WithPowerDelay(3 * time.Second) })
		listed := w.namespace(ctx, "cluster-b")
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.TrustedNamespaces = []string{listed} }
		r := w.reconciler()
		a := w.remediationIn(ctx, w.ns, node, node, spec(powerOff, 1))
		b := w.remediationIn(ctx, listed, node, node, spec(powerOff, 1))
		order := []client.ObjectKey{a, b}
		if tc.listedFirst {
			order = []client.ObjectKey{b, a}
		}
		holds := func(key client.ObjectKey) bool {
			return w.exists(ctx, key) && conditionOf(w.get(ctx, key), v1alpha1.ConditionLeaseAcquired).Status == metav1.ConditionTrue
		}
		oneHand := func() {
			Expect(holds(a) && holds(b)).To(BeFalse(), "both requests hold the node lease")
			offs := slices.DeleteFunc(resets(m), func(r string) bool { return r != "ForceOff" })
			Expect(len(offs)).To(BeNumerically("<=", 1), "a second power-off: %v", resets(m))
		}
		w.together(ctx, r, order, oneHand, func() bool {
			return w.get(ctx, order[0]).Status.Phase == v1alpha1.PhaseSucceeded && w.clock.Now().Sub(epoch) > 2*time.Minute
		})

		winner, waiter := w.get(ctx, order[0]), w.get(ctx, order[1])
		Expect(conditionOf(winner, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonFenced, metav1.ConditionTrue))
		Expect(waiter.Status.Phase).To(Equal(v1alpha1.PhasePending), "the other waits")
		Expect(waiter.Status.Attempts).To(BeEmpty())
		Expect(conditionOf(waiter, v1alpha1.ConditionLeaseAcquired)).To(MatchFields(v1alpha1.ReasonLeaseHeldByOther, metav1.ConditionFalse))
		Expect(resets(m)).To(Equal([]string{"ForceOff"}), "one power-off")
		Expect(holderOf(w.lease(ctx, node))).To(Equal("PowerCycleRemediation-"+node), "medik8s' holder form is kept")
		Expect(w.lease(ctx, node).Annotations).To(HaveKeyWithValue(leases.AnnotationHolderNamespace, order[0].Namespace))

		// The first request is deleted: the other takes the node lease over and fences the host it
		// finds off, with no power request of its own.
		w.must(w.c.Delete(ctx, winner))
		w.together(ctx, r, order, oneHand, func() bool {
			return !w.exists(ctx, order[0]) && w.get(ctx, order[1]).Status.Phase == v1alpha1.PhaseSucceeded
		})
		Expect(conditionOf(w.get(ctx, order[1]), v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonFenced, metav1.ConditionTrue))
		Expect(resets(m)).To(Equal([]string{"ForceOff"}))
		Expect(w.lease(ctx, node).Annotations).To(HaveKeyWithValue(leases.AnnotationHolderNamespace, order[1].Namespace))
		Expect(w.lease(ctx, node).Spec.LeaseTransitions).To(HaveValue(Equal(int32(1))), "taken over in one update")
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))
		Expect(w.get(ctx, order[1]).Status.AppliedTaints).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService),
			"the record of the taints went with the Node")
	},
		Entry("the manager's namespace reconciled first", sameNameInTwoNamespacesCase{}),
		Entry("the listed namespace reconciled first", sameNameInTwoNamespacesCase{listedFirst: true}),
	)

	// Item 8, taints. An administrator put the out-of-service taint on a Node (with the very value metalheal
	// uses). A DaemonSet that may patch Node annotations writes remediation.metalheal.io/applied-taints
	// naming it, before a power-off request fences the host or while it is fenced. When the request is
	// deleted, metalheal's own remediation taint goes and the administrator's out-of-service taint stays.
	const appliedTaints = "remediation.metalheal.io/applied-taints"
	type annotationNamingAnAdminsTaintCase struct {
		before bool // the annotation is written before the request starts, else while the host is fenced

	}
	DescribeTable("annotation naming an admin's taint", func(ctx SpecContext, tc annotationNamingAnAdminsTaintCase) {
		w, m, node := oneMockHost(ctx, nil)
		admins := corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: v1alpha1.TaintOutOfServiceValue, Effect: corev1.TaintEffectNoExecute}
		n := w.getNode(ctx, node)
		n.Spec.Taints = append(n.Spec.Taints, admins)
		w.must(w.c.Update(ctx, n))
		daemonSet := func() {
			n := w.getNode(ctx, node)
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[appliedTaints] = v1alpha1.TaintOutOfService
			w.must(w.c.Update(ctx, n))
		}
		if tc.before {
			daemonSet()
		}
		r := w.reconciler()
		key := w.remediationIn(ctx, w.ns, node, node, spec(powerOff, 1))
		w.drive(ctx, key, same(r), nil, untilPhase(v1alpha1.PhaseSucceeded))
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))
		if !tc.before {
			daemonSet()
		}

		w.must(w.c.Delete(ctx, w.get(ctx, key)))
		w.drive(ctx, key, same(r), nil, untilSettled)
		Expect(w.taintKeys(ctx, node)).To(Equal([]string{v1alpha1.TaintOutOfService}), "the administrator's taint stays")
		Expect(w.getNode(ctx, node).Spec.Taints).To(ContainElement(HaveField("Key", admins.Key)))
		Expect(resets(m)).To(Equal([]string{"ForceOff"}))
	},
		Entry("written before the remediation", annotationNamingAnAdminsTaintCase{before: true}),
		Entry("written while the host is fenced", annotationNamingAnAdminsTaintCase{}),
	)

	// Item 8, Node deletion. A host is left off and fenced (power-off, or an escalation that gave up); then
	// its Node is deleted, and the garbage collector deletes the requests the Node owns (here the test
	// deletes them, as the collector would: envtest runs none). Whoever may delete a Node must not make
	// metalheal power a fenced host on: the BMC receives no power-on.
	type nodeDeletedUnderAFencedHostCase struct {
		// steps are the strategies of the Node's requests, oldest first: an escalation makes step 2 while
		// step 1 (timed out) still holds the host.
		steps       []v1alpha1.Strategy
		newestFirst bool
	}
	DescribeTable("node deleted under a fenced host stays off", func(ctx SpecContext, tc nodeDeletedUnderAFencedHostCase) {
		w, m, node := oneMockHost(ctx, nil)
		r := w.reconciler()
		var keys []client.ObjectKey
		for i, s := range tc.steps {
			if i > 0 {
				w.markTimedOut(ctx, keys[i-1])
			}
			key := w.stepRequest(ctx, node, node+"-"+string(s), spec(s, 1), false)
			keys = append(keys, key)
			w.together(ctx, r, keys, nil, func() bool {
				return terminal(w.get(ctx, key).Status.Phase) && (i == 0 || handedOver(w.get(ctx, keys[0])))
			})
		}
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOff))
		Expect(w.taintKeys(ctx, node)).To(ContainElement(v1alpha1.TaintOutOfService))
		before := resets(m)

		w.must(w.c.Delete(ctx, w.getNode(ctx, node)))
		for _, key := range keys {
			w.must(w.c.Delete(ctx, w.get(ctx, key)))
		}
		order := slices.Clone(keys)
		if tc.newestFirst {
			slices.Reverse(order)
		}
		w.together(ctx, r, order, nil, func() bool {
			return !slices.ContainsFunc(keys, func(k client.ObjectKey) bool { return w.exists(ctx, k) })
		})

		Expect(resets(m)).To(Equal(before), "no power request after the Node was deleted")
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOff), "the fenced host stays off")
	},
		Entry("power-off", nodeDeletedUnderAFencedHostCase{steps: []v1alpha1.Strategy{powerOff}}),
		Entry("escalation left fenced", nodeDeletedUnderAFencedHostCase{steps: []v1alpha1.Strategy{escalate}}),
		Entry("escalate, then power-off; the oldest reconciled first", nodeDeletedUnderAFencedHostCase{steps: []v1alpha1.Strategy{escalate, powerOff}}),
		Entry("escalate, then power-off; the newest reconciled first", nodeDeletedUnderAFencedHostCase{steps: []v1alpha1.Strategy{escalate, powerOff}, newestFirst: true}),
	)
})

// remediationIn creates a PowerCycleRemediation of node in namespace ns, annotated with the node and
// owned by it, as NodeHealthCheck makes them.
func (w *world) remediationIn(ctx context.Context, ns, name, node string, s v1alpha1.PowerCycleRemediationSpec) client.ObjectKey {
	GinkgoHelper()
	n := w.getNode(ctx, node)
	p := &v1alpha1.PowerCycleRemediation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{v1alpha1.AnnotationNodeName: node},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}}},
		Spec: s,
	}
	w.must(w.c.Create(ctx, p))
	return client.ObjectKeyFromObject(p)
}

// resets is what the mock's system "1" was asked to do with its power, in order.
func resets(m *redfishmock.Mock) []string {
	r, err := m.Resets("1")
	if err != nil {
		panic(err)
	}
	return r
}

// Which requests count as refused for good: Failed before any attempt, Succeeded=False with a refusal
// reason; a request that failed after acting, or failed for another reason, is no refusal.
func TestRefused(t *testing.T) {
	failed := func(reason string, attempts int) *v1alpha1.PowerCycleRemediation {
		p := &v1alpha1.PowerCycleRemediation{}
		p.Status.Phase = v1alpha1.PhaseFailed
		p.Status.Attempts = make([]v1alpha1.PowerCycleAttempt, attempts)
		p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionFalse, Reason: reason}}
		return p
	}
	for name, tc := range map[string]struct {
		p    *v1alpha1.PowerCycleRemediation
		want bool
	}{
		"namespace not trusted":                     {failed(v1alpha1.ReasonNamespaceNotTrusted, 0), true},
		"node in a workload cluster":                {failed(v1alpha1.ReasonNodeNotInThisCluster, 0), true},
		"a refusal reason after an attempt":         {failed(v1alpha1.ReasonNamespaceNotTrusted, 1), false},
		"lease held by another, before any attempt": {failed(v1alpha1.ReasonLeaseHeldByOther, 0), false},
		"retries exhausted":                         {failed(v1alpha1.ReasonRetriesExhausted, 2), false},
		"not started":                               {&v1alpha1.PowerCycleRemediation{}, false},
		"a refusal reason on a request not failed (yet)": {func() *v1alpha1.PowerCycleRemediation {
			p := failed(v1alpha1.ReasonNamespaceNotTrusted, 0)
			p.Status.Phase = v1alpha1.PhasePending
			return p
		}(), false},
	} {
		t.Run(name, func(t *testing.T) { NewWithT(t).Expect(refused(tc.p)).To(Equal(tc.want)) })
	}
}
