package nhc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/metrics"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// execute carries out the plan through the engine's executor (engine.Executor: the leases the check no
// longer needs let go first, then each Node's writes, those of Nodes that have just failed first, then the
// leases that follow their requests) and records what it created in p.Entries; what fails is returned,
// joined, for a rate-limited retry. Events and metrics are emitted here.
func (r *Reconciler) execute(ctx context.Context, check *v1alpha1.NodeHealthCheck, in observed, p *plan) error {
	lm, err := r.starter(check.Name, in.Holder)
	if err != nil {
		return fmt.Errorf("lease manager: %w", err)
	}
	jobs := make([]engine.Job, 0, len(p.Outcomes)+len(p.Unconfirm))
	for _, o := range p.Outcomes {
		jobs = append(jobs, engine.JobOf(o))
	}
	for _, name := range p.Unconfirm {
		if !slices.ContainsFunc(jobs, func(j engine.Job) bool { return j.Unconfirm == name }) {
			jobs = append(jobs, engine.Job{Unconfirm: name}) // nothing (left) to delete
		}
	}
	var notRenewed, released []event // a lease gone with its remediation: the event is the record of its release
	x := &engine.Executor{Starter: lm, Nodes: r.client, Clock: r.clock, Limit: r.opts.MaxConcurrentWrites, Recent: &r.recent,
		Check: metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: holderKind, Name: check.Name, UID: check.UID},
		Template: func(_ context.Context, i int) (template.Request, error) {
			o := jobs[i].Outcome
			return template.Request{Template: in.Steps[o.Create.Step].Object,
				Target: metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: o.Target.Node.Name, UID: o.Target.Node.UID}}, nil
		},
		Deleted: func(_ int, ref engine.Ref) {
			ctrl.LoggerFrom(ctx).V(4).Info("Deleted remediation request", "request", ref.String())
		},
		Leased: func(i int, skip *engine.Skip, _ error) {
			if node := jobs[i].Node; skip != nil {
				notRenewed = append(notRenewed, warning(EventLeaseNotRenewed, actionLease, node.Name,
					fmt.Sprintf("Node %s is being remediated but its lease is now held by %q until %s", node.Name, skip.Holder, skip.Until.UTC().Format(time.RFC3339))))
			}
		},
		Released: func(name string) {
			released = append(released, normal(EventNodeLeaseReleased, actionLease, name,
				fmt.Sprintf("%s/%s deleted by its holder", r.opts.LeaseNamespace, leases.LeaseName(name))))
		},
		Report: func(i int, res engine.Sent) { r.sent(ctx, in, p, jobs[i].Outcome, res) },
	}
	err = x.Run(ctx, p.Release, jobs)
	slices.SortFunc(notRenewed, func(a, b event) int { return strings.Compare(a.Node, b.Node) })
	slices.SortFunc(released, func(a, b event) int { return strings.Compare(a.Node, b.Node) })
	p.Events = append(append(p.Events, notRenewed...), released...)
	metrics.UnhealthyTargets.WithLabelValues(metrics.CheckerNHC, check.Name).Set(float64(p.Unhealthy))
	r.emit(check, p.Events, true)
	return err
}

// sent records the request sent for o (engine.Executor.Report): created or adopted in its Node's status
// entry, or its skip.
func (r *Reconciler) sent(ctx context.Context, in observed, p *plan, o *engine.Outcome, res engine.Sent) {
	name, st := o.Target.Name, in.Steps[o.Create.Step]
	ev := o.Sent(res, st.Template)
	p.Entries[name].RemediationProgress = o.Entry
	switch {
	case res.Skip != nil:
		p.at(res.Skip.Retry)
		if !res.Skip.Until.IsZero() {
			p.at(res.Skip.Until.Add(time.Second))
		}
		if ev != nil {
			p.Skipped = append(p.Skipped, res.Skip.Reason)
			p.Events = append(p.Events, nodeEvent(name, res.Skip.Reason, *ev))
		}
		return
	case res.Err != nil:
		return
	case res.Adopted:
		ctrl.LoggerFrom(ctx).V(4).Info("Adopted remediation request", "node", name, "request", res.Ref.String())
		return
	}
	// What decide would have asked for had the request already existed: the lease's renewal (the step's
	// timeout is Admit's).
	p.at(res.At.Add(r.opts.LeaseDuration / 2))
	p.Events = append(p.Events, r.created(ctx, in, o, res))
}

// created counts and logs the request res created for o, and returns its event.
func (r *Reconciler) created(ctx context.Context, in observed, o *engine.Outcome, res engine.Sent) event {
	metrics.RemediationsCreated.WithLabelValues(metrics.CheckerNHC, res.Ref.Kind).Inc()
	if o.Create.First && !o.Target.ExpiredAt.IsZero() {
		metrics.DetectionDelay.WithLabelValues(metrics.CheckerNHC).Observe(res.At.Sub(o.Target.ExpiredAt).Seconds())
	}
	name := o.Target.Name
	msg := fmt.Sprintf("Created %s for node %s, unhealthy (%s)", res.Ref, name, o.Target.Why)
	if n := len(in.Steps); n > 1 {
		msg += fmt.Sprintf(": escalation step %d of %d", o.Create.Step+1, n)
	}
	ctrl.LoggerFrom(ctx).Info("Created remediation request", "node", name, "request", res.Ref.String(), "reason", o.Target.Why)
	return normal(EventRemediationCreated, actionCreate, name, msg)
}

// emit records the events of actions (actions true: creations, time-outs, deletions, leases) or of
// decisions (actions false: skips and check-wide transitions, with the skipped metric). Decision events
// are emitted only once the status that records the decision is written, so that a reconcile working
// from a stale cache, whose status write is refused, does not report them twice.
func (r *Reconciler) emit(check *v1alpha1.NodeHealthCheck, evs []event, actions bool) {
	for _, ev := range evs {
		if isDecision(ev) == actions {
			continue
		}
		if ev.Node != "" {
			r.recorder.Eventf(check, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ev.Node}}, ev.Type, ev.Reason, ev.Action, "%s", ev.Message)
		} else {
			r.recorder.Eventf(check, nil, ev.Type, ev.Reason, ev.Action, "%s", ev.Message)
		}
	}
}

func isDecision(ev event) bool {
	return ev.Action == actionSkip || ev.Action == actionCheck || ev.Action == actionWait
}

// nodeCluster is the cluster of the check's Nodes (the manager's own) as the control-plane claim reads it:
// node leases live, Node roles from the cache.
func (r *Reconciler) nodeCluster() gates.NodeCluster {
	return gates.NodeCluster{Leases: r.liveReader(), LeaseNamespace: r.opts.LeaseNamespace, Clock: r.clock,
		IsControlPlane: func(ctx context.Context, name string) (bool, error) {
			node, err := r.nodeNamed(ctx, name)
			return node != nil && isControlPlane(node), err
		}}
}

// starter writes the check's leases, as holder, in the lease namespace (reading a lease live after a lost
// race), and its requests.
func (r *Reconciler) starter(check, holder string) (engine.Starter, error) {
	lm, err := leases.NewManager(r.client, holder, r.clock, leases.WithNamespace(r.opts.LeaseNamespace),
		leases.WithLiveReader(r.liveReader()))
	return engine.Starter{Leases: lm, Duration: r.opts.LeaseDuration, Claim: r.cpClaim, Cluster: r.nodeCluster(),
		Check: claimKey(check), Client: r.client, Live: r.liveReader()}, err
}

// claimKey is the check's key in the control-plane claim.
func claimKey(check string) string {
	return engine.ClaimKey(holderKind, types.NamespacedName{Name: check})
}

// liveReader reads from the API server.
func (r *Reconciler) liveReader() client.Reader {
	if r.apiReader != nil {
		return r.apiReader
	}
	return r.client
}

func findEntry(list []v1alpha1.UnhealthyNode, name string) *v1alpha1.UnhealthyNode {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}
