package powercycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/leases"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The one-hand-per-host scenarios (issue 23, finding 2): several requests of one Node, as a health
// check's escalation makes them, against the suite's API server and the Redfish mock on a fake clock,
// calling Reconcile directly.
var _ = Describe("Hand-over", func() {
	// medik8s NodeHealthCheck with escalatingRemediations of two of our templates (escalate with 1 retry,
	// then power-off) on a host that never comes back. Step 1 ends Succeeded=False with its host off and
	// fenced; the check marks it timed out and creates step 2 (another name, strategy power-off) at once.
	// Step 1 hands the host over as it is and step 2 fences it without a second power request: no power-on
	// after step 1's fence, the out-of-service taint on the Node from the first confirmed power-off to the
	// end, step 2 Succeeded=True/Fenced, step 1 Processing=False/HandedOver. The node lease changes hands
	// from step 1 to step 2 in one update (or stays with the check that holds it for both). When both are
	// deleted together, exactly one restores: no power-on (power-off is the strategy of the newest), the
	// taints and the annotation removed by one Node update, the lease released; both finalizers go, in
	// either order of reconciles.
	type escalationOverlapCase struct {
		// byCheck: the health check holds the node lease for its requests (as medik8s' does); otherwise
		// step 1 takes it, and step 2 takes it over.
		byCheck bool
		// stepTwoFirst: step 2 is reconciled before step 1 hears of its time-out.
		stepTwoFirst bool
		// newestFirst: after the deletion, the newest (step 2) is reconciled first.
		newestFirst bool
	}
	DescribeTable("escalation overlap", func(ctx SpecContext, tc escalationOverlapCase) {
		w, m, node := oneMockHost(ctx, func(m *redfishmock.Mock) *redfishmock.Mock { return m.WithPowerDelay(3 * time.Second) })
		if tc.byCheck {
			takeLease(ctx, w, node, owningCheckHolder, 24*time.Hour)
		}
		r := w.reconciler()
		stepOne := w.stepRequest(ctx, node, node, spec(escalate, 1), tc.byCheck)

		// The out-of-service taint, once on, stays until both requests are gone.
		fencedSince := time.Time{}
		outOfService := func() {
			on := slices.Contains(w.taintKeys(ctx, node), v1alpha1.TaintOutOfService)
			if fencedSince.IsZero() && on {
				fencedSince = w.clock.Now()
			}
			Expect(fencedSince.IsZero() || on).To(BeTrue(), "the out-of-service taint stays from the first confirmed power-off")
		}
		w.drive(ctx, stepOne, same(r), func(p *v1alpha1.PowerCycleRemediation) {
			outOfService()
			w.kubeletOnPowerOn(ctx, node, never)(p)
		}, untilTerminal)
		p := w.get(ctx, stepOne)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonRetriesExhausted, metav1.ConditionFalse))
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOff))
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))
		Expect(fencedSince).NotTo(BeZero())
		Expect(fencedSince).To(BeTemporally("<=", p.Status.Attempts[0].PowerOnRequested.Time), "fenced by the first attempt already")
		fenced := []string{"ForceOff", "On", "ForceOff"} // a power cycle, then off for good
		Expect(m.Resets("1")).To(Equal(fenced))
		lease := w.lease(ctx, node)
		wantHolder := "PowerCycleRemediation-" + node
		if tc.byCheck {
			wantHolder = owningCheckHolder
		}
		Expect(holderOf(lease)).To(Equal(wantHolder))

		// The check escalates: step 1 is marked timed out and step 2 created in the same pass.
		w.markTimedOut(ctx, stepOne)
		stepTwo := w.stepRequest(ctx, node, node+"-power-off", spec(powerOff, 1), tc.byCheck)
		order := []client.ObjectKey{stepOne, stepTwo}
		if tc.stepTwoFirst {
			order = []client.ObjectKey{stepTwo, stepOne}
		}
		var holders []string
		observe := func() {
			outOfService()
			Expect(m.Resets("1")).To(Equal(fenced), "no power request after step 1's fence")
			l := w.lease(ctx, node)
			Expect(l).NotTo(BeNil(), "the node lease is never free")
			Expect(l.UID).To(Equal(lease.UID), "the same lease, changing hands in one update")
			holders = append(holders, holderOf(l))
		}
		w.together(ctx, r, order, observe, func() bool {
			return handedOver(w.get(ctx, stepOne)) && w.get(ctx, stepTwo).Status.Phase == v1alpha1.PhaseSucceeded
		})

		one, two := w.get(ctx, stepOne), w.get(ctx, stepTwo)
		Expect(conditionOf(two, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonFenced, metav1.ConditionTrue))
		Expect(conditionOf(one, v1alpha1.ConditionProcessing)).To(MatchFields(v1alpha1.ReasonHandedOver, metav1.ConditionFalse))
		Expect(conditionOf(one, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonRetriesExhausted, metav1.ConditionFalse))
		Expect(one.Finalizers).To(ContainElement(v1alpha1.FinalizerPowerCycle), "step 1 is done with the host, not with its node")
		Expect(two.Status.AppliedTaints).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService),
			"step 2 carries on with the taints step 1 added")
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOff))
		if tc.byCheck {
			Expect(slices.Compact(holders)).To(Equal([]string{owningCheckHolder}), "the check's lease is left alone")
		} else {
			Expect(slices.Compact(holders)).To(Or(
				Equal([]string{"PowerCycleRemediation-" + node, "PowerCycleRemediation-" + node + "-power-off"}),
				Equal([]string{"PowerCycleRemediation-" + node + "-power-off"})))
			Expect(w.lease(ctx, node).Spec.LeaseTransitions).To(HaveValue(Equal(int32(1))))
		}
		events := w.drainEvents()
		Expect(countEvents(events, "Normal HandedOver")).To(Equal(1))
		Expect(events).NotTo(ContainElement(HavePrefix("Normal CleanedUp")))

		// Time passes; the check keeps both while the node is unhealthy: nothing changes.
		w.together(ctx, r, order, observe, func() bool { return w.clock.Now().Sub(fencedSince) > 30*time.Minute })

		// The node is repaired (or given up on): the check deletes both at once.
		writer, writes := w.interceptedClient(interceptor.Funcs{})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client, o.LeaseClient = writer, writer }
		restorer := w.reconciler()
		w.drainEvents()
		w.must(w.c.Delete(ctx, w.get(ctx, stepOne)))
		w.must(w.c.Delete(ctx, w.get(ctx, stepTwo)))
		order = []client.ObjectKey{stepOne, stepTwo}
		if tc.newestFirst {
			order = []client.ObjectKey{stepTwo, stepOne}
		}
		w.together(ctx, restorer, order, func() {
			if w.exists(ctx, stepTwo) {
				outOfService() // the newest restores: until then, the node stays fenced
			}
			Expect(m.Resets("1")).To(Equal(fenced), "no power-on: the newest request's strategy is power-off")
		}, func() bool { return !w.exists(ctx, stepOne) && !w.exists(ctx, stepTwo) })

		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.getNode(ctx, node).Annotations).NotTo(HaveKey(v1alpha1.AnnotationAppliedTaints))
		Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOff))
		if tc.byCheck {
			Expect(holderOf(w.lease(ctx, node))).To(Equal(owningCheckHolder), "not ours to release")
		} else {
			Expect(w.lease(ctx, node)).To(BeNil(), "released")
		}
		Expect(writes.of("Node")).To(Equal(1), "one restorer: one Node update removes both taints")
		wantLeaseDeletes := 1
		if tc.byCheck {
			wantLeaseDeletes = 0
		}
		Expect(writes.all()["delete Lease"]).To(Equal(wantLeaseDeletes))
		events = w.drainEvents()
		Expect(events).To(ContainElement(And(HavePrefix("Normal CleanedUp"), ContainSubstring("deleted"))))
	},
		Entry("step 2 takes the lease over; step 1 reconciled first", escalationOverlapCase{newestFirst: true}),
		Entry("step 2 takes the lease over; step 2 reconciled first", escalationOverlapCase{stepTwoFirst: true}),
		Entry("the check holds the lease", escalationOverlapCase{byCheck: true, stepTwoFirst: true, newestFirst: true}),
		Entry("the check holds the lease; deletions in the other order", escalationOverlapCase{byCheck: true}),
	)

	// A request deleted while another live request of its Node exists hands the Node over: no power request,
	// the taints and the lease left for the other, which takes the lease over (the deleted request is gone).
	// The taints come off when the last request of the Node ends, and that one's strategy decides the power:
	// power-off leaves the host off, escalate powers it back on.
	type deletedWhileAnotherRemediatesCase struct {
		// timedOut: step 1 is timed out (and hands over) before anything is deleted.
		timedOut bool
		// deleteFirst is the step deleted first (1 or 2), while the other lives; the other is deleted last.
		deleteFirst int
		wantResets  []string // after the last deletion
		wantPower   redfishmock.PowerState
	}
	DescribeTable("deleted while another remediates", func(ctx SpecContext, tc deletedWhileAnotherRemediatesCase) {
		w, m, node := oneMockHost(ctx, nil)
		r := w.reconciler()
		stepOne := w.stepRequest(ctx, node, node, spec(escalate, 1), false)
		w.drive(ctx, stepOne, same(r), w.kubeletOnPowerOn(ctx, node, never), untilTerminal)
		fenced := []string{"ForceOff", "On", "ForceOff"}
		Expect(m.Resets("1")).To(Equal(fenced))
		if tc.timedOut {
			w.markTimedOut(ctx, stepOne)
		}
		stepTwo := w.stepRequest(ctx, node, node+"-power-off", spec(powerOff, 1), false)
		keys := map[int]client.ObjectKey{1: stepOne, 2: stepTwo}
		first, last := keys[tc.deleteFirst], keys[3-tc.deleteFirst]

		if tc.deleteFirst == 1 {
			// Step 2 is created but has not been reconciled yet when step 1 goes.
			w.must(w.c.Delete(ctx, w.get(ctx, first)))
			w.drive(ctx, first, same(r), nil, untilSettled)
			Expect(m.Resets("1")).To(Equal(fenced), "no power-on: step 2 holds the node")
			Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService), "the taints stay")
			Expect(holderOf(w.lease(ctx, node))).To(Equal("PowerCycleRemediation-"+node), "the lease is left for step 2")
			Expect(w.drainEvents()).To(ContainElement(And(HavePrefix("Normal HandedOver"), ContainSubstring(stepTwo.Name))))
			// Step 2 takes the lease over from the request that is gone, and fences the host it finds off.
			w.drive(ctx, stepTwo, same(r), nil, untilTerminal)
			Expect(w.get(ctx, stepTwo).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
			Expect(holderOf(w.lease(ctx, node))).To(Equal("PowerCycleRemediation-" + stepTwo.Name))
		} else {
			w.together(ctx, r, []client.ObjectKey{stepOne, stepTwo}, nil, func() bool {
				return handedOver(w.get(ctx, stepOne)) && w.get(ctx, stepTwo).Status.Phase == v1alpha1.PhaseSucceeded
			})
			w.must(w.c.Delete(ctx, w.get(ctx, first)))
			w.drive(ctx, first, same(r), nil, untilSettled)
			Expect(m.Resets("1")).To(Equal(fenced), "nothing asked of the host")
			Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService), "the taints stay")
			Expect(holderOf(w.lease(ctx, node))).To(Equal("PowerCycleRemediation-"+stepTwo.Name), "the lease is left as it is")
			Expect(w.drainEvents()).To(ContainElement(And(HavePrefix("Normal HandedOver"), ContainSubstring(stepOne.Name))))
		}
		Expect(m.Resets("1")).To(Equal(fenced))
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))

		// The last request of the node goes: it restores, by its own strategy.
		w.must(w.c.Delete(ctx, w.get(ctx, last)))
		w.drive(ctx, last, same(r), nil, untilSettled)
		Expect(w.exists(ctx, last)).To(BeFalse())
		Expect(m.Resets("1")).To(Equal(tc.wantResets))
		Expect(m.PowerState("1")).To(Equal(tc.wantPower))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil(), "the lease taken over is released too")
		Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal CleanedUp")))
	},
		Entry("step 1 deleted (not timed out) while step 2 remediates", deletedWhileAnotherRemediatesCase{deleteFirst: 1,
			wantResets: []string{"ForceOff", "On", "ForceOff"}, wantPower: redfishmock.PowerOff,
		}),
		Entry("step 2 deleted while the timed-out step 1 remains", deletedWhileAnotherRemediatesCase{timedOut: true, deleteFirst: 2,
			wantResets: []string{"ForceOff", "On", "ForceOff", "On"}, wantPower: redfishmock.PowerOn,
		}),
	)

	// A request timed out while its power-off is on its way (the BMC accepted it, the host not off yet) waits
	// for the BMC to land it, fences the host once it reads Off, then hands it over: no power-on. Meanwhile
	// the next step, created at the time-out, does nothing (no lease, no BMC request) until the host is handed
	// over; then it takes the lease over and fences the host it finds off. A power-off that never lands is
	// waited for until the phase's timeout, and the host handed over unfenced (never fenced on a guess).
	type timedOutMidPowerOffCase struct {
		stuck        bool // the BMC accepts the power-off and never carries it out
		wantTaints   []string
		wantHandover time.Duration // from the power-off request
		wantPower    redfishmock.PowerState
	}
	DescribeTable("timed out mid power-off", func(ctx SpecContext, tc timedOutMidPowerOffCase) {
		w, m, node := oneMockHost(ctx, func(m *redfishmock.Mock) *redfishmock.Mock { return m.WithPowerDelay(20 * time.Second) })
		if tc.stuck {
			Expect(m.SetFaults("1", redfishmock.Faults{StuckPower: true})).To(Succeed())
		}
		r := w.reconciler()
		stepOne := w.stepRequest(ctx, node, node, spec(reboot, 3), false)
		w.drive(ctx, stepOne, same(r), nil, func(s []step) bool {
			return s[len(s)-1].phase == v1alpha1.PhasePoweringOff && w.get(ctx, stepOne).Status.PowerRequest != nil
		})
		requested := w.get(ctx, stepOne).Status.PowerRequest.Time.Time
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}))
		Expect(m.PowerState("1")).NotTo(Equal(redfishmock.PowerOff), "not off yet")

		w.markTimedOut(ctx, stepOne)
		stepTwo := w.stepRequest(ctx, node, node+"-power-off", spec(powerOff, 1), false)
		var handedOverAt time.Time
		w.together(ctx, r, []client.ObjectKey{stepOne, stepTwo}, func() {
			if handedOverAt.IsZero() && handedOver(w.get(ctx, stepOne)) {
				handedOverAt = w.clock.Now()
			}
			if handedOverAt.IsZero() {
				Expect(w.get(ctx, stepTwo).Status.Phase).To(BeEmpty(), "step 2 waits for step 1 to hand over")
				Expect(holderOf(w.lease(ctx, node))).To(Equal("PowerCycleRemediation-"+node), "and takes no lease")
			}
			Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}), "one power-off, no power-on")
		}, func() bool { return !handedOverAt.IsZero() })

		Expect(handedOverAt.Sub(requested)).To(BeNumerically("~", tc.wantHandover, 5*time.Second))
		p := w.get(ctx, stepOne)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonTimedOut, metav1.ConditionFalse))
		Expect(conditionOf(p, v1alpha1.ConditionProcessing)).To(MatchFields(v1alpha1.ReasonHandedOver, metav1.ConditionFalse))
		Expect(m.PowerState("1")).To(Equal(tc.wantPower))
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(tc.wantTaints))
		if tc.stuck {
			Expect(conditionOf(p, v1alpha1.ConditionProcessing).Message).To(ContainSubstring("was not confirmed"))
			Expect(p.Status.Attempts[0].PoweredOff).To(BeNil())
		} else {
			Expect(p.Status.Attempts[0].PoweredOff).NotTo(BeNil())
		}
		Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal HandedOver")))

		// Step 2 goes on: it takes the lease over and powers off a host that is not off yet.
		m.ClearFaults()
		w.together(ctx, r, []client.ObjectKey{stepOne, stepTwo}, nil, func() bool {
			return terminal(w.get(ctx, stepTwo).Status.Phase)
		})
		Expect(conditionOf(w.get(ctx, stepTwo), v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonFenced, metav1.ConditionTrue))
		Expect(holderOf(w.lease(ctx, node))).To(Equal("PowerCycleRemediation-" + stepTwo.Name))
		Expect(w.taintKeys(ctx, node)).To(ConsistOf(v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService))
		Expect(m.Resets("1")).NotTo(ContainElement("On"))
	},
		Entry("the power-off lands", timedOutMidPowerOffCase{wantTaints: []string{v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService},
			wantHandover: 20 * time.Second, wantPower: redfishmock.PowerOff,
		}),
		Entry("the power-off never lands", timedOutMidPowerOffCase{stuck: true, wantTaints: []string{v1alpha1.TaintRemediation},
			wantHandover: time.Minute, wantPower: redfishmock.PowerOn,
		}),
	)

	// An administrator's out-of-service taint, on the Node before any remediation, is never counted as
	// metalheal's: not by the first request, not by the next one that carries on from it, and it stays when
	// the last request restores the Node.
	It("admin's out-of-service taint stays", func(ctx SpecContext) {
		w, m, node := oneMockHost(ctx, nil)
		n := w.getNode(ctx, node)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "admin", Effect: corev1.TaintEffectNoExecute})
		w.must(w.c.Update(ctx, n))
		r := w.reconciler()
		stepOne := w.stepRequest(ctx, node, node, spec(escalate, 1), false)
		w.drive(ctx, stepOne, same(r), w.kubeletOnPowerOn(ctx, node, never), untilTerminal)
		w.markTimedOut(ctx, stepOne)
		stepTwo := w.stepRequest(ctx, node, node+"-power-off", spec(powerOff, 1), false)
		w.together(ctx, r, []client.ObjectKey{stepOne, stepTwo}, nil, func() bool {
			return handedOver(w.get(ctx, stepOne)) && w.get(ctx, stepTwo).Status.Phase == v1alpha1.PhaseSucceeded
		})
		Expect(w.get(ctx, stepOne).Status.AppliedTaints).To(ConsistOf(v1alpha1.TaintRemediation))
		Expect(w.get(ctx, stepTwo).Status.AppliedTaints).To(ConsistOf(v1alpha1.TaintRemediation))
		Expect(w.getNode(ctx, node).Annotations).NotTo(HaveKey(v1alpha1.AnnotationAppliedTaints), "the record is in the requests' status, not on the Node")

		w.must(w.c.Delete(ctx, w.get(ctx, stepOne)))
		w.must(w.c.Delete(ctx, w.get(ctx, stepTwo)))
		w.together(ctx, r, []client.ObjectKey{stepTwo, stepOne}, nil, func() bool { return !w.exists(ctx, stepOne) && !w.exists(ctx, stepTwo) })
		Expect(w.taintKeys(ctx, node)).To(Equal([]string{v1alpha1.TaintOutOfService}), "the administrator's taint stays")
		Expect(w.getNode(ctx, node).Spec.Taints).To(ContainElement(HaveField("Value", "admin")))
		Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On", "ForceOff"}))
	})

	// The remediator's watch of PowerCycleRemediations maps a request to the other requests of its node (read
	// from the cache's node index), for the changes they decide by: its deletion, its time-out mark, its
	// finalizer going, its Processing condition turning False, or its being gone. Other changes map to none.
	It("siblings enqueue each other", func(ctx SpecContext) {
		w, _ := fakeHosts(ctx)
		node, other := w.node(ctx, "worker", nil), w.node(ctx, "other", nil)
		cached := w.indexedClient(ctx)
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client = cached }
		r := w.reconciler()
		one := w.get(ctx, w.stepRequest(ctx, node, node, spec(escalate, 1), false))
		two := w.get(ctx, w.stepRequest(ctx, node, node+"-power-off", spec(powerOff, 1), false))
		elsewhere := w.get(ctx, w.stepRequest(ctx, other, other, spec(reboot, 3), false))
		request := func(p *v1alpha1.PowerCycleRemediation) reconcile.Request {
			return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}}
		}
		Eventually(func() []reconcile.Request { return r.claim.remediationsBesides(ctx, one) }).
			WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(ConsistOf(request(two)))
		Expect(r.claim.remediationsBesides(ctx, two)).To(ConsistOf(request(one)))
		Expect(r.claim.remediationsBesides(ctx, elsewhere)).To(BeEmpty())

		withFinalizer := one.DeepCopy()
		withFinalizer.Finalizers = []string{v1alpha1.FinalizerPowerCycle}
		working := withFinalizer.DeepCopy()
		working.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProcessing, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPoweringOff}}
		change := func(edit func(p *v1alpha1.PowerCycleRemediation)) *v1alpha1.PowerCycleRemediation {
			p := working.DeepCopy()
			edit(p)
			return p
		}
		pred := handOverChangePredicate()
		for name, tc := range map[string]struct {
			old, new *v1alpha1.PowerCycleRemediation
			want     bool
		}{
			"deleted": {working, change(func(p *v1alpha1.PowerCycleRemediation) { p.DeletionTimestamp = new(metav1.NewTime(epoch)) }), true},
			"marked timed out": {working, change(func(p *v1alpha1.PowerCycleRemediation) {
				p.Annotations = map[string]string{v1alpha1.AnnotationTimedOut: epoch.Format(time.RFC3339)}
			}), true},
			"finalizer gone": {working, change(func(p *v1alpha1.PowerCycleRemediation) { p.Finalizers = nil }), true},
			"handed over": {working, change(func(p *v1alpha1.PowerCycleRemediation) {
				p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProcessing, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonHandedOver}}
			}), true},
			"a phase of its own": {working, change(func(p *v1alpha1.PowerCycleRemediation) {
				p.Status.Phase = v1alpha1.PhasePoweredOff
				p.Status.PowerState = v1alpha1.PowerOff
				p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProcessing, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonFenced}}
			}), false},
		} {
			Expect(pred.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new})).To(Equal(tc.want), name)
		}
		Expect(pred.Delete(event.DeleteEvent{Object: working})).To(BeTrue(), "gone")
		Expect(pred.Create(event.CreateEvent{Object: working})).To(BeFalse(), "a new request changes nothing for the others")
	})
})

// oneMockHost is a world with one Redfish mock system ("1") on the world's clock, and its node.
func oneMockHost(ctx context.Context, build func(*redfishmock.Mock) *redfishmock.Mock) (*world, *redfishmock.Mock, string) {
	w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
		m = m.WithSystems(1).WithCredentials(credentials[bmc.UsernameKey], credentials[bmc.PasswordKey])
		if build != nil {
			m = build(m)
		}
		return m
	})
	node := w.node(ctx, "worker", nil)
	w.bmc(ctx, node, mockAddress(m, "1"), credentials)
	return w, m, node
}

// step requests a Node's escalation makes: the first is named after the node, the later ones after the
// node and their template (rule 4 of the hand-over rules), all annotated with the node. byCheck: owned by
// a NodeHealthCheck (which then holds the node lease for them), else by the Node only.
func (w *world) stepRequest(ctx context.Context, node, name string, s v1alpha1.PowerCycleRemediationSpec, byCheck bool) client.ObjectKey {
	GinkgoHelper()
	n := w.getNode(ctx, node)
	owners := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}}
	if byCheck {
		owners = append(owners, metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeHealthCheck",
			Name: "workers", UID: "4a1b5e0e-0000-4000-8000-000000000001"})
	}
	return w.remediation(ctx, name, s, map[string]string{v1alpha1.AnnotationNodeName: node}, owners...)
}

// markTimedOut marks the request timed out, as a health check does when it escalates.
func (w *world) markTimedOut(ctx context.Context, key client.ObjectKey) {
	GinkgoHelper()
	p := w.get(ctx, key)
	p.Annotations[v1alpha1.AnnotationTimedOut] = w.clock.Now().Format(time.RFC3339)
	w.must(w.c.Update(ctx, p))
}

// exists reports whether the request is still there.
func (w *world) exists(ctx context.Context, key client.ObjectKey) bool {
	GinkgoHelper()
	err := w.c.Get(ctx, key, &v1alpha1.PowerCycleRemediation{})
	if apierrors.IsNotFound(err) {
		return false
	}
	w.must(err)
	return true
}

// together reconciles the requests in turn, in the order given, as the manager's queue does once a change
// of one enqueues the others; check runs after every reconcile. The clock then moves on by the shortest
// requeue (a request that is gone asks for none), a minute at most: a health check renews the leases it
// holds meanwhile. It stops when until says so, and fails the test after maxRounds rounds.
func (w *world) together(ctx context.Context, r *RemediationReconciler, keys []client.ObjectKey, check func(), until func() bool) {
	GinkgoHelper()
	const maxRounds = 400
	for range maxRounds {
		var wait time.Duration
		for _, key := range keys {
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			if err != nil {
				Fail(fmt.Sprintf("reconciling %s (at +%s): %v", key, w.clock.Now().Sub(epoch), err))
			}
			if check != nil {
				check()
			}
			if res.RequeueAfter > 0 && (wait == 0 || res.RequeueAfter < wait) {
				wait = res.RequeueAfter
			}
			if until() {
				return
			}
		}
		w.clock.Step(min(max(wait, time.Second), time.Minute))
	}
	Fail(fmt.Sprintf("%v did not get there in %d rounds", keys, maxRounds))
}

// holderOf is the lease's holder identity.
func holderOf(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// countEvents counts the recorded events that start with prefix.
func countEvents(events []string, prefix string) int {
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// The decisions of one hand per host, from the requests of a node alone.
func TestHandOverDecisions(t *testing.T) {
	at := func(sec int) metav1.Time { return metav1.NewTime(epoch.Add(time.Duration(sec) * time.Second)) }
	request := func(name string, created int, edits ...func(*v1alpha1.PowerCycleRemediation)) v1alpha1.PowerCycleRemediation {
		p := v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name),
			CreationTimestamp: at(created), Finalizers: []string{v1alpha1.FinalizerPowerCycle}}}
		for _, e := range edits {
			e(&p)
		}
		return p
	}
	deleted := func(p *v1alpha1.PowerCycleRemediation) { p.DeletionTimestamp = new(at(100)) }
	released := func(p *v1alpha1.PowerCycleRemediation) { p.Finalizers = nil }
	timedOut := func(p *v1alpha1.PowerCycleRemediation) {
		p.Annotations = map[string]string{v1alpha1.AnnotationTimedOut: epoch.Format(time.RFC3339)}
	}
	processing := func(status metav1.ConditionStatus, reason string) func(*v1alpha1.PowerCycleRemediation) {
		return func(p *v1alpha1.PowerCycleRemediation) {
			p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProcessing, Status: status, Reason: reason}}
		}
	}
	type sibs = []v1alpha1.PowerCycleRemediation

	t.Run("onDeletion", func(t *testing.T) {
		self := request("b", 10, deleted)
		for _, tc := range []struct {
			name     string
			self     v1alpha1.PowerCycleRemediation
			siblings sibs
			want     releaseAction
			wantWho  string
		}{
			{name: "alone: restore", self: self, want: releaseRestore},
			{name: "a live sibling: hand over", self: self, siblings: sibs{request("a", 5)}, want: releaseHandOver, wantWho: "a"},
			{name: "a timed-out sibling is live too", self: self, siblings: sibs{request("a", 5, timedOut)}, want: releaseHandOver, wantWho: "a"},
			{name: "a sibling not started yet takes it", self: self, siblings: sibs{request("a", 5, released)}, want: releaseHandOver, wantWho: "a"},
			{name: "a sibling timed out before it started holds nothing", self: self, siblings: sibs{request("c", 20, timedOut, released)}, want: releaseRestore},
			{name: "an older one deleted too: restore", self: self, siblings: sibs{request("a", 5, deleted)}, want: releaseRestore},
			{name: "a newer one deleted too: wait for it", self: self, siblings: sibs{request("c", 20, deleted)}, want: releaseAwait, wantWho: "c"},
			{name: "same second: the name decides", self: self, siblings: sibs{request("c", 10, deleted)}, want: releaseAwait, wantWho: "c"},
			{name: "same second, earlier name: restore", self: request("c", 10, deleted), siblings: sibs{request("b", 10, deleted)}, want: releaseRestore},
			{name: "the newer one let go already: restore what is left", self: self, siblings: sibs{request("c", 20, deleted, released)}, want: releaseRestore},
			{name: "a live one wins over a newer deleted one", self: self, siblings: sibs{request("c", 20, deleted), request("a", 5)}, want: releaseHandOver, wantWho: "a"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				got, who := onDeletion(&tc.self, tc.siblings)
				g.Expect(got).To(Equal(tc.want))
				if tc.wantWho == "" {
					g.Expect(who).To(BeNil())
				} else {
					g.Expect(who.Name).To(Equal(tc.wantWho))
				}
			})
		}
	})

	t.Run("busySibling", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			siblings sibs
			want     string
		}{
			{name: "none"},
			{name: "a sibling at work: the lease keeps them apart", siblings: sibs{request("a", 5, processing(metav1.ConditionTrue, v1alpha1.ReasonPoweringOff))}},
			{name: "timed out, landing its power-off", siblings: sibs{request("a", 5, timedOut, processing(metav1.ConditionTrue, v1alpha1.ReasonPoweringOff))}, want: "a"},
			{name: "timed out, handed over", siblings: sibs{request("a", 5, timedOut, processing(metav1.ConditionFalse, v1alpha1.ReasonHandedOver))}},
			{name: "timed out when it had ended already", siblings: sibs{request("a", 5, timedOut, processing(metav1.ConditionFalse, v1alpha1.ReasonRetriesExhausted))}},
			{name: "deleted, letting go", siblings: sibs{request("a", 5, deleted)}, want: "a"},
			{name: "deleted, let go", siblings: sibs{request("a", 5, deleted, released)}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				got := busySibling(tc.siblings)
				if tc.want == "" {
					g.Expect(got).To(BeNil())
				} else {
					g.Expect(got.Name).To(Equal(tc.want))
				}
			})
		}
	})

	t.Run("takeOverFrom", func(t *testing.T) {
		self := request("b", 10)
		// known says which requests exist besides self, as "namespace/name".
		known := func(names ...string) func(string, string) bool {
			return func(n, ns string) bool {
				return slices.ContainsFunc(names, func(k string) bool {
					kns, kn, _ := strings.Cut(k, "/")
					return kn == n && (ns == "" || kns == ns)
				})
			}
		}
		in := func(ns string, p v1alpha1.PowerCycleRemediation) v1alpha1.PowerCycleRemediation {
			p.Namespace = ns
			return p
		}
		holder := func(identity, ns string) leases.Holder { return leases.Holder{Identity: identity, Namespace: ns} }
		for _, tc := range []struct {
			name     string
			holder   leases.Holder
			siblings sibs
			known    func(string, string) bool
			want     bool
		}{
			{name: "a sibling timed out", holder: holder("PowerCycleRemediation-a", "ns"), siblings: sibs{request("a", 5, timedOut)}, known: known("ns/a"), want: true},
			{name: "a sibling being deleted", holder: holder("PowerCycleRemediation-a", "ns"), siblings: sibs{request("a", 5, deleted)}, known: known("ns/a"), want: true},
			{name: "a sibling at work", holder: holder("PowerCycleRemediation-a", "ns"), siblings: sibs{request("a", 5)}, known: known("ns/a")},
			{name: "a request that is gone", holder: holder("PowerCycleRemediation-a", "ns"), known: known(), want: true},
			{name: "a request of that name elsewhere", holder: holder("PowerCycleRemediation-a", "ns"), known: known("ns/a")},
			{name: "node-maintenance", holder: holder("node-maintenance", ""), known: known(), want: false},
			{name: "its health check", holder: holder(owningCheckHolder, ""), known: known(), want: false},
			{name: "itself", holder: holder("PowerCycleRemediation-b", "ns"), known: known()},
			{name: "its namesake in another namespace, at work", holder: holder("PowerCycleRemediation-b", "other"),
				siblings: sibs{in("other", request("b", 5))}, known: known("other/b")},
			{name: "its namesake in another namespace, timed out", holder: holder("PowerCycleRemediation-b", "other"),
				siblings: sibs{in("other", request("b", 5, timedOut))}, known: known("other/b"), want: true},
			{name: "a timed-out sibling's namesake holds it, at work elsewhere", holder: holder("PowerCycleRemediation-a", "other"),
				siblings: sibs{request("a", 5, timedOut)}, known: known("ns/a", "other/a")},
			{name: "a lease of its own name recording no namespace (an earlier version's), no namesake", holder: holder("PowerCycleRemediation-b", ""),
				known: known(), want: true},
			{name: "a lease of its own name recording no namespace, a namesake at work", holder: holder("PowerCycleRemediation-b", ""),
				siblings: sibs{in("other", request("b", 5))}, known: known("other/b")},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(takeOverFrom(tc.holder, &self, tc.siblings, tc.known)).To(Equal(tc.want))
			})
		}
	})

}
