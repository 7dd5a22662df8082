package nhc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/metrics"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// createResult is what the creation of an outcome's request (create, engine.Starter.Send) came to.
type createResult struct {
	engine.Sent
	// remediation is set when the request was created (or found already ours: adopted).
	remediation *v1alpha1.NodeRemediation
}

// execute carries out the plan. The requests of Nodes that have just failed go out first, in parallel
// (each with the node lease, see create): detection waits for no other write. Then the time-outs,
// deletions, lease releases and renewals, in parallel; then the requests that must follow a time-out or
// deletion of their Node's request, and those of control-plane Nodes, which must follow the release of
// a lease the check no longer needs (the control-plane claim counts every lease on another control-plane
// Node, the check's own too); and last the leases of the requests that went out before them. What
// it creates is recorded in p.Entries; what fails is returned, joined, for a rate-limited retry. Events
// and metrics are emitted here.
func (r *Reconciler) execute(ctx context.Context, check *v1alpha1.NodeHealthCheck, in observed, p *plan) error {
	lm, err := r.starter(in.Holder)
	if err != nil {
		return fmt.Errorf("lease manager: %w", err)
	}
	var creates []*engine.Outcome
	var first, after []int
	for _, o := range p.Outcomes {
		switch {
		case o.Create == nil:
			continue
		case len(o.Walk.TimeOut) > 0 || len(o.Walk.Delete) > 0 || isControlPlane(o.Target.Node):
			after = append(after, len(creates)) // after its Node's request is timed out or deleted
		default:
			first = append(first, len(creates))
		}
		creates = append(creates, o)
	}
	results := make([]createResult, len(creates))
	createEach := func(which []int) {
		engine.InParallel(ctx, r.opts.MaxConcurrentWrites, len(which), func(ctx context.Context, j int) {
			defer trace.StartRegion(ctx, "create").End()
			results[which[j]] = r.create(ctx, lm, check, in, creates[which[j]])
		})
	}
	createEach(first)
	var errs []error
	trace.WithRegion(ctx, "tidy", func() { errs = r.tidy(ctx, lm, p) })
	createEach(after)
	// The leases of the requests that went out before them (engine.Starter.LeasesAfter).
	sent := make([]*engine.Sent, len(results))
	for i := range results {
		sent[i] = &results[i].Sent
	}
	lm.LeasesAfter(ctx, r.opts.MaxConcurrentWrites, sent)

	for i, o := range creates {
		res, name, c := results[i], o.Target.Name, o.Create
		e := p.Entries[name]
		if res.Deleted {
			r.recent.deleted(res.Ref, r.clock.Now())
		}
		switch {
		case res.Err != nil:
			errs = append(errs, res.Err)
		case res.Skip != nil:
			p.skip(e, findEntry(check.Status.UnhealthyNodes, name), *res.Skip, o.Target.Why)
			if !res.Skip.Until.IsZero() {
				p.at(res.Skip.Until.Add(time.Second))
			}
		case res.Adopted:
			if !c.Again {
				e.Remediations = append(e.Remediations, *res.remediation)
			}
			e.SkipReason, e.SkipMessage = "", ""
			ctrl.LoggerFrom(ctx).V(4).Info("Adopted remediation request", "node", name, "request", res.Ref.String())
		default:
			if res.LeaseErr != nil {
				errs = append(errs, res.LeaseErr)
			}
			if !c.Again {
				e.Remediations = append(e.Remediations, *res.remediation)
			}
			e.SkipReason, e.SkipMessage = "", ""
			// What decide would have asked for had the request already existed: the step's timeout and
			// the lease's renewal.
			if timeout := in.Steps[c.Step].Timeout; timeout > 0 {
				p.at(res.remediation.Started.Add(timeout))
			}
			p.at(res.remediation.Started.Add(r.opts.LeaseDuration / 2))
			p.Events = append(p.Events, r.created(ctx, in, o, res))
		}
	}

	metrics.UnhealthyTargets.WithLabelValues(metrics.CheckerNHC, check.Name).Set(float64(p.Unhealthy))
	r.emit(check, p.Events, true)
	return errors.Join(errs...)
}

// tidy carries out, in parallel, the plan's time-outs, deletions, lease releases and lease renewals, and
// returns what failed. Each concerns a different object.
func (r *Reconciler) tidy(ctx context.Context, lm engine.Starter, p *plan) []error {
	log := ctrl.LoggerFrom(ctx)
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	var jobs []func(context.Context)
	var released []event           // the lease is gone with the remediation: its event is the record of its release
	undeleted := map[string]bool{} // Nodes a request of which could not be deleted
	var notRenewed []event
	for _, o := range p.Outcomes {
		for _, ref := range o.Walk.TimeOut {
			jobs = append(jobs, func(ctx context.Context) {
				if err := engine.MarkTimedOut(ctx, r.client, ref, r.clock.Now()); err != nil {
					fail(err)
				}
			})
		}
		for _, ref := range slices.Concat(o.Walk.Delete, o.Delete) {
			jobs = append(jobs, func(ctx context.Context) {
				if err := engine.Delete(ctx, r.client, ref, ""); err != nil {
					fail(err)
					mu.Lock()
					defer mu.Unlock()
					undeleted[o.Target.Name] = true
					return
				}
				r.recent.deleted(ref, r.clock.Now())
				log.V(4).Info("Deleted remediation request", "request", ref.String())
			})
		}
		if node := o.Target.Node; o.Lease {
			jobs = append(jobs, func(ctx context.Context) {
				skip, err := lm.TakeLease(ctx, node, false, o.From...)
				switch {
				case skip != nil:
					mu.Lock()
					defer mu.Unlock()
					notRenewed = append(notRenewed, warning(EventLeaseNotRenewed, actionLease, node.Name,
						fmt.Sprintf("Node %s is being remediated but its lease is now held by %q until %s", node.Name, skip.Holder, skip.Until.UTC().Format(time.RFC3339))))
				case err != nil:
					fail(err)
				}
			})
		}
	}
	for _, name := range p.Release {
		jobs = append(jobs, func(ctx context.Context) {
			if err := lm.Release(ctx, name); err != nil {
				fail(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			released = append(released, normal(EventNodeLeaseReleased, actionLease, name,
				fmt.Sprintf("%s/%s deleted by its holder", r.opts.LeaseNamespace, leases.LeaseName(name))))
		})
	}
	engine.InParallel(ctx, r.opts.MaxConcurrentWrites, len(jobs), func(ctx context.Context, i int) { jobs[i](ctx) })
	// A confirmation goes once the requests it confirmed are deleted.
	unconfirm := slices.DeleteFunc(slices.Clone(p.Unconfirm), func(node string) bool { return undeleted[node] })
	engine.InParallel(ctx, r.opts.MaxConcurrentWrites, len(unconfirm), func(ctx context.Context, i int) {
		if err := engine.Unconfirm(ctx, r.client, unconfirm[i]); err != nil {
			fail(err)
		}
	})
	slices.SortFunc(notRenewed, func(a, b event) int { return strings.Compare(a.Node, b.Node) })
	slices.SortFunc(released, func(a, b event) int { return strings.Compare(a.Node, b.Node) })
	p.Events = append(p.Events, notRenewed...)
	p.Events = append(p.Events, released...)
	return errs
}

// created counts and logs the request res created for o, and returns its event.
func (r *Reconciler) created(ctx context.Context, in observed, o *engine.Outcome, res createResult) event {
	metrics.RemediationsCreated.WithLabelValues(metrics.CheckerNHC, res.Ref.Kind).Inc()
	if o.Create.First && !o.Target.ExpiredAt.IsZero() {
		metrics.DetectionDelay.WithLabelValues(metrics.CheckerNHC).Observe(res.remediation.Started.Sub(o.Target.ExpiredAt).Seconds())
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

// create creates the remediation request for the Node and takes the Node's lease, in the order every check
// follows (engine.Starter.Send): the lease first, except for a worker's PowerCycleRemediation, whose lease
// execute takes once every request of the reconcile went out (engine.LeaseAfter). A lease held by someone
// else turns into a skip, as do another control-plane Node's lease and a request of the same name created
// by someone else (its lease is let go).
func (r *Reconciler) create(ctx context.Context, s engine.Starter, check *v1alpha1.NodeHealthCheck, in observed, o *engine.Outcome) createResult {
	node, st := o.Target.Node, in.Steps[o.Create.Step]
	emr, err := template.Instantiate(template.Request{
		Template:     st.Template,
		Name:         cmp.Or(o.Create.Name, node.Name),
		NodeName:     node.Name,
		Target:       metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
		HealthCheck:  metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: holderKind, Name: check.Name, UID: check.UID},
		ControlPlane: isControlPlane(node),
	})
	if err != nil {
		return createResult{Sent: engine.Sent{Err: fmt.Errorf("instantiating %s for node %s: %w", st.Ref.Kind, node.Name, err)}}
	}
	res := createResult{Sent: s.Send(ctx, engine.Send{Node: node, Request: emr, Check: check.UID, ControlPlane: isControlPlane(node), Fresh: true})}
	if res.Err != nil || res.Skip != nil {
		return res
	}
	res.remediation = &v1alpha1.NodeRemediation{APIVersion: res.Ref.APIVersion, Kind: res.Ref.Kind, Namespace: res.Ref.Namespace,
		Name: res.Ref.Name, TemplateName: st.Ref.Name, Started: metav1.Time{Time: r.clock.Now()}}
	if res.Created {
		r.recent.created(remediationObject{Ref: res.Ref, TemplateName: st.Ref.Name, Created: res.remediation.Started.Time}, res.remediation.Started.Time)
	}
	return res
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
func (r *Reconciler) starter(holder string) (engine.Starter, error) {
	lm, err := leases.NewManager(r.client, holder, r.clock, leases.WithNamespace(r.opts.LeaseNamespace),
		leases.WithLiveReader(r.liveReader()))
	return engine.Starter{Leases: lm, Duration: r.opts.LeaseDuration, Claim: r.cpClaim, Cluster: r.nodeCluster(),
		Client: r.client, Live: r.liveReader()}, err
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
