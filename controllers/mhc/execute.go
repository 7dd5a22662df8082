package mhc

import (
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// execute carries out the plan through the engine's executor (engine.Executor), Machine by Machine,
// several at once (executeParallel): a burst of failures is sent as one, not one round trip after the
// other, and a failure for one Machine is collected while the others proceed. Each Machine's conditions
// are its last write (After), after its request, as Cluster API's own MachineHealthCheck creates an
// external remediation request before it patches the Machine (patchUnhealthyTargets): no remediator reads
// HealthCheckSucceeded before it acts, and the request is out one round trip sooner; a Machine that has
// just failed has them written once every request of the pass went out, so that in a burst the requests
// are stored without the conditions' patches in between. The hand-over to the owner
// (OwnerRemediated=False) is the conditions themselves, after the Node's lease (takenLease). A request that
// could not be created is dropped from p.Status. Then the requests of Machines that are gone.
func (r *Reconciler) execute(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, p *plan) error {
	lm, err := r.starter(mhc, p.Site)
	if err != nil {
		return fmt.Errorf("lease manager: %w", err)
	}
	var jobs []engine.Job
	var targets []*targetPlan
	for i := range p.Targets {
		t := &p.Targets[i]
		if t.NewlyUnhealthy && t.Blocked != notBlocked {
			countSkipped(t.Blocked)
		}
		if t.Lease == nil && t.Conditions == nil && t.Out == nil && !t.Unconfirm {
			continue
		}
		j := engine.Job{Outcome: t.Out, ControlPlane: t.ControlPlane, Starts: t.MarkedForOwner}
		if t.Lease != nil {
			j.Node, j.Lease, j.From, j.Fresh = t.Lease.Node, true, t.Lease.From, t.Lease.Fresh
		}
		if t.Unconfirm {
			j.Unconfirm = t.Machine.Status.NodeRef.Name
		}
		jobs, targets = append(jobs, j), append(targets, t)
	}
	log := func(t *targetPlan) logr.Logger {
		return ctrl.LoggerFrom(ctx).WithValues("machine", klog.KObj(t.Machine))
	}
	event := func(t *targetPlan, typ, reason, format string, args ...any) {
		r.recorder.Eventf(t.Machine, mhc, typ, reason, actionRemediate, format, args...)
	}
	nodes := r.client
	if p.Site.Remote != nil {
		nodes = p.Site.Remote.Client() // the cluster the check read its Nodes from: never a same-named Node of another
	}
	x := &engine.Executor{Starter: lm, Nodes: nodes, Clock: r.clock, Limit: executeParallel, Recent: &r.recent,
		Check: metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: holderKind, Name: mhc.Name, UID: mhc.UID},
		Template: func(_ context.Context, i int) (template.Request, error) {
			t, st := targets[i], p.Steps[targets[i].Out.Create.Step]
			if st.Object == nil {
				return template.Request{}, fmt.Errorf("remediation template %s %s/%s was not read", st.Ref().Kind, st.Namespace, st.Template)
			}
			return template.Request{Template: st.Object, ClusterName: t.Machine.Spec.ClusterName, Target: metav1.OwnerReference{
				APIVersion: machineAPIVersion(t.Machine), Kind: "Machine", Name: t.Machine.Name, UID: t.Machine.UID}}, nil
		},
		TimedOut: func(i int, ref engine.Ref) {
			log(targets[i]).Info("Remediation step timed out", "kind", ref.Kind)
			event(targets[i], corev1.EventTypeWarning, EventRemediationRequestTimedOut,
				"%s %s ended without the Machine recovering (timeout or Succeeded=False)", ref.Kind, ref.Name)
		},
		Deleted: func(i int, ref engine.Ref) {
			log(targets[i]).Info("Deleted remediation request", "kind", ref.Kind)
			event(targets[i], corev1.EventTypeNormal, EventRemediationRequestDeleted, "Deleted %s %s", ref.Kind, ref.Name)
		},
		Leased: func(i int, skip *engine.Skip, _ error) { r.takenLease(mhc, targets[i], p, skip) },
		After: func(ctx context.Context, i int) error {
			t := targets[i]
			if out := t.Out; out != nil && out.Walk.Exhausted && out.Walk.Ended != nil {
				log(t).Info("All remediation steps ended, Machine still unhealthy")
				event(t, corev1.EventTypeWarning, EventRemediationsExhausted,
					"Every remediation step ended and the Machine is still unhealthy (%s)", t.Verdict.Reason)
			}
			if t.Conditions == nil {
				return nil
			}
			marking := trace.StartRegion(ctx, "conditions")
			defer marking.End()
			if err := r.writeMachineConditions(ctx, t.Machine, t.Conditions); err != nil {
				return fmt.Errorf("setting conditions on Machine %s: %w", t.Machine.Name, err)
			}
			if t.MarkedForOwner {
				log(t).Info("Marked Machine for remediation by its owner", "reason", t.Verdict.Reason)
				event(t, corev1.EventTypeNormal, EventMachineMarkedUnhealthy, "Machine marked for remediation by its owner: %s", t.Verdict.Message)
				observeDetection(t.Verdict.ExpiredAt, r.clock.Now())
			}
			return nil
		},
		Report: func(i int, res engine.Sent) {
			t := targets[i]
			st := p.Steps[t.Out.Create.Step]
			t.Out.Sent(res, st.Template)
			if e := p.entry(t.Machine.Name); e != nil {
				e.RemediationProgress = t.Out.Entry
			}
			switch {
			case res.Skip != nil:
				r.skipped(mhc, t, p, res.Skip)
			case res.Created:
				log(t).Info("Created remediation request", "kind", st.GVK.Kind, "template", st.Template, "reason", t.Verdict.Reason)
				event(t, corev1.EventTypeNormal, EventRemediationRequestCreated, "Created %s %s from template %s: %s",
					st.GVK.Kind, res.Ref.Name, st.Template, t.Verdict.Message)
				countCreated(st.GVK.Kind)
				if t.Out.Create.First {
					observeDetection(t.Verdict.ExpiredAt, res.At)
				}
			}
		},
	}
	errs := []error{x.Run(ctx, p.Release, jobs)}
	for _, o := range p.Orphans {
		if err := engine.Delete(ctx, r.client, o.Ref, o.UID); err != nil {
			errs = append(errs, fmt.Errorf("the request of a Machine that is gone: %w", err))
			continue
		}
		r.recent.Deleted(mhc.UID, "", o.Ref, r.clock.Now())
		ctrl.LoggerFrom(ctx).Info("Deleted the remediation request of a Machine that is gone", "kind", o.Ref.Kind,
			"request", klog.KRef(o.Ref.Namespace, o.Ref.Name))
		r.recorder.Eventf(mhc, nil, corev1.EventTypeNormal, EventRemediationRequestDeleted, actionRemediate,
			"Deleted %s %s: its Machine is gone", o.Ref.Kind, o.Ref.Name)
	}
	for _, e := range p.Events {
		r.recorder.Eventf(e.Regarding, e.Related, e.Type, e.Reason, actionCheck, "%s", e.Note)
	}
	return errors.Join(errs...)
}

// executeParallel is how many Machines execute works on at once: as many as the NodeHealthCheck's writes
// (nhc.DefaultMaxConcurrentWrites). At 16, a burst of 50 failing Machines went out in four waves of
// round trips (make bench-peers: the last request stored 845 ms after the expiry, against 371 ms at 64).
const executeParallel = 64

// entry is a Machine's status entry in the plan, nil when it has none.
func (p *plan) entry(machine string) *v1alpha1.UnhealthyMachine {
	i := slices.IndexFunc(p.Status.UnhealthyMachines, func(um v1alpha1.UnhealthyMachine) bool { return um.Name == machine })
	if i < 0 {
		return nil
	}
	return &p.Status.UnhealthyMachines[i]
}

// patchStatus writes the check's status when it changed (or may have: engine.StatusWrites), failing on a
// conflict (the status is the check's memory: a stale copy must not overwrite a newer one).
func (r *Reconciler) patchStatus(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, status v1alpha1.MachineHealthCheckStatus) error {
	changed := !equality.Semantic.DeepEqual(mhc.Status, status)
	updated := mhc.DeepCopy()
	updated.Status = status
	// An update guarded by the resourceVersion: the same as a patch with optimistic locking, and cheaper
	// for the API server (see the power-cycle remediator's persist). Written unchanged too when the check
	// is not the copy the last write left (engine.StatusWrites).
	if err := r.statuses.Write(ctx, r.client, updated, changed); err != nil {
		return fmt.Errorf("updating the status of MachineHealthCheck %s: %w", client.ObjectKeyFromObject(mhc), err)
	}
	return nil
}

// takenLease records what came of a Machine's node lease (plan: safety.go) written without a request
// (engine.Executor): a lease with a request is taken with it (engine.Starter.Send). Before the hand-over to
// the Machine's owner the lease comes first (medik8s' contract: nothing acts on a Node before its lease is
// held), a control-plane Machine's under the manager's control-plane claim: a lease someone else took
// meanwhile, or that could not be taken, takes the hand-over back, a skip; and so does another
// control-plane Node's lease for a control-plane Machine. Both the claim and the lease are the site's: the
// management cluster's, or the workload cluster's (a claim of its own, so that its checks start one
// control-plane Node at a time, whatever the other clusters do).
func (r *Reconciler) takenLease(mhc *v1alpha1.MachineHealthCheck, t *targetPlan, p *plan, skip *engine.Skip) {
	if skip != nil && !t.MarkedForOwner {
		r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeWarning, EventLeaseNotRenewed, actionRemediate,
			"The Machine is being remediated but the lease of node %s is now held by %q", t.Lease.Node.Name, skip.Holder)
		return
	}
	t.keepFromOwner()
	if skip != nil {
		r.skipped(mhc, t, p, skip)
	}
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
	s := engine.Starter{Duration: r.opts.LeaseDuration, Claim: r.cpClaim, Cluster: r.nodeCluster(site), Check: claimKey(mhc),
		Client: r.client, Live: r.apiReader}
	var err error
	if site.Remote != nil {
		s.Leases, err = leases.NewManager(site.Remote.Client(), holder, r.clock, leases.WithNamespace(r.opts.LeaseNamespace),
			leases.WithNamespaceCreation())
	} else {
		s.Leases, err = leases.NewManager(r.client, holder, r.clock, leases.WithNamespace(r.opts.LeaseNamespace), leases.WithLiveReader(r.apiReader))
	}
	return s, err
}

// skipped records a skip execute found (a lease or a request someone else created a moment ago) in the
// Machine's status entry, and when to look again; its event and the metric once per reason and message, as
// the plan's skips (engine.Skip.Event).
func (r *Reconciler) skipped(mhc *v1alpha1.MachineHealthCheck, t *targetPlan, p *plan, skip *engine.Skip) {
	t.Blocked, t.Skip = blocker(skip.Reason), skip
	p.NextCheck = engine.Earliest(p.NextCheck, skip.Retry)
	if e := p.entry(t.Machine.Name); e != nil {
		e.SkipReason, e.SkipMessage = skip.Reason, skip.Message
	}
	ev := skip.Event(t.Was.SkipReason, t.Was.SkipMessage, "Machine", t.Verdict.Reason)
	if ev == nil {
		return
	}
	countSkipped(t.Blocked)
	r.recorder.Eventf(t.Machine, mhc, corev1.EventTypeWarning, EventRemediationSkipped, actionRemediate, "%s", ev.Note)
}

// claimKey is the check's key in the control-plane claim.
func claimKey(mhc *v1alpha1.MachineHealthCheck) string {
	return engine.ClaimKey(holderKind, client.ObjectKeyFromObject(mhc))
}
