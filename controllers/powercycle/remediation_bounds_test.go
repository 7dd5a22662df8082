package powercycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/leases"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The remediator's scenarios of issue 23 ("What it must show"): only requests from trusted namespaces move
// a host's power, every wait ends at its bound with a condition and an event, and an ambiguous BMC answer
// never sends a second power-off. One real API server, each scenario in its own namespace with its own
// nodes and fake clock, Reconcile called directly.
var _ = Describe("Trust and bounds", func() {
	// A PowerCycleRemediation created by a cluster admin in a namespace the remediator was not given: it is
	// refused before anything else. No BMC request reaches the Redfish mock, the node gets no taint, no lease
	// is taken, no finalizer stays; the conditions and one warning event say why, naming the flag.
	DescribeTable("untrusted namespace is refused", func(ctx SpecContext, finalizers []string) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey])
		})
		node := w.node(ctx, "worker-3", nil)
		w.setReady(ctx, node, corev1.ConditionTrue)
		w.bmc(ctx, node, mockAddress(m, "1"), credentials)
		teamA := w.namespace(ctx, "team-a")
		p := &v1alpha1.PowerCycleRemediation{
			ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: teamA, Finalizers: finalizers,
				Annotations: map[string]string{v1alpha1.AnnotationNodeName: node}},
			Spec: spec(powerOff, 1),
		}
		w.must(w.c.Create(ctx, p))
		key := client.ObjectKeyFromObject(p)
		m.ResetRequests()

		r := w.reconciler()
		var results []ctrl.Result
		for range 3 { // its creation, and whatever else brings it back
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			Expect(err).NotTo(HaveOccurred())
			results = append(results, res)
			w.clock.Step(time.Minute)
		}

		Expect(m.Requests()).To(BeEmpty(), "no request reached the BMC")
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
		p = w.get(ctx, key)
		Expect(p.Finalizers).NotTo(ContainElement(v1alpha1.FinalizerPowerCycle))
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(conditionOf(p, v1alpha1.ConditionProcessing)).To(MatchFields(v1alpha1.ReasonNamespaceNotTrusted, metav1.ConditionFalse))
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonNamespaceNotTrusted, metav1.ConditionFalse))
		msg := conditionOf(p, v1alpha1.ConditionProcessing).Message
		Expect(msg).To(And(ContainSubstring("--remediation-namespaces"), ContainSubstring(teamA), ContainSubstring(node)))
		Expect(msg).NotTo(ContainSubstring(w.ns), "whoever reads the request does not learn which namespaces are trusted")
		events := w.drainEvents()
		Expect(events).To(HaveLen(1), "one warning, and nothing else announced")
		Expect(events[0]).To(And(HavePrefix("Warning "+EventNamespaceNotTrusted+" "), ContainSubstring("--remediation-namespaces")))
		Expect(r.Remediating(ctx, node)).To(BeFalse(), "a refused request holds no host")
		Expect(results).To(HaveEach(ctrl.Result{}), "nothing to come back for")
	},
		Entry("a power-off naming a healthy node", nil),
		// The admin narrowed the flag while the request was under way: it loses our finalizer (it could
		// not be deleted otherwise), and its host is left as it is.
		Entry("a request of ours from before the flag was narrowed", []string{v1alpha1.FinalizerPowerCycle}),
	)

	// A request in a namespace the admin listed (a Cluster API cluster's) is acted on, with the BMC from the
	// manager's namespace: a BMC for the same node in the request's own namespace is never used.
	It("trusted namespace uses the manager's BMC", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(2).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey])
		})
		node := w.node(ctx, "worker-1", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), credentials)
		cluster := w.namespace(ctx, "cluster-a")
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.TrustedNamespaces = []string{"elsewhere", cluster} }

		// A decoy: a BMC of the same node, with its Secret, in the request's namespace, on another system.
		decoy := &v1alpha1.BMC{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-bmc", Namespace: cluster},
			Spec: v1alpha1.BMCSpec{NodeName: node, Address: mockAddress(m, "2"),
				CredentialsSecretRef: v1alpha1.SecretReference{Name: "decoy-credentials"}},
		}
		w.must(w.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "decoy-credentials", Namespace: cluster},
			StringData: credentials}))
		w.must(w.c.Create(ctx, decoy))
		w.waitCached(ctx, decoy, func(client.Object) bool { return true })
		p := &v1alpha1.PowerCycleRemediation{
			ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: cluster, Annotations: map[string]string{v1alpha1.AnnotationNodeName: node}},
			Spec:       spec(powerOff, 1),
		}
		w.must(w.c.Create(ctx, p))
		key := client.ObjectKeyFromObject(p)

		w.drive(ctx, key, same(w.reconciler()), nil, untilSettled)

		p = w.get(ctx, key)
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonFenced, metav1.ConditionTrue))
		Expect(p.Status.BMCName).To(Equal(node + "-bmc"))
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}), "the manager's BMC powered the host off")
		for _, r := range m.Requests() {
			Expect(r.System).NotTo(Equal("2"), "the request's own BMC was never used: %s %s", r.Method, r.Path)
		}
		Expect(w.countEvents("Warning " + EventNamespaceNotTrusted)).To(BeZero())
	})

	// Pending waits for a node that does not exist, or a BMC that cannot be used, until powerOnTimeoutSeconds
	// (5m here) after the request was accepted: then the first attempt fails, without the host having been
	// touched, with a condition and an event, and the state machine goes on as after any failed attempt
	// (a retry, or escalation). An attempt that starts while the node still does not exist fails at once:
	// no power-off goes to the host of a node that is not there.
	const bound = 5 * time.Minute // spec's powerOnTimeoutSeconds
	type pendingWaitCase struct {
		noNode, noBMC bool
		strategy      v1alpha1.Strategy
		wantPhase     v1alpha1.PowerCyclePhase
		wantMessage   string // in the failed attempt, the Processing condition and the event
		wantWarning   string // the event reason of the wait, once
		// the condition that tells the wait's cause, besides Processing
		wantCondition, wantReason string
		wantStatus                metav1.ConditionStatus
	}
	DescribeTable("pending wait for the node or BMC ends", func(ctx SpecContext, tc pendingWaitCase) {
		w, hosts := fakeHosts(ctx)
		node := w.prefix + "worker-7"
		if !tc.noNode {
			w.node(ctx, "worker-7", nil)
		}
		if !tc.noBMC {
			w.bmc(ctx, node, fakeAddress(node), credentials)
		}
		host := hosts.Driver(fakeAddress(node))
		key := w.remediation(ctx, node, spec(tc.strategy, 1), map[string]string{v1alpha1.AnnotationNodeName: node})

		steps := w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool {
			last := s[len(s)-1]
			return last.phase != v1alpha1.PhasePending || last.at.Sub(epoch) > 2*bound
		})

		last := steps[len(steps)-1]
		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePending, tc.wantPhase}))
		Expect(last.at.Sub(epoch)).To(Equal(bound), "the wait ends at its bound, not before, not after")
		p := w.get(ctx, key)
		Expect(p.Status.Attempts).To(HaveLen(1))
		a := p.Status.Attempts[0]
		Expect(a.Result).To(Equal(attemptFailed))
		Expect(a.Started.Time).To(BeTemporally("==", epoch), "the attempt began when the request was accepted")
		Expect(a.Finished.Sub(epoch)).To(Equal(bound))
		Expect(a.Message).To(ContainSubstring(tc.wantMessage))
		Expect(a.PoweredOff).To(BeNil())
		Expect(conditionOf(p, tc.wantCondition)).To(MatchFields(tc.wantReason, tc.wantStatus), tc.wantCondition)
		Expect(conditionOf(p, v1alpha1.ConditionProcessing).Message).To(ContainSubstring(tc.wantMessage))
		Expect(w.countEvents("Warning "+tc.wantWarning)).To(Equal(1), "one warning for the wait")
		wantEnd := phaseEvents[tc.wantPhase]
		Expect(w.events).To(ContainElement(And(HavePrefix("Warning "+wantEnd+" "), ContainSubstring(tc.wantMessage))))
		Expect(host.Calls()).To(BeEmpty(), "the host was not touched")
		Expect(w.lease(ctx, node)).To(BeNil())
		if !tc.noNode {
			Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		}
		if tc.strategy != reboot {
			return
		}

		// The backoff ends; the next attempt starts while the node (or BMC) is still missing.
		steps = w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool {
			return len(w.get(ctx, key).Status.Attempts) == 2 && s[len(s)-1].phase == v1alpha1.PhaseRetrying
		})
		p = w.get(ctx, key)
		Expect(p.Status.Attempts[1].Result).To(Equal(attemptFailed))
		if tc.noNode {
			Expect(p.Status.Attempts[1].Message).To(ContainSubstring("does not exist: no power-off goes to its host"))
			Expect(p.Status.Attempts[1].Finished.Time).To(BeTemporally("==", p.Status.Attempts[1].Started.Time), "fails at once")
		}
		Expect(powerOps(host)).To(BeEmpty(), "no power request for a node that is not there, or without a BMC")
	},
		Entry("the node does not exist", pendingWaitCase{noNode: true, strategy: reboot, wantPhase: v1alpha1.PhaseRetrying,
			wantMessage: "did not exist within 5m0s (powerOnTimeoutSeconds)", wantWarning: EventNodeNotFound,
			wantCondition: v1alpha1.ConditionProcessing, wantReason: v1alpha1.ReasonRetrying, wantStatus: metav1.ConditionTrue}),
		Entry("the node does not exist, escalate after one attempt: nothing to power off or fence", pendingWaitCase{noNode: true, strategy: escalate,
			wantPhase: v1alpha1.PhaseFailed, wantMessage: "did not exist within 5m0s", wantWarning: EventNodeNotFound,
			wantCondition: v1alpha1.ConditionSucceeded, wantReason: v1alpha1.ReasonRetriesExhausted, wantStatus: metav1.ConditionFalse}),
		Entry("the node has no BMC", pendingWaitCase{noBMC: true, strategy: reboot, wantPhase: v1alpha1.PhaseRetrying,
			wantMessage:   "could not be used within 5m0s (powerOnTimeoutSeconds) of the request's acceptance (BMCNotFound)",
			wantWarning:   EventBMCNotReady,
			wantCondition: v1alpha1.ConditionBMCReady, wantReason: v1alpha1.ReasonBMCNotFound, wantStatus: metav1.ConditionFalse}),
		Entry("the node has no BMC, escalate after one attempt", pendingWaitCase{noBMC: true, strategy: escalate, wantPhase: v1alpha1.PhaseEscalating,
			wantMessage: "could not be used within 5m0s", wantWarning: EventBMCNotReady,
			wantCondition: v1alpha1.ConditionBMCReady, wantReason: v1alpha1.ReasonBMCNotFound, wantStatus: metav1.ConditionFalse}),
	)

	// A node lease held by someone else (node-maintenance, here for an hour) is waited for --lease-duration
	// (10m) from when it was first found held: then the request fails, Succeeded=False, with the holder in
	// the condition and a warning event, so that the health check may escalate. Nothing was done meanwhile.
	It("lease held by another past its bound", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-9", nil)
		takeLease(ctx, w, node, "node-maintenance", time.Hour)
		key := w.remediation(ctx, node, spec(reboot, 3), map[string]string{v1alpha1.AnnotationNodeName: node})

		steps := w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool {
			return terminal(s[len(s)-1].phase) || s[len(s)-1].at.Sub(epoch) > time.Hour
		})

		last := steps[len(steps)-1]
		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePending, v1alpha1.PhaseFailed}))
		Expect(last.at.Sub(epoch)).To(Equal(DefaultLeaseDuration), "the wait ends at its bound")
		for _, s := range steps[:len(steps)-1] {
			Expect(s.result.RequeueAfter).To(BeNumerically("<=", 2*time.Minute), "looks again at least every retryBackoff.max")
		}
		p := w.get(ctx, key)
		for _, c := range []string{v1alpha1.ConditionSucceeded, v1alpha1.ConditionProcessing, v1alpha1.ConditionLeaseAcquired} {
			Expect(conditionOf(p, c)).To(MatchFields(v1alpha1.ReasonLeaseHeldByOther, metav1.ConditionFalse), c)
		}
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded).Message).To(And(ContainSubstring("node-maintenance"), ContainSubstring("10m0s")))
		Expect(w.countEvents("Warning " + EventNodeLeaseHeld)).To(Equal(1))
		Expect(w.events).To(ContainElement(And(HavePrefix("Warning "+EventRemediationFailed+" "), ContainSubstring("node-maintenance"))))
		Expect(hosts.Driver(fakeAddress(node)).Calls()).To(BeEmpty())
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(*w.lease(ctx, node).Spec.HolderIdentity).To(Equal("node-maintenance"), "the holder keeps it")
		Expect(p.Status.Attempts).To(BeEmpty())

		steps = w.drive(ctx, key, same(w.reconciler()), nil, func([]step) bool { return true })
		Expect(steps[0].result.RequeueAfter).To(BeZero(), "a request that gave up waits for nothing")
	})

	// A finished power-off's lease lives exactly as long as the request: renewed while the request lives
	// (timed out too: a request that handed its fenced host over keeps it held for the next remediation of the
	// node, which takes the lease over), and renewed by nothing once the request is deleted.
	DescribeTable("finished power-off's lease lives with the request", func(ctx SpecContext, timedOutFirst bool) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-4", nil)
		key := w.remediation(ctx, node, spec(powerOff, 1), map[string]string{v1alpha1.AnnotationNodeName: node})
		r := w.reconciler()
		w.drive(ctx, key, same(r), nil, untilPhase(v1alpha1.PhaseSucceeded))
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off"}))

		// reconcileFor reconciles as requeues, and lease and node events, would, for three lease
		// durations.
		reconcileFor := func() time.Time {
			from := w.clock.Now()
			for w.clock.Now().Sub(from) <= 3*DefaultLeaseDuration {
				res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
				Expect(err).NotTo(HaveOccurred())
				next := time.Minute
				if res.RequeueAfter > 0 {
					next = min(next, res.RequeueAfter)
				}
				w.clock.Step(next)
			}
			return from
		}
		heldByTheRequest := func(why string) {
			l := w.lease(ctx, node)
			Expect(l).NotTo(BeNil(), why)
			Expect(*l.Spec.HolderIdentity).To(Equal(leases.HolderIdentity(remediationKind, node)), why)
			_, valid := leases.ValidUntil(l, w.clock.Now())
			Expect(valid).To(BeTrue(), why)
		}

		reconcileFor()
		heldByTheRequest("held while the request lives")
		if timedOutFirst {
			p := w.get(ctx, key)
			p.Annotations[v1alpha1.AnnotationTimedOut] = w.clock.Now().Format(time.RFC3339)
			w.must(w.c.Update(ctx, p))
			reconcileFor()
			heldByTheRequest("a timed-out request that handed its fenced host over keeps it held while it lives")
		}

		w.must(w.c.Delete(ctx, w.get(ctx, key)))
		endedAt := reconcileFor()
		if l := w.lease(ctx, node); l != nil {
			Expect(l.Spec.RenewTime.Time).NotTo(BeTemporally(">", endedAt), "nothing renewed the lease after the request ended")
			_, valid := leases.ValidUntil(l, w.clock.Now())
			Expect(valid).To(BeFalse(), "ran out")
		}
		err := w.c.Get(ctx, key, &v1alpha1.PowerCycleRemediation{})
		Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
	},
		Entry("the request is deleted", false),
		Entry("the health check times the request out, then deletes it", true),
	)

	// A power request that the BMC took but whose answer was lost (a timeout, a dropped connection: the
	// Redfish mock carries the reset out, then withholds or drops its answer; its transitions take 8s) stays
	// recorded: the host is given the time the transition takes, and exactly one power-off (and one
	// power-on) reaches the mock over the attempt.
	type ambiguousPowerAnswerCase struct {
		how  redfishmock.LostAnswer
		lose string // the ResetType whose answer is lost

	}
	DescribeTable("ambiguous power answer", func(ctx SpecContext, tc ambiguousPowerAnswerCase) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey]).WithPowerDelay(8 * time.Second)
		})
		// A withheld answer costs the test this much real time: the BMC call's own bound.
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.BMCCallTimeout = time.Second }
		node := w.node(ctx, "worker-2", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), credentials)
		if tc.lose == "ForceOff" {
			Expect(m.LoseResetAnswers("1", 1, tc.how)).To(Succeed())
		}
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		armed := tc.lose == "ForceOff"
		var offPostsInAttempt int
		react := func(p *v1alpha1.PowerCycleRemediation) {
			if !armed && slices.Equal(must(m.Resets("1")), []string{"ForceOff"}) {
				Expect(m.LoseResetAnswers("1", 1, tc.how)).To(Succeed()) // the power-on's answer goes next
				armed = true
			}
			if p.Status.Phase == v1alpha1.PhasePoweringOff {
				offPostsInAttempt = resetPosts(m, "1")
			}
			if state, _ := m.PowerState("1"); state == redfishmock.PowerOn {
				w.kubeletOnPowerOn(ctx, node, always)(p)
			}
		}
		steps := w.drive(ctx, key, same(w.reconciler()), react, untilSettled)

		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePoweringOff,
			v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseSucceeded}), "one attempt, no retry")
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}), "one power-off and one power-on were carried out")
		Expect(resetPosts(m, "1")).To(Equal(2), "and no other reached the mock")
		Expect(offPostsInAttempt).To(Equal(1), "one power-off while powering off")
		p := w.get(ctx, key)
		Expect(p.Status.Attempts).To(HaveLen(1))
		Expect(w.countEvents("Warning "+EventBMCNotReady)).To(Equal(1), "the lost answer is reported")
	},
		Entry("power-off timed out after the BMC took it", ambiguousPowerAnswerCase{how: redfishmock.AnswerWithheld, lose: "ForceOff"}),
		Entry("power-off's connection dropped after the BMC took it", ambiguousPowerAnswerCase{how: redfishmock.AnswerDropped, lose: "ForceOff"}),
		Entry("power-on timed out after the BMC took it", ambiguousPowerAnswerCase{how: redfishmock.AnswerWithheld, lose: "On"}),
		Entry("power-on's connection dropped after the BMC took it", ambiguousPowerAnswerCase{how: redfishmock.AnswerDropped, lose: "On"}),
	)

	// A power-on the BMC answered with a timeout and did not carry out (the fake host stays off): it stays
	// recorded, and is sent again only once the BMC had the time a transition takes (powerOffTimeoutSeconds,
	// 60s here) and the host still reads Off, not at the next poll.
	It("unanswered power-on waits for a transition", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-5", nil)
		host := hosts.Driver(fakeAddress(node))
		host.FailNext(bmc.OperationPowerOn, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerOn, Kind: bmc.ErrTimeout,
			Err: context.DeadlineExceeded})
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		var onAt []time.Time // when each power-on went out, by the world's clock
		react := func(p *v1alpha1.PowerCycleRemediation) {
			if n := host.CallCount(bmc.OperationPowerOn); n > len(onAt) {
				onAt = append(onAt, w.clock.Now())
			}
			w.kubeletOnPowerOn(ctx, node, always)(p)
		}
		w.drive(ctx, key, same(w.reconciler()), react, untilSettled)

		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(w.get(ctx, key).Status.Attempts).To(HaveLen(1))
		Expect(powerOps(host)).To(Equal([]string{"Off", "On", "On"}))
		Expect(onAt).To(HaveLen(2))
		Expect(onAt[1].Sub(onAt[0])).To(And(BeNumerically(">=", time.Minute), BeNumerically("<", time.Minute+5*time.Second)),
			"sent again once a transition's time passed with the host still off")
	})

	// A BMC (or whoever answers for it) can say anything in an error: a Redfish error message of 64 KiB, an
	// ipmitool output, an Ironic error body. The remediation's events quote BMC errors; each event's note must
	// stay within what events.k8s.io accepts (1024 bytes: a longer one is refused, and the event lost), while
	// the warning is still emitted and names the node.
	It("huge BMC error makes bounded events", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-9", nil)
		host := hosts.Driver(fakeAddress(node))
		huge := strings.Repeat("The BMC's error body goes on. ", 2200) // 66,000 bytes
		host.FailAlways(bmc.OperationPowerOff, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerOff, Kind: bmc.ErrUnreachable,
			Err: errors.New(huge)})
		key := w.nhcRemediation(ctx, node, spec(escalate, 1))

		w.drive(ctx, key, same(w.reconciler()), nil, untilSettled)

		evs := w.drainEvents()
		Expect(evs).To(ContainElement(HavePrefix("Warning "+EventBMCNotReady+" Node "+node)), "the BMC's failure is reported")
		for _, e := range evs {
			kind, rest, _ := strings.Cut(e, " ")
			_, note, _ := strings.Cut(rest, " ")
			Expect(len(note)).To(BeNumerically("<=", 1024), "%s event note of %d bytes: %.200s...", kind, len(note), note)
		}
	})
})

// namespace creates a namespace of the scenario's own, besides the world's (the manager's).
func (w *world) namespace(ctx context.Context, name string) string {
	GinkgoHelper()
	name = fmt.Sprintf("%s-%s", name, strings.TrimSuffix(w.prefix, "-"))
	w.must(w.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

// countEvents counts the recorded events with the prefix "<type> <reason>".
func (w *world) countEvents(prefix string) int {
	n := 0
	for _, e := range w.drainEvents() {
		if strings.HasPrefix(e, prefix+" ") {
			n++
		}
	}
	return n
}

// resetPosts counts the reset requests that reached a mock system, answered or not.
func resetPosts(m *redfishmock.Mock, id string) int {
	n := 0
	for _, r := range m.Requests() {
		if r.System == id && r.Method == "POST" && strings.HasSuffix(r.Path, "/Actions/ComputerSystem.Reset") {
			n++
		}
	}
	return n
}

// must drops a nil error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
