//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
	"github.com/metalheal/metalheal/test/world"
)

// The workload API server of the cut scenario stays down for cutHold once the request and the check have
// reported it (longer than a failed reconnection, 10s, and several of the request's growing waits), and
// the request must go on within resumeWait of its start.
const (
	cutHold    = 15 * time.Second
	resumeWait = 30 * time.Second
)

// fleetNamespace and fleetCutNamespace hold, in the management cluster, the fleet scenarios' Clusters,
// Machines, health checks and remediation requests, one namespace per scenario (the suite shuffles them;
// a namespace being deleted cannot be made again). The manager trusts them (managerArgs'
// --remediation-namespaces) and each scenario grants it in its own what config/cluster-api grants in the
// Clusters' namespace.
const (
	fleetNamespace    = "e2e-fleet"
	fleetCutNamespace = "e2e-fleet-cut"
)

// fleetPool labels the Machines of every workload cluster: the health checks select them.
var fleetPool = map[string]string{"pool": "workers"}

// A management cluster and two workload clusters whose Nodes share a name (and a management Node of that
// name too): a hung kubelet in fleet-a. Only fleet-a's host of that name is powered off and on (the
// Redfish mock's record), metalheal's taints come and go on fleet-a's Node only, the node lease is held in
// fleet-a by the check that asked for the power cycle while the remediator acts, and the same-named hosts
// of fleet-b and of the management cluster are never touched.
var _ = Describe("A Cluster API fleet", func() {
	It("power-cycles only the hung workload host, in its own cluster, never a same-named host of another", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		// The name every cluster repeats: a management Node of the pool, and a Node of each workload
		// cluster. worker-0 is only in the workload clusters: the checks find it only if they read them.
		shared := pool.take(ctx, "fleet", 1)[0]
		reportOnFailure(start, shared, "worker-0")
		f := startFleet(ctx, fleetNamespace, []string{shared, "worker-0"}, "fleet-a", "fleet-b")
		a, b := f.workload("fleet-a"), f.workload("fleet-b")
		createTemplate(ctx, fleetNamespace, "power-cycle", remediation())
		for _, c := range f.workloads {
			createMachineHealthCheck(ctx, c, "power-cycle")
		}

		By("the kubelet of " + shared + " in fleet-a hangs")
		f.breakHost(a, shared, nodesim.FaultTransient)

		By("our MachineHealthCheck reads it Unknown in fleet-a and asks for a power cycle of its Machine")
		key := client.ObjectKey{Namespace: fleetNamespace, Name: a.wc.MachineName(shared)}
		pcr := waitRequestOf(ctx, key, a.wc.MachineName(shared))

		By("the remediator places it in fleet-a, where the check holds the node lease for it while it acts")
		var holder string
		Eventually(func(g Gomega) {
			p, err := getPCR(ctx, key)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.Status.ClusterName).To(Equal("fleet-a"))
			g.Expect(p.Status.BMCName).To(Equal(a.wc.BMCName(shared)))
			l := leaseIn(ctx, g, a, shared)
			g.Expect(l).NotTo(BeNil(), "the lease of %s in its own cluster", a.host(shared))
			g.Expect(l.Spec.HolderIdentity).NotTo(BeNil())
			holder = *l.Spec.HolderIdentity
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		Expect(holder).To(Equal("MachineHealthCheck.remediation.metalheal.io-"+a.name), "the check took it before its request")

		By("fleet-a's host is power-cycled once, its Node comes back Ready; the check deletes the request")
		waitGone(ctx, client.ObjectKeyFromObject(pcr), remedyWait)
		f.expectPowerRecord(a, shared, powerCycledOnce...)
		Eventually(func(g Gomega) {
			n := nodeIn(ctx, g, a, shared)
			g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", v1alpha1.TaintOutOfService)))
			g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", v1alpha1.TaintRemediation)))
			g.Expect(leaseIn(ctx, g, a, shared)).To(Or(BeNil(), HaveField("Spec.HolderIdentity", Or(BeNil(), HaveValue(BeEmpty())))),
				"the lease is released in fleet-a")
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		Expect(f.taintEvents(a, shared)).To(ContainElements("taint+"+v1alpha1.TaintOutOfService, "taint-"+v1alpha1.TaintOutOfService),
			"the out-of-service taint came and went on fleet-a's Node")

		By("the same-named hosts of fleet-b and of the management cluster, and every worker-0, were never touched")
		for _, c := range []*fleetCluster{b, f.mgmt} {
			f.expectPowerRecord(c, shared)
			f.expectNoTaintEvents(c, shared)
			Eventually(func(g Gomega) {
				g.Expect(leaseIn(ctx, g, c, shared)).To(BeNil(), c.host(shared))
				g.Expect(cordoned(ctx, g, c, shared)).To(BeFalse(), c.host(shared))
			}).WithContext(ctx).WithTimeout(poll * 4).WithPolling(poll).Should(Succeed())
		}
		for _, c := range f.workloads {
			f.expectPowerRecord(c, "worker-0")
		}
		Expect(b.sim.State(shared)).To(Equal(nodesim.StateRunning), "fleet-b's host of the same name")
	}, SpecTimeout(scenarioMax))
})

// A workload cluster's API server stops mid-remediation: the remediator has powered the hung host off
// (the Redfish mock reads Off, and that very moment the API server is stopped), and its Node cannot come
// back while the cluster is down. The request says so (WorkloadClusterReachable=False, one warning), the
// check says so (a WorkloadClusterUnreachable warning), and nothing is sent to the host while it lasts;
// nothing is lost either: the same request, one attempt. When the API server is back (same address,
// certificates and etcd), the request goes on from its status, and the host is power-cycled exactly once
// in all: its Node Ready again, the taints and the lease gone from the workload cluster, the outcome
// Succeeded on the host's BMC, the request deleted by the check. The management cluster's host of the
// same name, and the cluster's other Node, are never touched.
var _ = Describe("A Cluster API fleet whose workload API server stops mid-remediation", func() {
	It("reports the cut on the request and the check, sends no power request while it lasts, and completes once it is back", func(ctx SpecContext) {
		mgrs.ensure(ctx)
		start := time.Now()
		shared := pool.take(ctx, "fleet-cut", 1)[0]
		reportOnFailure(start, shared, "worker-0", "apiserver/")
		f := startFleet(ctx, fleetCutNamespace, []string{shared, "worker-0"}, "cut-a")
		a := f.workload("cut-a")
		api := "apiserver/" + a.name
		// Whatever happens, the API server is back before the cluster is stopped and its objects deleted:
		// the remediator's clean-up acts on the workload Node.
		DeferCleanup(func(ctx SpecContext) {
			if err := a.wc.World.StartAPIServer(ctx); err != nil && !errors.Is(err, world.ErrAPIServerRunning) {
				Fail(fmt.Sprintf("starting the API server of %s again: %v", a.name, err))
			}
		})
		createTemplate(ctx, fleetCutNamespace, "power-cycle", remediation(func(s *v1alpha1.PowerCycleRemediationSpec) {
			// Should the remediator ask for the power-on just before the cut (see atCut), its deadline
			// counts on through the cut: room for the cut and the boot after it.
			s.PowerOnTimeoutSeconds = 60
		}))
		mhc := createMachineHealthCheck(ctx, a, "power-cycle")

		// The API server stops the moment the host reads Off on its BMC: before the remediator, polling the
		// BMC, can have confirmed it and gone on.
		host := a.host(shared)
		stopped := make(chan error, 1)
		var cutOnce sync.Once
		onPower(host, func(to redfishmock.PowerState) {
			if to != redfishmock.PowerOff {
				return
			}
			cutOnce.Do(func() {
				go func() {
					tl.record(api, "stopping")
					err := a.wc.World.StopAPIServer()
					tl.record(api, "stopped")
					stopped <- err
				}()
			})
		})

		By("the kubelet of " + shared + " in " + a.name + " hangs; our MachineHealthCheck asks for a power cycle")
		f.breakHost(a, shared, nodesim.FaultTransient)
		key := client.ObjectKey{Namespace: fleetCutNamespace, Name: a.wc.MachineName(shared)}
		pcr := waitRequestOf(ctx, key, a.wc.MachineName(shared))
		pcrObject := "pcr/" + key.String()

		By("the remediator powers the host off; the API server of " + a.name + " stops as the BMC reads Off")
		var stopErr error
		Eventually(stopped).WithContext(ctx).WithTimeout(remedyWait).Should(Receive(&stopErr))
		Expect(stopErr).NotTo(HaveOccurred())
		cutAt := tl.at(api, "stopping", start)
		// The power-on comes after the Node is fenced, a write to the workload cluster, whose API server
		// stopped as the host read Off: it is not asked for yet. Were the remediator quicker than the stop,
		// it was asked for a moment before: it must not be asked for again (one power cycle in all).
		atCut := f.powerRecord(a, shared)
		Expect(atCut).To(Or(Equal([]string{"ForceOff"}), Equal(powerCycledOnce)), "the resets when the API server stopped")

		By("the request says its cluster does not answer, once, and sends nothing to the host")
		Eventually(func(g Gomega) {
			p, err := getPCR(ctx, key)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).NotTo(BeNil())
			c := conditionOf(p, v1alpha1.ConditionWorkloadClusterReachable)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonWorkloadClusterUnreachable))
			g.Expect(c.Message).To(ContainSubstring(a.name))
			g.Expect(warnings(eventsOn(ctx, g, p), "WorkloadClusterUnreachable")).To(HaveLen(1))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		reportedAt := tl.at(pcrObject, v1alpha1.ConditionWorkloadClusterReachable+"=False", start)

		By("the check says so too")
		var checkWarnedAt time.Time
		Eventually(func(g Gomega) {
			w := warnings(eventsOn(ctx, g, mhc), "WorkloadClusterUnreachable")
			g.Expect(w).NotTo(BeEmpty())
			g.Expect(w[0].Message).To(ContainSubstring(a.name))
			checkWarnedAt = eventTime(w[0])
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())

		By("for as long as the cluster does not answer, nothing is sent to the host and nothing is lost")
		// Longer than a failed reconnection (the manager waits 10s for a workload cluster's Nodes) and
		// several of the request's growing waits (retryBackoff.max, 2s): it has looked again, and found
		// the cluster down again.
		var phaseAtRestart v1alpha1.PowerCyclePhase
		Consistently(func(g Gomega) {
			p, err := getPCR(ctx, key)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.UID).To(Equal(pcr.UID), "the same request")
			g.Expect(p.Status.Attempts).To(HaveLen(1), "one attempt")
			g.Expect(p.Status.Phase).To(BeElementOf(v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweredOff, v1alpha1.PhasePoweringOn,
				v1alpha1.PhaseWaitingForNode), "still acting")
			g.Expect(conditionOf(p, v1alpha1.ConditionWorkloadClusterReachable).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(warnings(eventsOn(ctx, g, p), "WorkloadClusterUnreachable")).To(HaveLen(1), "one warning for the cut")
			r, err := h.Mock.Resets(a.systemID(shared))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r[f.resetsBefore[a.systemID(shared)]:]).To(Equal(atCut), "a reset while the cluster did not answer")
			phaseAtRestart = p.Status.Phase
		}).WithContext(ctx).WithTimeout(cutHold).WithPolling(time.Second).Should(Succeed())

		By("the API server of " + a.name + " starts again")
		tl.record(api, "starting")
		restartAt := tl.at(api, "starting", start)
		Expect(a.wc.World.StartAPIServer(ctx)).To(Succeed())
		tl.record(api, "started")

		By("the request goes on from its status: the host is power-cycled once, its Node Ready; the check deletes the request")
		// Bounded: the request's next look (at most retryBackoff.max after the last) connects again.
		Eventually(func() bool {
			return tl.has(pcrObject, v1alpha1.ConditionWorkloadClusterReachable+"=True", restartAt)
		}).WithContext(ctx).WithTimeout(resumeWait).WithPolling(poll).Should(BeTrue(), "the request says its cluster answers")
		resumedAt := tl.at(pcrObject, v1alpha1.ConditionWorkloadClusterReachable+"=True", restartAt)
		waitGone(ctx, key, remedyWait)
		goneAt := tl.at(pcrObject, "deleted", restartAt)
		// Whether the request recorded Succeeded before its check deleted it is a race the check may win;
		// the host's BMC keeps the outcome either way.
		expectRecordedOn(ctx, a.wc.BMCName(shared), shared, pcr, v1alpha1.RemediationSucceeded, "MachineHealthCheck")
		Expect(tl.has(pcrObject, "attempt=2", start)).To(BeFalse(), "a second attempt:\n%s", tl.dump(start, shared))

		By("exactly one power cycle; the workload Node Ready since the API server is back, untainted, its lease released")
		f.expectPowerRecord(a, shared, powerCycledOnce...)
		var readyAt time.Time
		Eventually(func(g Gomega) {
			n := nodeIn(ctx, g, a, shared)
			ready := readyCondition(n)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(corev1.ConditionTrue))
			readyAt = ready.LastTransitionTime.Time
			g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", v1alpha1.TaintOutOfService)))
			g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", v1alpha1.TaintRemediation)))
			g.Expect(leaseIn(ctx, g, a, shared)).To(Or(BeNil(), HaveField("Spec.HolderIdentity", Or(BeNil(), HaveValue(BeEmpty())))),
				"the lease is released in %s", a.name)
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		// Condition times have a precision of one second.
		Expect(readyAt).To(BeTemporally(">=", restartAt.Truncate(time.Second)), "the Node was back before the API server stopped")
		Expect(a.sim.State(shared)).To(Equal(nodesim.StateRunning))

		By("the check reads the cluster again; the management cluster's " + shared + " and " + a.name + "'s worker-0 were never touched")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), mhc)).To(Succeed())
			g.Expect(mhc.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(2)))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
		f.expectPowerRecord(f.mgmt, shared)
		f.expectNoTaintEvents(f.mgmt, shared)
		f.expectPowerRecord(a, "worker-0")
		Eventually(func(g Gomega) {
			g.Expect(leaseIn(ctx, g, f.mgmt, shared)).To(BeNil())
			g.Expect(cordoned(ctx, g, f.mgmt, shared)).To(BeFalse())
			g.Expect(taintsOn(ctx, g, a, "worker-0")).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(poll * 4).WithPolling(poll).Should(Succeed())

		onAt := tl.at("power/"+host, string(redfishmock.PoweringOn), start)
		AddReportEntry("the cut", fmt.Sprintf("host read Off, API server stopping  %s (stopped %s)\n"+
			"request: WorkloadClusterReachable=False  %s\ncheck: WorkloadClusterUnreachable    %s\n"+
			"API server starting                 %s (it and a new controller-manager healthy %s; the request was %s)\nrequest: WorkloadClusterReachable=True %s\n"+
			"power-on requested                  %s\nNode Ready                          %s\nrequest deleted                     %s",
			timeOfDay(cutAt), timeOfDay(tl.at(api, "stopped", start)), timeOfDay(reportedAt), timeOfDay(checkWarnedAt),
			timeOfDay(restartAt), timeOfDay(tl.at(api, "started", start)), phaseAtRestart, timeOfDay(resumedAt),
			timeOfDay(onAt), timeOfDay(readyAt), timeOfDay(goneAt)))
	}, SpecTimeout(scenarioMax))
})

// warnings are the Warning events of a reason among events, oldest first.
func warnings(events []corev1.Event, reason string) []corev1.Event {
	var out []corev1.Event
	for _, e := range events {
		if e.Type == corev1.EventTypeWarning && e.Reason == reason {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	return out
}

// eventTime is when an event was first recorded (events.k8s.io writers set eventTime, core ones
// firstTimestamp).
func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// timeOfDay formats a time of the scenario's timeline.
func timeOfDay(t time.Time) string { return t.Format("15:04:05.000") }

// readyCondition is a Node's Ready condition, or nil.
func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// fleet is the fleet scenario's world: the suite's management cluster and workload clusters started for
// the scenario, whose Node names repeat across clusters.
type fleet struct {
	mgmt      *fleetCluster
	workloads []*fleetCluster
	start     time.Time
	// resetsBefore counts, per Redfish system, the resets it had accepted when the fleet started: the
	// management hosts have a history.
	resetsBefore map[string]int
}

// fleetCluster is one cluster as the scenario sees it: the management cluster (wc nil) or a workload
// cluster. A host is a cluster and a node name.
type fleetCluster struct {
	name   string
	client client.Client
	sim    *nodesim.Simulator
	wc     *harness.WorkloadCluster
}

// systemID is the Redfish system of a node's host.
func (c *fleetCluster) systemID(node string) string {
	if c.wc == nil {
		return harness.SystemID(node)
	}
	return c.wc.SystemID(node)
}

// host spells a node's host as the timeline (and metalheal) does: "worker-1" in the management cluster,
// "<namespace>/<cluster>/worker-1" in a workload cluster.
func (c *fleetCluster) host(node string) string {
	if c.wc == nil {
		return node
	}
	return c.wc.Host(node)
}

// startFleet starts workload clusters named names, each with Nodes nodes, described in namespace ns
// (which it creates, granting the manager what config/cluster-api grants there), their Nodes' changes
// recorded in the timeline. Everything is removed when the scenario ends.
func startFleet(ctx context.Context, ns string, nodes []string, names ...string) *fleet {
	GinkgoHelper()
	namespace(ctx, ns)
	Expect(h.GrantClusterNamespace(ctx, ns)).To(Succeed())
	opts := harness.FleetOptions{Namespace: ns, MachineLabels: fleetPool}
	for _, name := range names {
		opts.Clusters = append(opts.Clusters, harness.Workload{Name: name, Nodes: nodes})
	}
	f := &fleet{mgmt: &fleetCluster{name: "management", client: k8s, sim: h.Sim}, start: time.Now(), resetsBefore: map[string]int{}}
	for _, id := range h.Mock.SystemIDs() {
		r, err := h.Mock.Resets(id)
		Expect(err).NotTo(HaveOccurred())
		f.resetsBefore[id] = len(r)
	}
	began := time.Now()
	clusters, err := h.StartWorkloadClusters(ctx, opts)
	Expect(err).NotTo(HaveOccurred())
	fmt.Fprintf(GinkgoWriter, "started %d workload clusters in %s\n", len(clusters), time.Since(began).Round(time.Millisecond))
	watchCtx, stopWatching := context.WithCancel(context.Background())
	for _, wc := range clusters {
		DeferCleanup(func(ctx SpecContext) {
			Expect(wc.Stop(ctx)).To(Succeed())
		})
		AddReportEntry("workload cluster "+wc.Name, fmt.Sprintf("kubectl --kubeconfig=%s (logs in %s)", wc.World.Kubeconfig(), wc.World.LogDir()))
		f.workloads = append(f.workloads, &fleetCluster{name: wc.Name, client: wc.Client, sim: wc.Sim, wc: wc})
		Expect(watchNodes(watchCtx, wc)).To(Succeed())
	}
	DeferCleanup(stopWatching) // before the clusters stop
	return f
}

// watchNodes records a workload cluster's Node changes in the timeline as "node/<host>" (see
// fleetCluster.host): readiness, taints.
func watchNodes(ctx context.Context, wc *harness.WorkloadCluster) error {
	c, err := ctrlcache.New(wc.World.RESTConfig(), ctrlcache.Options{Scheme: harness.Scheme()})
	if err != nil {
		return err
	}
	inf, err := c.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return err
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
		cur := n.(*corev1.Node)
		tl.nodeChangedAs("node/"+wc.Host(cur.Name), o.(*corev1.Node), cur)
	}})
	if err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the Node watch of workload cluster %s did not sync", wc.Name)
	}
	return nil
}

// workload returns the workload cluster of a name.
func (f *fleet) workload(name string) *fleetCluster {
	GinkgoHelper()
	i := slices.IndexFunc(f.workloads, func(c *fleetCluster) bool { return c.name == name })
	Expect(i).NotTo(BeNumerically("<", 0), "no workload cluster %s", name)
	return f.workloads[i]
}

// clusters lists the management cluster and the workload clusters.
func (f *fleet) clusters() []*fleetCluster {
	return append([]*fleetCluster{f.mgmt}, f.workloads...)
}

// breakHost gives a node's host in a cluster a fault (see nodesim.Fault).
func (f *fleet) breakHost(c *fleetCluster, node string, fault nodesim.Fault) {
	GinkgoHelper()
	Expect(c.sim.InjectFault(node, fault)).To(Succeed())
}

// powerRecord is what the Redfish mock recorded of a node's host in a cluster since the fleet started:
// the resets its system accepted, oldest first.
func (f *fleet) powerRecord(c *fleetCluster, node string) []string {
	GinkgoHelper()
	r, err := h.Mock.Resets(c.systemID(node))
	Expect(err).NotTo(HaveOccurred())
	return r[f.resetsBefore[c.systemID(node)]:]
}

// expectPowerRecord asserts the resets a node's host in a cluster accepted since the fleet started (e.g.
// powerCycledOnce...; none: never reset, and then no power change was heard either).
func (f *fleet) expectPowerRecord(c *fleetCluster, node string, want ...string) {
	GinkgoHelper()
	if len(want) == 0 {
		Expect(f.powerRecord(c, node)).To(BeEmpty(), "the host of %s was reset", c.host(node))
		Expect(tl.all("power/"+c.host(node), f.start)).To(BeEmpty(), "the host of %s changed power", c.host(node))
		return
	}
	Expect(f.powerRecord(c, node)).To(Equal(want), "the resets of the host of %s:\n%s", c.host(node), tl.dump(f.start, c.host(node)))
}

// taintEvents lists metalheal's taints coming ("taint+<key>") and going ("taint-<key>") on a Node of a
// cluster since the fleet started, as the watches saw them, oldest first.
func (f *fleet) taintEvents(c *fleetCluster, node string) []string {
	var out []string
	for _, e := range tl.all("node/"+c.host(node), f.start) {
		for _, taint := range []string{v1alpha1.TaintRemediation, v1alpha1.TaintOutOfService} {
			if e.What == "taint+"+taint || e.What == "taint-"+taint {
				out = append(out, e.What)
			}
		}
	}
	return out
}

// expectNoTaintEvents asserts that metalheal's taints never came to a Node of a cluster since the fleet
// started, however briefly.
func (f *fleet) expectNoTaintEvents(c *fleetCluster, node string) {
	GinkgoHelper()
	Expect(f.taintEvents(c, node)).To(BeEmpty(), "%s was tainted:\n%s", c.host(node), tl.dump(f.start, c.host(node)))
}

// nodeIn reads a Node of a cluster.
func nodeIn(ctx context.Context, g Gomega, c *fleetCluster, node string) *corev1.Node {
	n := &corev1.Node{}
	g.Expect(c.client.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed(), "node %s", c.host(node))
	return n
}

// taintsOn lists the keys of a Node's taints in a cluster.
func taintsOn(ctx context.Context, g Gomega, c *fleetCluster, node string) []string {
	var keys []string
	for _, t := range nodeIn(ctx, g, c, node).Spec.Taints {
		keys = append(keys, t.Key)
	}
	return keys
}

// cordoned reports whether a Node of a cluster is unschedulable.
func cordoned(ctx context.Context, g Gomega, c *fleetCluster, node string) bool {
	return nodeIn(ctx, g, c, node).Spec.Unschedulable
}

// leaseIn is a Node's maintenance lease in its own cluster (node-<node> in medik8s-leases, where the
// docs put it), or nil.
func leaseIn(ctx context.Context, g Gomega, c *fleetCluster, node string) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{}
	err := c.client.Get(ctx, client.ObjectKey{Namespace: harness.LeaseNamespace, Name: "node-" + node}, lease)
	if apierrors.IsNotFound(err) {
		return nil
	}
	g.Expect(err).NotTo(HaveOccurred())
	return lease
}

// createMachineHealthCheck creates our MachineHealthCheck of a workload cluster's Machines (fleetPool),
// remediating with a template of the Cluster's namespace, and waits until it reads every Node of the cluster
// healthy (through the Cluster's kubeconfig Secret). It is deleted, and gone, when the scenario ends.
func createMachineHealthCheck(ctx context.Context, c *fleetCluster, template string) *v1alpha1.MachineHealthCheck {
	GinkgoHelper()
	mhc := &v1alpha1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.wc.Namespace, Name: c.name},
		Spec: v1alpha1.MachineHealthCheckSpec{
			ClusterName: c.name,
			Selector:    metav1.LabelSelector{MatchLabels: fleetPool},
			UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
				{Type: "Ready", Status: "Unknown", Timeout: metav1.Duration{Duration: conditionDuration}},
				{Type: "Ready", Status: "False", Timeout: metav1.Duration{Duration: conditionDuration}},
			},
			RemediationTemplate: &v1alpha1.TemplateReference{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediationTemplate", Name: template},
		},
	}
	Expect(k8s.Create(ctx, mhc)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, mhc))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), &v1alpha1.MachineHealthCheck{}))
		}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(BeTrue())
	})
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), mhc)).To(Succeed())
		g.Expect(mhc.Status.ExpectedMachines).To(HaveValue(BeEquivalentTo(len(c.wc.Nodes()))))
		g.Expect(mhc.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(len(c.wc.Nodes()))))
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
	return mhc
}

// waitRequestOf waits for a remediation request to exist, owned by the Machine of a name, and returns it.
func waitRequestOf(ctx context.Context, key client.ObjectKey, machine string) *v1alpha1.PowerCycleRemediation {
	GinkgoHelper()
	var pcr *v1alpha1.PowerCycleRemediation
	Eventually(func(g Gomega) {
		var err error
		pcr, err = getPCR(ctx, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pcr).NotTo(BeNil(), "no remediation request %s yet", key)
		g.Expect(pcr.OwnerReferences).To(ContainElement(And(HaveField("Kind", "Machine"), HaveField("Name", machine))))
	}).WithContext(ctx).WithTimeout(detectWait).WithPolling(poll).Should(Succeed())
	return pcr
}

// eventsOn lists the events recorded about an object.
func eventsOn(ctx context.Context, g Gomega, o client.Object) []corev1.Event {
	var list corev1.EventList
	g.Expect(k8s.List(ctx, &list, client.InNamespace(o.GetNamespace()))).To(Succeed())
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.UID == o.GetUID() {
			out = append(out, e)
		}
	}
	return out
}
