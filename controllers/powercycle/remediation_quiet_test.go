package powercycle

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The remediator's scenarios (remediation_test.go), continued: what it writes and reads, and when.
var _ = Describe("Remediation", func() {
	// A cached copy older than the remediator's own last write (the informer has not delivered that write
	// yet) is passed over: the reconcile goes on from the object that write left, as it would from a cache
	// that had caught up, rather than waiting seconds for the watch. Once someone else has written too, the
	// write from that copy ends in a conflict, and the remediator then waits for the cache: no BMC call and
	// no write from a copy it knows is stale.
	It("stale cache goes on from our last write", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-13", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		var stale atomic.Pointer[v1alpha1.PowerCycleRemediation] // what the "cache" hands out instead, when set
		c, writes := w.interceptedClient(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if old := stale.Load(); old != nil && k == key {
					old.DeepCopyInto(obj.(*v1alpha1.PowerCycleRemediation))
					return nil
				}
				return c.Get(ctx, k, obj, opts...)
			},
		})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client = c }
		r := w.reconciler()
		driver := func() int { return len(hosts.Driver(fakeAddress(node)).Calls()) }

		// reconcileWith reconciles with the cache handing out old (the latest version when nil).
		reconcileWith := func(old *v1alpha1.PowerCycleRemediation) ctrl.Result {
			GinkgoHelper()
			writes.reset()
			stale.Store(old)
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			stale.Store(nil)
			Expect(err).NotTo(HaveOccurred())
			return res
		}

		// A new request: the first reconcile adds the finalizer, accepts it, takes the lease, taints the
		// node, enters PoweringOff and sends the power-off.
		created := w.get(ctx, key)
		reconcileWith(nil)
		poweringOff := w.get(ctx, key)
		Expect(poweringOff.Status.Phase).To(Equal(v1alpha1.PhasePoweringOff))
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off"}))

		// A poll interval later the cache still hands out the request as created, two of our writes ago (the
		// finalizer, the PoweringOff record). The reconcile goes on from the PoweringOff it wrote: it reads
		// the host off, fences the node and powers it on.
		w.clock.Step(r.opts.PowerPollInterval)
		reconcileWith(created)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhasePoweringOn), "went on from our own last write")
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))

		// Someone else writes the request: the copy our last write left is outdated too. The next step from
		// it (the power-on confirmed) is refused, and nothing else is done.
		touched := w.get(ctx, key)
		touched.Annotations["example.com/touched"] = "yes"
		w.must(w.c.Update(ctx, touched))
		w.clock.Step(r.opts.PowerPollInterval)
		reconcileWith(poweringOff)
		Expect(writes.of("PowerCycleRemediation")).To(Equal(1), "one write from our copy, refused")
		Expect(w.get(ctx, key).ResourceVersion).To(Equal(touched.ResourceVersion), "nothing written over their change")
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))

		// From then on the remediator waits for the cache.
		calls, waits := driver(), testutil.ToFloat64(CacheWaits)
		res := reconcileWith(poweringOff)
		Expect(testutil.ToFloat64(CacheWaits)-waits).To(BeNumerically(">=", 1), "the wait is counted")
		Expect(res.RequeueAfter).To(BeNumerically(">", 0), "a backstop requeue")
		Expect(writes.of("PowerCycleRemediation")).To(BeZero(), "no write from a stale copy")
		Expect(driver()).To(Equal(calls), "no BMC call from a stale copy")
		Expect(w.get(ctx, key).ResourceVersion).To(Equal(touched.ResourceVersion))

		// Fresh copies carry on to the end: one power-off, one power-on.
		w.drive(ctx, key, same(r), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(w.get(ctx, key).Annotations).To(HaveKeyWithValue("example.com/touched", "yes"))
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
	})

	// A request deleted while the remediator records its first phase (the write finds it gone) announces
	// no phase: no event and no log line says a phase was entered that no status records, and no power
	// request follows.
	It("gone under its write announces nothing", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-16", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		c, _ := w.interceptedClient(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if _, ok := obj.(*v1alpha1.PowerCycleRemediation); ok {
					return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("powercycleremediations").GroupResource(), obj.GetName())
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client = c }
		r := w.reconciler()
		before := len(w.drainEvents())

		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		for _, e := range w.drainEvents()[before:] {
			for _, reason := range phaseEvents {
				Expect(e).NotTo(ContainSubstring(" "+reason+" "), "no phase announced that no status records")
			}
		}
		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(BeEmpty(), "no power change")
	})

	// Once a power change is sent, the BMC is not read again before a poll interval has passed: the
	// reconcile that the request's own status write brings at once finds nothing to do.
	It("no poll before the interval", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-14", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))
		r := w.reconciler()

		w.drive(ctx, key, same(r), nil, func(s []step) bool {
			return s[len(s)-1].phase == v1alpha1.PhasePoweringOff && w.get(ctx, key).Status.PowerRequest != nil
		})
		calls := len(hosts.Driver(fakeAddress(node)).Calls())
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">", 4*time.Second))
		Expect(res.RequeueAfter).To(BeNumerically("<=", 5*time.Second), "the poll interval, counted from the request")
		Expect(hosts.Driver(fakeAddress(node)).Calls()).To(HaveLen(calls), "no BMC call within the interval")

		w.clock.Step(res.RequeueAfter)
		_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(len(hosts.Driver(fakeAddress(node)).Calls())).To(BeNumerically(">", calls), "read once the interval is over")
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhasePoweringOn), "confirmed off, fenced, and powered on")
	})

	// One reboot from request to clean-up makes the writes docs/powercycle.md lists ("What one remediation
	// writes"), and no more: each status write carries a phase (the acceptance goes with the taint's
	// record), the remediation object itself changes only for the finalizer, and the node three times.
	It("writes of one remediation", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker-15", nil)
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		c, writes := w.interceptedClient(interceptor.Funcs{})
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client, o.LeaseClient = c, c }
		r := w.reconciler()

		w.drive(ctx, key, same(r), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		w.must(w.c.Delete(ctx, w.get(ctx, key)))
		w.drive(ctx, key, same(r), nil, untilSettled)

		Expect(powerOps(hosts.Driver(fakeAddress(node)))).To(Equal([]string{"Off", "On"}))
		Expect(writes.all()).To(Equal(map[string]int{
			// accepted and PoweringOff, with the remediation taint's record and the power-off request;
			// PoweredOff with the out-of-service taint's record; PoweringOn with its request; WaitingForNode;
			// Succeeded
			"update PowerCycleRemediation/status": 5,
			"update PowerCycleRemediation":        2, // the finalizer on, then off
			"update Node":                         3, // the two taints on, one at a time, then both off
			"create Lease":                        1,
			"delete Lease":                        1,
			"patch BMC/status":                    1, // the remediation's record on the host's BMC, once it ended
		}))
		// One event per phase entered, and one per change to the node and its lease, which kubectl metalheal
		// timeline reads once the taints and the lease are gone.
		kept := map[string]bool{EventNodeLeaseTaken: true, EventNodeCordoned: true, EventOutOfServiceTaintAdded: true,
			EventTaintsRemoved: true, EventNodeLeaseReleased: true}
		var phaseEvents int
		var records []string
		for _, e := range w.drainEvents() {
			switch reason := strings.Fields(e)[1]; {
			case kept[reason]:
				records = append(records, e)
			case reason != EventCleanedUp:
				phaseEvents++
			}
		}
		Expect(phaseEvents).To(Equal(6), "one event per phase entered")
		lease := leases.DefaultNamespace + "/" + leases.LeaseName(node)
		Expect(records).To(Equal([]string{
			"Normal NodeLeaseTaken " + lease + " held by PowerCycleRemediation-" + key.Name +
				": nobody else (node maintenance, another check) acts on the node",
			"Normal NodeCordoned " + v1alpha1.TaintRemediation + ":NoSchedule: no new pods while it is remediated",
			"Normal OutOfServiceTaintAdded " + v1alpha1.TaintOutOfService + "=" + v1alpha1.TaintOutOfServiceValue +
				":NoExecute: Kubernetes moves its pods and volumes",
			"Normal TaintsRemoved the remediator removed the taints it added",
			"Normal NodeLeaseReleased " + lease + " deleted by its holder",
		}), "once per change, in the words of the demo's timeline")
	})

	// Remediating, which the BMC inventory asks before a periodic check, reads the cache's node index: a
	// remediation at work (new, or in a power phase) or being cleaned up counts; a finished one does not.
	It("remediating nodes", func(ctx SpecContext) {
		w, _ := fakeHosts(ctx)
		cached := w.indexedClient(ctx)
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.Client = cached }
		r := w.reconciler()

		withPhase := func(name string, phase v1alpha1.PowerCyclePhase) *v1alpha1.PowerCycleRemediation {
			p := w.get(ctx, w.nhcRemediation(ctx, w.node(ctx, name, nil), spec(reboot, 3)))
			p.Status.Phase = phase
			w.must(w.c.Status().Update(ctx, p))
			return p
		}
		withPhase("new", "")
		withPhase("powering-off", v1alpha1.PhasePoweringOff)
		withPhase("done", v1alpha1.PhaseSucceeded)
		cleaning := withPhase("cleaning-up", v1alpha1.PhaseSucceeded)
		cleaning.Finalizers = []string{v1alpha1.FinalizerPowerCycle}
		w.must(w.c.Update(ctx, cleaning))
		w.must(w.c.Delete(ctx, cleaning))

		want := map[string]bool{"new": true, "powering-off": true, "done": false, "cleaning-up": true, "no-request": false}
		Eventually(func() map[string]bool {
			got := map[string]bool{}
			for node := range want {
				got[node] = r.Remediating(ctx, w.prefix+node)
			}
			return got
		}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal(want))
	})
})
