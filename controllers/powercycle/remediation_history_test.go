package powercycle

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/controllers/powercycle/bmcinventory"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// Every request of a host leaves one record of its remediation on the host's BMC
// (status.recentRemediations) when it lets go of the host, saying how it ended; the BMC keeps the last 10;
// and the BMC inventory, the status's other writer, neither loses a record nor has its own fields lost.
var _ = Describe("Remediation history", func() {
	// A remediation that succeeds (a manager restarted before every reconcile, so that nothing but the API
	// server carries the record): nothing is recorded while the request holds the host; once its check
	// deletes it, one record says who asked, when, the power cycle and how it ended, and holds no secret.
	It("a remediation that succeeded", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-1", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		w.drive(ctx, key, w.reconciler, w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		done := w.get(ctx, key)
		Expect(done.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(w.records(ctx, node)).To(BeEmpty(), "recorded when the request lets go of the host, not before")

		w.deleteAndDrive(ctx, key, w.reconciler)
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
		a := done.Status.Attempts[0]
		succeeded := conditionOf(done, v1alpha1.ConditionSucceeded)
		Expect(w.records(ctx, node)).To(Equal([]v1alpha1.RemediationRecord{{
			Kind: "PowerCycleRemediation", Namespace: w.ns, Name: key.Name, UID: done.UID,
			HealthCheck: &v1alpha1.HealthCheckReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeHealthCheck", Name: "workers"},
			NodeName:    node, Strategy: reboot,
			Started: done.CreationTimestamp, Finished: succeeded.LastTransitionTime,
			Result: v1alpha1.RemediationSucceeded, Reason: v1alpha1.ReasonNodeReady, Attempts: 1,
			PowerChanges: []v1alpha1.PowerChange{
				{Target: v1alpha1.PowerOff, Requested: a.Started, Confirmed: a.PoweredOff},
				{Target: v1alpha1.PowerOn, Requested: *a.PowerOnRequested, Confirmed: a.PoweredOn},
			},
			Message: succeeded.Message,
		}}))
		raw, err := json.Marshal(w.bmcObject(ctx, node).Status)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(raw)).NotTo(ContainSubstring(credentials[bmc.PasswordKey]))
		Expect(string(raw)).NotTo(ContainSubstring(credentials[bmc.UsernameKey]))
	})

	// A remediation that fails (escalate, the node never back: left powered off and fenced) is recorded
	// Failed when its request is deleted, with the clean-up's power-on among its power changes.
	It("a remediation that failed", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-2", nil)
		key := w.nhcRemediation(ctx, node, spec(escalate, 1))
		r := w.reconciler()

		w.drive(ctx, key, same(r), nil, untilSettled)
		failed := w.get(ctx, key)
		Expect(failed.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		w.deleteAndDrive(ctx, key, same(r))
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On", "Off", "On"}), "the escalation's power-off, then clean-up's power-on")

		recs := w.records(ctx, node)
		Expect(recs).To(HaveLen(1))
		rec := recs[0]
		Expect(rec.UID).To(Equal(failed.UID))
		Expect(rec.Result).To(Equal(v1alpha1.RemediationFailed))
		Expect(rec.Reason).To(Equal(v1alpha1.ReasonRetriesExhausted))
		Expect(rec.Message).To(Equal(conditionOf(failed, v1alpha1.ConditionSucceeded).Message))
		Expect(rec.Message).To(ContainSubstring("left powered off and fenced"))
		Expect(rec.Finished).To(Equal(conditionOf(failed, v1alpha1.ConditionSucceeded).LastTransitionTime))
		Expect(rec.Attempts).To(Equal(int32(1)))
		var targets []v1alpha1.PowerState
		for _, c := range rec.PowerChanges {
			targets = append(targets, c.Target)
			Expect(c.Confirmed).NotTo(BeNil(), "%s confirmed", c.Target)
		}
		Expect(targets).To(Equal([]v1alpha1.PowerState{v1alpha1.PowerOff, v1alpha1.PowerOn, v1alpha1.PowerOn}),
			"the attempt's power cycle and clean-up's power-on")
	})

	// A remediation cancelled by the deletion of its request while it waits for a node that is not back is
	// recorded Cancelled, at the end of its clean-up.
	It("cancelled by deletion", func(ctx SpecContext) {
		w, _ := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-3", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		r := w.reconciler()

		w.drive(ctx, key, same(r), nil, untilPhase(v1alpha1.PhaseWaitingForNode))
		w.deleteAndDrive(ctx, key, same(r))

		recs := w.records(ctx, node)
		Expect(recs).To(HaveLen(1))
		Expect(recs[0].Result).To(Equal(v1alpha1.RemediationCancelled))
		Expect(recs[0].Reason).To(Equal(v1alpha1.ReasonRemediationCancelled))
		Expect(recs[0].Message).To(Equal("The request was deleted in phase WaitingForNode, after 1 attempt(s)"))
		Expect(recs[0].Finished.Time).To(BeTemporally("==", w.clock.Now().Truncate(time.Second)), "when the clean-up was done")
		Expect(recs[0].PowerChanges).To(HaveLen(2))
	})

	// medik8s' NodeHealthCheck deletes its request the moment the node is Ready, before the remediator
	// reports Succeeded: a node Ready again after the power-on is a success all the same.
	It("deleted once the node is ready", func(ctx SpecContext) {
		w, _ := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-4", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		r := w.reconciler()

		w.drive(ctx, key, same(r), nil, untilPhase(v1alpha1.PhaseWaitingForNode))
		w.clock.Step(20 * time.Second)
		w.setReady(ctx, node, corev1.ConditionTrue)
		w.deleteAndDrive(ctx, key, same(r))

		recs := w.records(ctx, node)
		Expect(recs).To(HaveLen(1))
		Expect(recs[0].Result).To(Equal(v1alpha1.RemediationSucceeded))
		Expect(recs[0].Reason).To(Equal(v1alpha1.ReasonNodeReady))
		Expect(recs[0].Message).To(Equal("Node " + node + " was Ready again when its request was deleted, after 1 attempt(s)"))
	})

	// With 10 records on the BMC already, an 11th remediation drops the oldest: the newest is last.
	It("keeps the last 10", func(ctx SpecContext) {
		w, _ := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-5", nil)
		b := w.bmcObject(ctx, node)
		for i := range v1alpha1.MaxRecentRemediations {
			started := metav1.NewTime(epoch.Add(-time.Duration(24-i) * time.Hour))
			b.Status.RecentRemediations = append(b.Status.RecentRemediations, v1alpha1.RemediationRecord{
				Kind: "PowerCycleRemediation", Namespace: w.ns, Name: node, UID: types.UID("earlier-" + string(rune('a'+i))),
				NodeName: node, Started: started, Finished: metav1.NewTime(started.Add(time.Minute)), Result: v1alpha1.RemediationSucceeded})
		}
		w.must(w.c.Status().Update(ctx, b))

		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		r := w.reconciler()
		w.drive(ctx, key, same(r), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		uid := w.get(ctx, key).UID
		w.deleteAndDrive(ctx, key, same(r))

		recs := w.records(ctx, node)
		Expect(recs).To(HaveLen(v1alpha1.MaxRecentRemediations))
		Expect(recs[0].UID).To(Equal(types.UID("earlier-b")), "the oldest dropped")
		Expect(recs[len(recs)-1].UID).To(Equal(uid), "the newest last")
		Expect(recs[len(recs)-1].Result).To(Equal(v1alpha1.RemediationSucceeded))
	})

	// The BMC inventory writes the BMC's status between the remediator's read of the BMC and its write of the
	// record: the record's write is refused (it carries the resourceVersion it read), made again from the BMC
	// as it is now, and both the record and the inventory's check are there.
	It("inventory writes between read and patch", func(ctx SpecContext) {
		w, _ := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-6", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		inventory := w.inventory(w.c)
		var patches atomic.Int32
		c, _ := w.interceptedClient(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*v1alpha1.BMC); ok && patches.Add(1) == 1 {
					_, err := inventory.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
					Expect(err).NotTo(HaveOccurred())
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client = c }
		r := w.reconciler()
		w.drive(ctx, key, same(r), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		w.deleteAndDrive(ctx, key, same(r))

		Expect(patches.Load()).To(Equal(int32(2)), "refused once, then made again")
		b := w.bmcObject(ctx, node)
		Expect(b.Status.RecentRemediations).To(HaveLen(1))
		Expect(b.Status.RecentRemediations[0].Result).To(Equal(v1alpha1.RemediationSucceeded))
		Expect(meta.IsStatusConditionTrue(b.Status.Conditions, v1alpha1.ConditionReachable)).To(BeTrue(), "the inventory's check is kept")
		Expect(b.Status.LastChecked).NotTo(BeNil())
	})

	// The BMC inventory writes its check from a copy of the BMC older than the record (its cache lags): its
	// merge patch carries only its own fields, and the record stays.
	It("inventory writes from a stale copy", func(ctx SpecContext) {
		w, _ := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-7", nil)
		stale := w.bmcObject(ctx, node)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		r := w.reconciler()
		w.drive(ctx, key, same(r), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		w.deleteAndDrive(ctx, key, same(r))
		Expect(w.records(ctx, node)).To(HaveLen(1))

		lagging, _ := w.interceptedClient(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if b, ok := obj.(*v1alpha1.BMC); ok {
					stale.DeepCopyInto(b)
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
		_, err := w.inventory(lagging).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(stale)})
		Expect(err).NotTo(HaveOccurred())
		b := w.bmcObject(ctx, node)
		Expect(b.Status.LastChecked).NotTo(BeNil(), "the inventory wrote its check")
		Expect(b.Status.RecentRemediations).To(HaveLen(1), "and left the record alone")
	})

	// The manager's cache keeps no record (bmcaccess.SlimBMC): the remediator adds to the record as the API
	// server holds it, and erases none of it.
	It("cache without the record", func(ctx SpecContext) {
		w, _ := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-8", nil)
		b := w.bmcObject(ctx, node)
		for _, uid := range []types.UID{"earlier-a", "earlier-b"} {
			b.Status.RecentRemediations = append(b.Status.RecentRemediations, v1alpha1.RemediationRecord{
				Kind: "PowerCycleRemediation", Namespace: w.ns, Name: node, UID: uid, NodeName: node,
				Started: metav1.NewTime(epoch.Add(-time.Hour)), Finished: metav1.NewTime(epoch.Add(-time.Hour)), Result: v1alpha1.RemediationSucceeded})
		}
		w.must(w.c.Status().Update(ctx, b))
		slim, _ := w.interceptedClient(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if err := c.Get(ctx, key, obj, opts...); err != nil {
					return err
				}
				_, err := bmcaccess.SlimBMC(obj)
				return err
			},
		})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client, o.APIReader = slim, w.c }
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		r := w.reconciler()
		w.drive(ctx, key, same(r), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		w.deleteAndDrive(ctx, key, same(r))

		var uids []types.UID
		for _, rec := range w.records(ctx, node) {
			uids = append(uids, rec.UID)
		}
		Expect(uids).To(HaveLen(3))
		Expect(uids[:2]).To(Equal([]types.UID{"earlier-a", "earlier-b"}), "the earlier records are kept")
	})
})

// records reads the record of the node's host on its BMC (see world.bmc).
func (w *world) records(ctx context.Context, node string) []v1alpha1.RemediationRecord {
	GinkgoHelper()
	return w.bmcObject(ctx, node).Status.RecentRemediations
}

func (w *world) bmcObject(ctx context.Context, node string) *v1alpha1.BMC {
	GinkgoHelper()
	b := &v1alpha1.BMC{}
	w.must(w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: node + "-bmc"}, b))
	return b
}

// deleteAndDrive deletes the request and reconciles it until it is gone.
func (w *world) deleteAndDrive(ctx context.Context, key client.ObjectKey, next func() *RemediationReconciler) {
	GinkgoHelper()
	w.must(w.c.Delete(ctx, w.get(ctx, key)))
	steps := w.drive(ctx, key, next, nil, untilSettled)
	if !steps[len(steps)-1].gone {
		Fail(fmt.Sprintf("request %s is not gone after its deletion; phases: %v", key, phases(steps)))
	}
}

// inventory is the BMC inventory of the world's namespace, reading through c, checking the world's hosts.
func (w *world) inventory(c client.Client) *bmcinventory.Reconciler {
	return &bmcinventory.Reconciler{Client: c, Recorder: events.NewFakeRecorder(100), Clock: w.clock,
		Access: bmcaccess.New(w.api.cache, w.ns, w.registry, bmcaccess.Options{RequestTimeout: 5 * time.Second})}
}

// How a request's status reads as the record of its remediation, for the endings the scenarios above do
// not reach.
func TestRemediationRecord(t *testing.T) {
	at := func(s float64) metav1.Time { return metav1.NewTime(epoch.Add(time.Duration(s * float64(time.Second)))) }
	ptr := func(t metav1.Time) *metav1.Time { return &t }
	now := epoch.Add(time.Hour)
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string, t float64) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: at(t)}
	}
	cycled := v1alpha1.PowerCycleAttempt{Number: 1, Started: at(10), PoweredOff: ptr(at(15)), PowerOnRequested: ptr(at(16)), PoweredOn: ptr(at(20))}
	readyAt := func(t float64) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady,
			Status: corev1.ConditionTrue, LastTransitionTime: at(t), LastHeartbeatTime: at(t)}}}}
	}
	tests := map[string]struct {
		status      v1alpha1.PowerCycleRemediationStatus
		node        *corev1.Node
		how         letGoKind
		note        string
		wantResult  v1alpha1.RemediationResult
		wantReason  string
		wantMessage string
		wantAt      metav1.Time
		wantPower   []v1alpha1.PowerChange
	}{
		"timed out and handed over: why it was stopped, when": {
			status: v1alpha1.PowerCycleRemediationStatus{Phase: v1alpha1.PhaseFailed, Attempts: []v1alpha1.PowerCycleAttempt{cycled},
				Conditions: []metav1.Condition{
					cond(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonTimedOut, "Stopped", 30),
					cond(v1alpha1.ConditionProcessing, metav1.ConditionFalse, v1alpha1.ReasonHandedOver, "handed over as it is (power On)", 31)}},
			wantResult: v1alpha1.RemediationHandedOver, wantReason: v1alpha1.ReasonTimedOut,
			wantMessage: "handed over as it is (power On)", wantAt: at(31),
			wantPower: []v1alpha1.PowerChange{{Target: v1alpha1.PowerOff, Requested: at(10), Confirmed: ptr(at(15))},
				{Target: v1alpha1.PowerOn, Requested: at(16), Confirmed: ptr(at(20))}},
		},
		"deleted while another request remediates the node": {
			status: v1alpha1.PowerCycleRemediationStatus{Phase: v1alpha1.PhasePoweredOff,
				Attempts:   []v1alpha1.PowerCycleAttempt{{Number: 1, Started: at(10), PoweredOff: ptr(at(15))}},
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionProcessing, metav1.ConditionTrue, v1alpha1.ReasonFenced, "off", 15)}},
			how: letGoPassedOn, note: "Deleted while ns/other remediates node w: the node is left to it as it is",
			wantResult: v1alpha1.RemediationHandedOver, wantReason: v1alpha1.ReasonHandedOver,
			wantMessage: "Deleted while ns/other remediates node w: the node is left to it as it is", wantAt: metav1.NewTime(now),
			wantPower: []v1alpha1.PowerChange{{Target: v1alpha1.PowerOff, Requested: at(10), Confirmed: ptr(at(15))}},
		},
		"deleted while Pending, its Node gone: nothing done, and clean-up's note": {
			status: v1alpha1.PowerCycleRemediationStatus{Phase: v1alpha1.PhasePending,
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionProcessing, metav1.ConditionFalse, v1alpha1.ReasonRemediationCancelled, "Stopped", 60)}},
			note:       "node w is gone: its host was left as it is, not powered on",
			wantResult: v1alpha1.RemediationCancelled, wantReason: v1alpha1.ReasonRemediationCancelled,
			wantMessage: "The request was deleted in phase Pending, after 0 attempt(s); node w is gone: its host was left as it is, not powered on",
			wantAt:      metav1.NewTime(now),
		},
		"deleted waiting for a node whose Ready is from before the power-on: not its return": {
			status: v1alpha1.PowerCycleRemediationStatus{Phase: v1alpha1.PhaseWaitingForNode, Attempts: []v1alpha1.PowerCycleAttempt{cycled}},
			node:   readyAt(5), wantResult: v1alpha1.RemediationCancelled, wantReason: v1alpha1.ReasonRemediationCancelled,
			wantMessage: "The request was deleted in phase WaitingForNode, after 1 attempt(s)", wantAt: metav1.NewTime(now),
			wantPower: []v1alpha1.PowerChange{{Target: v1alpha1.PowerOff, Requested: at(10), Confirmed: ptr(at(15))},
				{Target: v1alpha1.PowerOn, Requested: at(16), Confirmed: ptr(at(20))}},
		},
		"escalated, a bare node: the host left powered off is on record after the attempts": {
			status: v1alpha1.PowerCycleRemediationStatus{Phase: v1alpha1.PhaseFailed, PowerState: v1alpha1.PowerOff,
				LastTransitionTime: ptr(at(50)),
				Attempts: []v1alpha1.PowerCycleAttempt{{Number: 1, Started: at(10), PoweredOff: ptr(at(15)),
					PowerOnRequested: ptr(at(16)), Finished: ptr(at(40)), Result: attemptFailed}},
				PowerRequest: &v1alpha1.PowerRequest{Target: v1alpha1.PowerOff, Time: at(45)},
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonRetriesExhausted,
					"1 attempts failed; node w is left powered off and fenced", 50)}},
			wantResult: v1alpha1.RemediationFailed, wantReason: v1alpha1.ReasonRetriesExhausted,
			wantMessage: "1 attempts failed; node w is left powered off and fenced", wantAt: at(50),
			wantPower: []v1alpha1.PowerChange{{Target: v1alpha1.PowerOff, Requested: at(10), Confirmed: ptr(at(15))},
				{Target: v1alpha1.PowerOn, Requested: at(16)},
				{Target: v1alpha1.PowerOff, Requested: at(45), Confirmed: ptr(at(50))}},
		},
		"a power-off asked for during the last attempt is that attempt's, not an escalation's": {
			status: v1alpha1.PowerCycleRemediationStatus{Phase: v1alpha1.PhaseFailed, PowerState: v1alpha1.PowerOn,
				LastTransitionTime: ptr(at(50)),
				Attempts:           []v1alpha1.PowerCycleAttempt{{Number: 1, Started: at(10), Finished: ptr(at(40)), Result: attemptFailed}},
				PowerRequest:       &v1alpha1.PowerRequest{Target: v1alpha1.PowerOff, Time: at(10)},
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonRetriesExhausted,
					"1 attempts failed; node w could not be left powered off", 50)}},
			wantResult: v1alpha1.RemediationFailed, wantReason: v1alpha1.ReasonRetriesExhausted,
			wantMessage: "1 attempts failed; node w could not be left powered off", wantAt: at(50),
		},
		"deleted with its power-off in flight, which landed: clean-up powered the host on": {
			status: v1alpha1.PowerCycleRemediationStatus{Phase: v1alpha1.PhasePoweringOff, PowerState: v1alpha1.PowerOn,
				Attempts:     []v1alpha1.PowerCycleAttempt{{Number: 1, Started: at(10)}},
				PowerRequest: &v1alpha1.PowerRequest{Target: v1alpha1.PowerOn, Time: at(40)}},
			wantResult: v1alpha1.RemediationCancelled, wantReason: v1alpha1.ReasonRemediationCancelled,
			wantMessage: "The request was deleted in phase PoweringOff, after 1 attempt(s)", wantAt: metav1.NewTime(now),
			wantPower: []v1alpha1.PowerChange{{Target: v1alpha1.PowerOff, Requested: at(10)},
				{Target: v1alpha1.PowerOn, Requested: at(40), Confirmed: ptr(metav1.NewTime(now))}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			pcr := &v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u",
				CreationTimestamp: at(0)}, Status: tc.status}
			pcr.Status.NodeName = "w"
			rec := remediationRecord(pcr, tc.node, tc.how, tc.note, now)
			g.Expect(rec.Result).To(Equal(tc.wantResult))
			g.Expect(rec.Reason).To(Equal(tc.wantReason))
			g.Expect(rec.Message).To(Equal(tc.wantMessage))
			g.Expect(rec.Finished.Time).To(BeTemporally("==", tc.wantAt.Time))
			g.Expect(rec.Started.Time).To(BeTemporally("==", epoch))
			g.Expect(rec.PowerChanges).To(Equal(tc.wantPower))
		})
	}
}

func TestRemediationRecordBounds(t *testing.T) {
	g := NewWithT(t)
	var attempts []v1alpha1.PowerCycleAttempt
	for i := range int32(12) {
		at := metav1.NewTime(epoch.Add(time.Duration(i) * time.Minute))
		attempts = append(attempts, v1alpha1.PowerCycleAttempt{Number: i + 1, Started: at, PoweredOff: &at, PowerOnRequested: &at})
	}
	long := make([]byte, 2*v1alpha1.MaxRecordMessage)
	for i := range long {
		long[i] = 'x'
	}
	pcr := &v1alpha1.PowerCycleRemediation{Status: v1alpha1.PowerCycleRemediationStatus{NodeName: "w", Attempts: attempts,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionFalse, Message: string(long)}}}}
	rec := remediationRecord(pcr, nil, letGoRestored, "", epoch)
	g.Expect(rec.PowerChanges).To(HaveLen(v1alpha1.MaxRecordedPowerChanges), "the last 20")
	g.Expect(rec.PowerChanges[len(rec.PowerChanges)-1].Requested).To(Equal(attempts[11].Started))
	g.Expect(len(rec.Message)).To(BeNumerically("<=", v1alpha1.MaxRecordMessage))
	g.Expect(rec.Attempts).To(Equal(int32(12)))
}

func TestWithRecord(t *testing.T) {
	g := NewWithT(t)
	rec := func(uid string, result v1alpha1.RemediationResult) v1alpha1.RemediationRecord {
		return v1alpha1.RemediationRecord{UID: types.UID(uid), Result: result}
	}
	recent := []v1alpha1.RemediationRecord{rec("a", v1alpha1.RemediationFailed), rec("b", v1alpha1.RemediationSucceeded)}

	out, changed := withRecord(recent, rec("b", v1alpha1.RemediationSucceeded))
	g.Expect(changed).To(BeFalse(), "there already")
	g.Expect(out).To(Equal(recent))

	out, changed = withRecord(recent, rec("a", v1alpha1.RemediationCancelled))
	g.Expect(changed).To(BeTrue())
	g.Expect(out).To(Equal([]v1alpha1.RemediationRecord{rec("a", v1alpha1.RemediationCancelled), rec("b", v1alpha1.RemediationSucceeded)}),
		"in place of the same request's")
	g.Expect(recent[0].Result).To(Equal(v1alpha1.RemediationFailed), "the list read is not changed")

	var full []v1alpha1.RemediationRecord
	for i := range v1alpha1.MaxRecentRemediations {
		full = append(full, rec(string(rune('a'+i)), v1alpha1.RemediationSucceeded))
	}
	out, changed = withRecord(full, rec("new", v1alpha1.RemediationFailed))
	g.Expect(changed).To(BeTrue())
	g.Expect(out).To(HaveLen(v1alpha1.MaxRecentRemediations))
	g.Expect(out[0].UID).To(Equal(types.UID("b")))
	g.Expect(out[len(out)-1].UID).To(Equal(types.UID("new")))
}
