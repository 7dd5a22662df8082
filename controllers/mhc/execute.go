package mhc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// execute carries out the plan, Machine by Machine, several at once (executeParallel): a burst of failures
// is sent as one, not one round trip after the other. A failure for one Machine is collected and the
// others proceed. A request that could not be created is dropped from p.Status. The leases the check no
// longer needs are released first: a control-plane Machine starts only while no other control-plane
// Node's lease is held, the check's own too (engine.Starter). The leases of the requests that went out
// before them (engine.LeaseAfter) are taken last, once every request of the reconcile went out, and each
// request is reported once its lease is settled (started).
func (r *Reconciler) execute(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, p *plan) []error {
	lm, err := r.starter(mhc, p.Site)
	if err != nil {
		return []error{fmt.Errorf("lease manager: %w", err)}
	}
	var errs []error
	for _, n := range p.Release {
		if err := lm.Release(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	templates := &templateMemo{m: map[v1alpha1.TemplateReference]templateResult{}}
	p.mu = &sync.Mutex{}
	var work []int
	for i := range p.Targets {
		t := &p.Targets[i]
		if t.NewlyUnhealthy && t.Blocked != notBlocked {
			countSkipped(t.Blocked)
		}
		if t.Lease != nil || t.Conditions != nil || t.Out != nil || t.Unconfirm {
			work = append(work, i)
		}
	}
	sends := make([]*sending, len(work))
	engine.InParallel(ctx, executeParallel, len(work), func(ctx context.Context, j int) {
		t := &p.Targets[work[j]]
		leasing := trace.StartRegion(ctx, "lease")
		leaseErr := r.takeLease(ctx, lm, mhc, t, p)
		leasing.End()
		writing := trace.StartRegion(ctx, "Machine")
		var err error
		sends[j], err = r.executeTarget(ctx, lm, mhc, t, p, templates)
		writing.End()
		if err = errors.Join(leaseErr, err); err != nil {
			defer p.lock()()
			errs = append(errs, err)
		}
	})
	sent := make([]*engine.Sent, len(sends))
	for j, s := range sends {
		if s != nil {
			sent[j] = &s.Sent
		}
	}
	trace.WithRegion(ctx, "leases after", func() { lm.LeasesAfter(ctx, executeParallel, sent) })
	for _, s := range sends {
		if s == nil {
			continue
		}
		if err := r.started(ctx, mhc, s, p); err != nil {
			errs = append(errs, fmt.Errorf("machine %s: %w", s.t.Machine.Name, err))
		}
	}
	for _, o := range p.Orphans {
		if err := engine.Delete(ctx, r.client, o.Ref, o.UID); err != nil {
			errs = append(errs, fmt.Errorf("the request of a Machine that is gone: %w", err))
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleted the remediation request of a Machine that is gone", "kind", o.Ref.Kind,
			"request", klog.KRef(o.Ref.Namespace, o.Ref.Name))
		r.recorder.Eventf(mhc, nil, corev1.EventTypeNormal, EventRemediationRequestDeleted, actionRemediate,
			"Deleted %s %s: its Machine is gone", o.Ref.Kind, o.Ref.Name)
	}
	for _, e := range p.Events {
		r.recorder.Eventf(e.Regarding, e.Related, e.Type, e.Reason, actionCheck, "%s", e.Note)
	}
	return errs
}

// executeParallel is how many Machines execute works on at once: as many as the NodeHealthCheck's writes
// (nhc.DefaultMaxConcurrentWrites). At 16, a burst of 50 failing Machines went out in four waves of
// round trips (make bench-peers: the last request stored 845 ms after the expiry, against 371 ms at 64).
const executeParallel = 64

// templateResult memoises one template read per reconcile.
type templateResult struct {
	obj *unstructured.Unstructured
	err error
}

// templateMemo holds the templates read in one reconcile, for the Machines executed at once.
type templateMemo struct {
	mu sync.Mutex
	m  map[v1alpha1.TemplateReference]templateResult
}

// get returns the step's template, read once (load) for every Machine of the reconcile: the others wait
// for the first read.
func (m *templateMemo) get(s step, load func() templateResult) templateResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	res, ok := m.m[s.Template]
	if !ok {
		res = load()
		m.m[s.Template] = res
	}
	return res
}

// executeTarget makes one Machine's writes: its requests' time-outs and deletions, the request to create
// (engine.Starter.Send, which it returns for started to report once its lease is settled), then the
// Machine's conditions. The conditions follow the create, as Cluster API's own MachineHealthCheck creates
// an external remediation request before it patches the Machine (patchUnhealthyTargets): no remediator
// reads HealthCheckSucceeded before it acts, and the request is out one round trip sooner. The hand-over
// to the owner (OwnerRemediated=False) is the conditions themselves, after the Node's lease (takeLease).
func (r *Reconciler) executeTarget(ctx context.Context, lm engine.Starter, mhc *v1alpha1.MachineHealthCheck, t *targetPlan, p *plan, templates *templateMemo) (*sending, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("machine", klog.KObj(t.Machine))
	var errs []error
	out := cmp.Or(t.Out, &engine.Outcome{})
	for _, req := range requests(out, out.Walk.TimeOut) {
		if err := engine.MarkTimedOut(ctx, r.client, req.Ref, r.clock.Now()); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("Remediation step timed out", "kind", req.Ref.Kind)
		r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeWarning, EventRemediationRequestTimedOut, actionRemediate,
			"%s %s ended without the Machine recovering (timeout or Succeeded=False)", req.Ref.Kind, req.Ref.Name)
	}
	if out.Walk.Exhausted && out.Walk.Ended != nil {
		log.Info("All remediation steps ended, Machine still unhealthy")
		r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeWarning, EventRemediationsExhausted, actionRemediate,
			"Every remediation step ended and the Machine is still unhealthy (%s)", t.Verdict.Reason)
	}
	for _, req := range requests(out, out.Walk.Delete, out.Delete) {
		if err := engine.Delete(ctx, r.client, req.Ref, req.UID); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("Deleted remediation request", "kind", req.Ref.Kind)
		r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeNormal, EventRemediationRequestDeleted, actionRemediate,
			"Deleted %s %s", req.Ref.Kind, req.Ref.Name)
	}
	if t.Unconfirm && len(errs) == 0 { // after the requests it confirmed are deleted
		if err := r.unconfirm(ctx, p.Site, t.Machine.Status.NodeRef.Name); err != nil {
			errs = append(errs, err)
		}
	}
	var sent *sending
	if c := out.Create; c != nil {
		creating := trace.StartRegion(ctx, "create")
		sent = r.createRequest(ctx, lm, mhc, t, p.Steps[c.Step], c.Name, templates)
		creating.End()
	}
	if t.Conditions != nil {
		marking := trace.StartRegion(ctx, "conditions")
		err := r.writeMachineConditions(ctx, t.Machine, t.Conditions)
		marking.End()
		if err != nil {
			errs = append(errs, fmt.Errorf("setting conditions on Machine %s: %w", t.Machine.Name, err))
		} else if t.MarkedForOwner {
			log.Info("Marked Machine for remediation by its owner", "reason", t.Verdict.Reason)
			r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeNormal, EventMachineMarkedUnhealthy, actionRemediate,
				"Machine marked for remediation by its owner: %s", t.Verdict.Message)
			observeDetection(t.Verdict.ExpiredAt, r.clock.Now())
		}
	}
	if len(errs) > 0 {
		return sent, fmt.Errorf("machine %s: %w", t.Machine.Name, errors.Join(errs...))
	}
	return sent, nil
}

// sending is a request execute sent for a Machine (engine.Starter.Send), reported by started.
type sending struct {
	engine.Sent
	t    *targetPlan
	step step
	name string
	// at is when it was created: the end of the Machine's detection.
	at time.Time
}

// started reports a request execute sent, once its lease is settled: created (its event, log and
// metrics), or a skip (someone else's lease or request: the Machine's status entry says so), or a failure;
// a request that was not created is dropped from the status, as is one deleted again.
func (r *Reconciler) started(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, s *sending, p *plan) error {
	t, st := s.t, s.step
	switch {
	case s.Skip != nil:
		p.dropRecord(t.Machine.Name, st)
		r.skipped(mhc, t, p, s.Skip)
		unlock := p.lock()
		p.NextCheck = engine.Earliest(p.NextCheck, s.Skip.Retry)
		unlock()
		return s.Err // a lease taken for the request that could not be let go
	case s.Err != nil:
		p.dropRecord(t.Machine.Name, st)
		return s.Err
	case s.Created:
		ctrl.LoggerFrom(ctx).Info("Created remediation request", "machine", klog.KObj(t.Machine), "kind", st.GVK.Kind,
			"template", st.Template.Name, "reason", t.Verdict.Reason)
		r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeNormal, EventRemediationRequestCreated, actionRemediate,
			"Created %s %s from template %s: %s", st.GVK.Kind, cmp.Or(s.name, t.Machine.Name), st.Template.Name, t.Verdict.Message)
		countCreated(st.GVK.Kind)
		if t.Out.Create.First {
			observeDetection(t.Verdict.ExpiredAt, s.at)
		}
	}
	return s.LeaseErr
}

// createRequest instantiates the step's template for the Machine and sends it with its Node's lease
// (engine.Starter.Send): the lease first, or after every request of the reconcile (engine.LeaseAfter).
func (r *Reconciler) createRequest(ctx context.Context, lm engine.Starter, mhc *v1alpha1.MachineHealthCheck, t *targetPlan, s step, name string, templates *templateMemo) *sending {
	sent := &sending{t: t, step: s, name: name}
	key := types.NamespacedName{Namespace: s.Template.Namespace, Name: s.Template.Name}
	res := templates.get(s, func() templateResult {
		res := templateResult{obj: &unstructured.Unstructured{}}
		res.obj.SetAPIVersion(s.Template.APIVersion)
		res.obj.SetKind(s.Template.Kind)
		if res.err = r.apiReader.Get(ctx, key, res.obj); res.err != nil {
			res.err = fmt.Errorf("reading remediation template %s %s: %w", s.Template.Kind, key, res.err)
			r.recorder.Eventf(mhc, nil, corev1.EventTypeWarning, EventRemediationFailed, actionRemediate, "%s", res.err.Error())
		}
		return res
	})
	if res.err != nil {
		sent.Err = res.err
		return sent
	}
	emr, err := template.Instantiate(template.Request{
		Template: res.obj,
		Name:     cmp.Or(name, t.Machine.Name),
		NodeName: t.Machine.Status.NodeRef.Name,
		Target: metav1.OwnerReference{APIVersion: machineAPIVersion(t.Machine), Kind: "Machine",
			Name: t.Machine.Name, UID: t.Machine.UID},
		HealthCheck: metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "MachineHealthCheck",
			Name: mhc.Name, UID: mhc.UID},
		ClusterName:  t.Machine.Spec.ClusterName,
		ControlPlane: t.ControlPlane,
	})
	if err != nil {
		sent.Err = fmt.Errorf("instantiating %s: %w", key, err)
		return sent
	}
	q := engine.Send{Request: emr, Check: mhc.UID, ControlPlane: t.ControlPlane}
	if t.Lease != nil {
		q.Node, q.From, q.Fresh = t.Lease.Node, t.Lease.From, t.Lease.Fresh
	}
	sent.Sent, sent.at = lm.Send(ctx, q), r.clock.Now()
	return sent
}

// lock takes the plan's lock, when execute works on several Machines at once, and returns its release.
func (p *plan) lock() func() {
	if p.mu == nil {
		return func() {}
	}
	p.mu.Lock()
	return p.mu.Unlock
}

// dropRecord removes the record of a request that could not be created.
func (p *plan) dropRecord(machine string, s step) {
	defer p.lock()()
	dropRecord(&p.Status, machine, s)
}

// dropRecord removes the record of a request that could not be created.
func dropRecord(status *v1alpha1.MachineHealthCheckStatus, machine string, s step) {
	for i := range status.UnhealthyMachines {
		um := &status.UnhealthyMachines[i]
		if um.Name != machine {
			continue
		}
		um.Remediations = slices.DeleteFunc(um.Remediations, func(r v1alpha1.MachineRemediationRequest) bool {
			return s.matches(r) && r.TimedOut == nil
		})
	}
}

// patchStatus writes the check's status when it changed, failing on a conflict (the status is the
// check's memory: a stale copy must not overwrite a newer one).
func (r *Reconciler) patchStatus(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, status v1alpha1.MachineHealthCheckStatus) error {
	if equality.Semantic.DeepEqual(mhc.Status, status) {
		return nil
	}
	updated := mhc.DeepCopy()
	updated.Status = status
	// An update guarded by the resourceVersion: the same as a patch with optimistic locking, and cheaper
	// for the API server (see the power-cycle remediator's persist).
	if err := r.client.Status().Update(ctx, updated); err != nil {
		return fmt.Errorf("updating the status of MachineHealthCheck %s: %w", client.ObjectKeyFromObject(mhc), err)
	}
	return nil
}

// takeLease takes, renews or takes over the Machine's node lease for the check (plan: safety.go), through
// engine.Starter; a request's lease is taken with it (createRequest, engine.Starter.Send). Before the
// hand-over to the Machine's owner the lease comes first (medik8s' contract: nothing acts on a Node before
// its lease is held), a control-plane Machine's under the manager's control-plane claim: a lease someone
// else took meanwhile turns the hand-over into a skip, and so does another control-plane Node's lease for a
// control-plane Machine. Both the claim and the lease are the site's: the management cluster's, or the
// workload cluster's (a claim of its own, so that its checks start one control-plane Node at a time,
// whatever the other clusters do).
func (r *Reconciler) takeLease(ctx context.Context, s engine.Starter, mhc *v1alpha1.MachineHealthCheck, t *targetPlan, p *plan) error {
	if t.Lease == nil || t.create() != nil {
		return nil
	}
	starts := t.MarkedForOwner
	skip, err := s.TakeLease(ctx, t.Lease.Node, starts && isControlPlaneTarget(observedTarget{Machine: t.Machine, Node: t.Lease.Node}),
		t.Lease.From...)
	switch {
	case skip == nil && err == nil:
		return nil
	case skip != nil && !starts:
		r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeWarning, EventLeaseNotRenewed, actionRemediate,
			"The Machine is being remediated but the lease of node %s is now held by %q", t.Lease.Node.Name, skip.Holder)
		return nil
	}
	t.keepFromOwner()
	if err != nil {
		return err
	}
	r.skipped(mhc, t, p, skip)
	defer p.lock()()
	p.NextCheck = engine.Earliest(p.NextCheck, skip.Retry)
	return nil
}

// nodeCluster is the cluster of the check's Nodes as the control-plane claim reads it: node leases live,
// Node roles from the cache. The management cluster (key "", shared with the NodeHealthChecks) reads its
// leases through the manager's API reader; a workload cluster (keyed by its Cluster) through its
// connection's client, whose calls are bounded, so that a cluster that stops answering holds up only its
// own checks.
func (r *Reconciler) nodeCluster(site nodeSite) gates.NodeCluster {
	nc := gates.NodeCluster{Leases: r.apiReader, LeaseNamespace: r.opts.LeaseNamespace, Clock: r.clock,
		IsControlPlane: r.controlPlaneNode(site)}
	if site.Remote != nil {
		nc.Key, nc.Leases = "workload "+site.Key.String(), site.Remote.Client()
	}
	return nc
}

// starter makes the check's writes in the cluster of its Nodes. In the management cluster it writes
// through the manager's client (Leases cached in the lease namespace only) and re-reads from the API server
// after a lost race. In a workload cluster it reads and writes through the connection's client, and makes
// the lease namespace there on first use: Cluster API makes workload clusters without it.
func (r *Reconciler) starter(mhc *v1alpha1.MachineHealthCheck, site nodeSite) (engine.Starter, error) {
	holder := checkLeaseHolder(mhc.Name)
	s := engine.Starter{Duration: r.opts.LeaseDuration, Claim: r.cpClaim, Cluster: r.nodeCluster(site), Client: r.client, Live: r.apiReader}
	var err error
	if site.Remote != nil {
		s.Leases, err = leases.NewManager(site.Remote.Client(), holder, r.clock, leases.WithNamespace(r.opts.LeaseNamespace),
			leases.WithNamespaceCreation())
	} else {
		s.Leases, err = leases.NewManager(r.client, holder, r.clock, leases.WithNamespace(r.opts.LeaseNamespace), leases.WithLiveReader(r.apiReader))
	}
	return s, err
}

// skipped records a skip execute found (a lease or a request someone else created a moment ago): in the
// Machine's status entry and a Warning.
func (r *Reconciler) skipped(mhc *v1alpha1.MachineHealthCheck, t *targetPlan, p *plan, skip *engine.Skip) {
	t.Blocked, t.Skip = blocker(skip.Reason), skip
	countSkipped(t.Blocked)
	unlock := p.lock()
	for i := range p.Status.UnhealthyMachines {
		if um := &p.Status.UnhealthyMachines[i]; um.Name == t.Machine.Name {
			um.SkipReason, um.SkipMessage = skip.Reason, skip.Message
		}
	}
	unlock()
	r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeWarning, EventRemediationSkipped, actionRemediate, "%s",
		skip.Event("", "", "Machine", t.Verdict.Reason).Note)
}

// unconfirm removes the confirmation annotation from the Node, in the cluster the check read its Nodes
// from in this reconcile (site): never a same-named Node of another cluster.
func (r *Reconciler) unconfirm(ctx context.Context, site nodeSite, node string) error {
	c := r.client
	if site.Remote != nil {
		c = site.Remote.Client()
	}
	return engine.Unconfirm(ctx, c, node)
}
