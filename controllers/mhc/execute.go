package mhc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"slices"
	"sync"

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
// Node's lease is held, the check's own too (takeLease).
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
	engine.InParallel(ctx, executeParallel, len(work), func(ctx context.Context, j int) {
		t := &p.Targets[work[j]]
		leasing := trace.StartRegion(ctx, "lease")
		leaseErr := r.takeLease(ctx, lm, mhc, t, p)
		leasing.End()
		writing := trace.StartRegion(ctx, "Machine")
		err := errors.Join(leaseErr, r.executeTarget(ctx, lm, mhc, t, p, templates))
		writing.End()
		if err != nil {
			defer p.lock()()
			errs = append(errs, err)
		}
	})
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

func (r *Reconciler) executeTarget(ctx context.Context, lm engine.Starter, mhc *v1alpha1.MachineHealthCheck, t *targetPlan, p *plan, templates *templateMemo) error {
	log := ctrl.LoggerFrom(ctx).WithValues("machine", klog.KObj(t.Machine))
	var errs []error
	out := cmp.Or(t.Out, &engine.Outcome{})
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
	if c := out.Create; c != nil {
		st := p.Steps[c.Step]
		creating := trace.StartRegion(ctx, "create")
		created, skip, err := r.createRequest(ctx, lm, mhc, t, st, c.Name, templates)
		creating.End()
		switch {
		case skip != nil:
			p.dropRecord(t.Machine.Name, st)
			r.skipped(ctx, lm, mhc, t, p, skip)
		case err != nil:
			errs = append(errs, err)
			p.dropRecord(t.Machine.Name, st)
		case created:
			log.Info("Created remediation request", "kind", st.GVK.Kind, "template", st.Template.Name, "reason", t.Verdict.Reason)
			r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeNormal, EventRemediationRequestCreated, actionRemediate,
				"Created %s %s from template %s: %s", st.GVK.Kind, cmp.Or(c.Name, t.Machine.Name), st.Template.Name, t.Verdict.Message)
			countCreated(st.GVK.Kind)
			if c.First {
				observeDetection(t.Verdict.ExpiredAt, r.clock.Now())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("machine %s: %w", t.Machine.Name, errors.Join(errs...))
	}
	return nil
}

// createRequest instantiates the step's template for the Machine and creates it (engine.Starter). created
// is false when the request already existed: ours (adopted), or someone else's (a skip).
func (r *Reconciler) createRequest(ctx context.Context, lm engine.Starter, mhc *v1alpha1.MachineHealthCheck, t *targetPlan, s step, name string, templates *templateMemo) (created bool, skip *engine.Skip, err error) {
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
		return false, nil, res.err
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
		return false, nil, fmt.Errorf("instantiating %s: %w", key, err)
	}
	adopted, skip, err := lm.CreateRequest(ctx, emr, mhc.UID)
	return !adopted && skip == nil && err == nil, skip, err
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
// engine.Starter. Before a creation, or the hand-over to the Machine's owner, the lease comes first
// (medik8s' contract: nothing acts on a Node before its lease is held), a control-plane Machine's under the
// manager's control-plane claim: a lease someone else took meanwhile turns the remediation into a skip, and
// so does another control-plane Node's lease for a control-plane Machine. Both the claim and the lease are
// the site's: the management cluster's, or the workload cluster's (a claim of its own, so that its checks
// start one control-plane Node at a time, whatever the other clusters do).
func (r *Reconciler) takeLease(ctx context.Context, s engine.Starter, mhc *v1alpha1.MachineHealthCheck, t *targetPlan, p *plan) error {
	if t.Lease == nil {
		return nil
	}
	starts := t.create() != nil || t.MarkedForOwner
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
	if c := t.create(); c != nil {
		p.dropRecord(t.Machine.Name, p.Steps[c.Step])
		t.Out.Create = nil // the lease first, always
	}
	t.keepFromOwner()
	if err != nil {
		return err
	}
	r.skipped(ctx, engine.Starter{}, mhc, t, p, skip)
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
// Machine's status entry and a Warning; a lease just taken for it (lm with a lease manager) is let go.
func (r *Reconciler) skipped(ctx context.Context, lm engine.Starter, mhc *v1alpha1.MachineHealthCheck, t *targetPlan, p *plan, skip *engine.Skip) {
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
	if lm.Leases != nil && t.Lease != nil && t.Lease.Fresh {
		if err := lm.Release(ctx, t.Lease.Node.Name); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Releasing a node lease taken for a skipped Machine", "node", t.Lease.Node.Name)
		}
	}
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
