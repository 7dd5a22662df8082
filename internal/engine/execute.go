package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/template"
)

// Executor carries out what a check decided, the same for both kinds, in one order:
//
//  1. the leases the check no longer needs are let go, together: a control-plane start must follow them,
//     for the control-plane claim counts every lease on another control-plane Node, the check's own too;
//  2. each target's writes (a Job), the targets together (at most Limit at once), one write after the
//     other within a target: its Node's lease when it sends no request (renewed, taken over from its
//     requests' remediators, or taken for a start that is no request), its requests' time-outs and
//     deletions, a person's confirmation once those deletions are done, its new request (Starter.Send:
//     after its own time-outs and deletions), then its kind's own write (After). The targets whose new
//     request is their first write (a target that has just failed) go before the others, so that
//     detection waits for no other write;
//  3. the leases of the requests that went out before them (Starter.LeasesAfter), and then the kind's own
//     writes of the targets whose request went first: in a burst of failures, no other write competes
//     with the requests at the API server;
//  4. each request sent is reported (Report), in the order of the jobs.
//
// A failure is collected and the other writes proceed; Run returns them joined, for a retry. The hooks are
// how a kind differs: what its request is made of, its own write, and what it records of each write.
type Executor struct {
	// Starter writes the leases and the requests; its Client marks and deletes requests too.
	Starter Starter
	// Nodes writes the Nodes of the check (a person's confirmation goes); Clock stamps the time-outs.
	Nodes client.Client
	Clock clock.PassiveClock
	// Check is the check, as the requests it creates name their owner.
	Check metav1.OwnerReference
	// Limit bounds the targets worked on at once.
	Limit int
	// Recent remembers each request created or deleted, for the passes that follow while the cache lags
	// behind (nil: nothing).
	Recent *RecentWrites

	// Template says what job i's request is made of: its template, its owner reference to the target and
	// its Cluster (Run sets the rest). After is the kind's own write for job i, last of its writes.
	Template func(ctx context.Context, i int) (template.Request, error)
	After    func(ctx context.Context, i int) error
	// What the kind records of the writes (nil: nothing), called one at a time: a request of job i marked
	// timed out or deleted; job i's lease, without a request, that came to a skip or an error; a lease let
	// go; and, once every lease is settled, the request sent for job i (created, adopted, a skip or a
	// failure; Run returns its errors too).
	TimedOut, Deleted func(i int, ref Ref)
	Leased            func(i int, skip *Skip, err error)
	Released          func(node string)
	Report            func(i int, res Sent)
}

// A Job is one target's writes: what the check's pass decided (Outcome, nil: nothing of it) and its
// Node's lease.
type Job struct {
	Outcome *Outcome
	// Node is the target's Node, whose lease the job takes with its new request (nil: none); without one,
	// when Lease, the lease is renewed or taken over From the remediators of its requests, or taken for a
	// start that is no request (Starts: a Machine handed to its owner).
	Node          *corev1.Node
	Lease, Starts bool
	From          []string
	// ControlPlane: a control-plane target, whose lease comes first, under the control-plane claim. Fresh: no
	// request of the check's for it lives; a lease taken for its new request alone is let go should that
	// request be a skip.
	ControlPlane, Fresh bool
	// Unconfirm names the Node whose confirmation (v1alpha1.AnnotationConfirmedHealthy) goes once the
	// job's deletions are done ("": none).
	Unconfirm string
}

// JobOf is the job of a pass's outcome: its Node's lease as the pass decided, taken over from the
// remediators of the target's requests when a new one is sent, and let go should that one be a skip while
// none of the check's lives.
func JobOf(o *Outcome) Job {
	j := Job{Outcome: o, Node: o.Target.Node, Lease: o.Lease, From: o.From, ControlPlane: o.Target.CPKey != "",
		Fresh: len(o.Target.Requests) == 0}
	if o.Create != nil {
		j.From = Holders(o.Target.Requests)
	}
	if o.Unconfirm {
		j.Unconfirm = o.Target.NodeName
	}
	return j
}

// firstSends: the job's new request is its first write.
func (j Job) firstSends() bool {
	o := j.Outcome
	return o != nil && o.Create != nil && len(o.Walk.TimeOut)+len(o.Walk.Delete)+len(o.Delete) == 0 && j.Unconfirm == ""
}

// execution is one Run: what failed, and the requests sent.
type execution struct {
	*Executor
	mu   sync.Mutex
	errs []error
	sent []*Sent
}

// Run releases the leases of the Nodes in release and carries out jobs, in the Executor's order.
func (e *Executor) Run(ctx context.Context, release []string, jobs []Job) error {
	x := &execution{Executor: e, sent: make([]*Sent, len(jobs))}
	InParallel(ctx, e.Limit, len(release), func(ctx context.Context, i int) {
		err := e.Starter.Release(ctx, release[i])
		x.record(err, hook(err == nil && e.Released != nil, func() { e.Released(release[i]) }))
	})
	var first, rest []int
	for i, j := range jobs {
		if j.firstSends() {
			first = append(first, i)
		} else {
			rest = append(rest, i)
		}
	}
	for _, which := range [][]int{first, rest} {
		InParallel(ctx, e.Limit, len(which), func(ctx context.Context, k int) { x.job(ctx, which[k], jobs[which[k]]) })
	}
	trace.WithRegion(ctx, "leases after", func() { e.Starter.LeasesAfter(ctx, e.Limit, x.sent) })
	if e.After != nil {
		InParallel(ctx, e.Limit, len(first), func(ctx context.Context, k int) { x.record(e.After(ctx, first[k]), nil) })
	}
	for i, res := range x.sent {
		if res != nil {
			if res.Deleted { // again, after its lease-after found the Node someone else's (Starter.LeasesAfter)
				x.Recent.Deleted(x.Check.UID, jobs[i].Outcome.Target.Name, res.Ref, x.Clock.Now())
			}
			x.errs = append(x.errs, res.Err, res.LeaseErr)
			if e.Report != nil {
				e.Report(i, *res)
			}
		}
	}
	return errors.Join(x.errs...)
}

// job makes job i's writes.
func (x *execution) job(ctx context.Context, i int, j Job) {
	o := cmp.Or(j.Outcome, &Outcome{})
	// A start that is no request takes its Node's lease; a control-plane one without a Node goes through the
	// control-plane claim all the same.
	if o.Create == nil && (j.Lease && j.Node != nil || j.Starts && j.ControlPlane && j.Node == nil) {
		region := trace.StartRegion(ctx, "lease")
		skip, err := x.Starter.TakeLease(ctx, j.Node, j.Starts && j.ControlPlane, j.From...)
		region.End()
		x.record(err, hook(x.Leased != nil && (skip != nil || err != nil), func() { x.Leased(i, skip, err) }))
	}
	for _, ref := range o.Walk.TimeOut {
		err := MarkTimedOut(ctx, x.Starter.Client, ref, x.Clock.Now())
		x.record(err, hook(err == nil && x.TimedOut != nil, func() { x.TimedOut(i, ref) }))
	}
	deleted := true
	for _, ref := range slices.Concat(o.Walk.Delete, o.Delete) {
		// The request the check read, not one of the same name made since.
		var uid types.UID
		if k := slices.IndexFunc(o.Target.Requests, func(q Request) bool { return q.Ref == ref }); k >= 0 {
			uid = o.Target.Requests[k].UID
		}
		err := Delete(ctx, x.Starter.Client, ref, uid)
		deleted = deleted && err == nil
		if err == nil {
			x.Recent.Deleted(x.Check.UID, o.Target.Name, ref, x.Clock.Now())
		}
		x.record(err, hook(err == nil && x.Deleted != nil, func() { x.Deleted(i, ref) }))
	}
	if j.Unconfirm != "" && deleted { // once the requests it confirmed are gone
		x.record(Unconfirm(ctx, x.Nodes, j.Unconfirm), nil)
	}
	if o.Create != nil {
		region := trace.StartRegion(ctx, "create")
		x.sent[i] = x.send(ctx, i, j, o)
		region.End()
	}
	if x.After != nil && !j.firstSends() { // else once every request of the pass went out (Run)
		x.record(x.After(ctx, i), nil)
	}
}

// send instantiates job i's new request and sends it with its Node's lease.
func (x *execution) send(ctx context.Context, i int, j Job, o *Outcome) *Sent {
	q, err := x.Template(ctx, i)
	if err != nil {
		return &Sent{Err: err}
	}
	q.Name, q.NodeName, q.HealthCheck, q.ControlPlane = cmp.Or(o.Create.Name, o.Target.Name), o.Target.NodeName, x.Check, j.ControlPlane
	obj, err := template.Instantiate(q)
	if err != nil {
		return &Sent{Err: fmt.Errorf("instantiating the request for %s: %w", o.Target.Name, err)}
	}
	res := x.Starter.Send(ctx, j, obj, x.Check.UID)
	res.At = x.Clock.Now()
	if res.Created { // at once: the cache may show its deletion by someone else (ForgetDeleted) a moment later
		q := RequestOf(res.Ref, obj)
		q.Created = res.At
		x.Recent.Created(x.Check.UID, o.Target.Name, q, res.At)
	}
	return &res
}

// record collects err (nil: nothing failed) and calls report (when set), one at a time.
func (x *execution) record(err error, report func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.errs = append(x.errs, err)
	if report != nil {
		report()
	}
}

// hook is call when when is true, else nil.
func hook(when bool, call func()) func() {
	if !when {
		return nil
	}
	return call
}

// InParallel runs do for 0..n-1, at most limit at once, and waits for them: a check's writes about
// different objects go out together, not one round trip after the other. do reports through its own
// results.
func InParallel(ctx context.Context, limit, n int, do func(ctx context.Context, i int)) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(limit, 1))
	for i := range n {
		g.Go(func() error {
			do(gctx, i)
			return nil
		})
	}
	_ = g.Wait()
}

// Delete deletes the request ref (uid, when set, the one the check read, as a precondition: never a
// request of the same name made since); one gone already is nothing to do. The remediator's finalizer may
// keep it a while.
func Delete(ctx context.Context, c client.Client, ref Ref, uid types.UID) error {
	var opts []client.DeleteOption
	if uid != "" {
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	if err := c.Delete(ctx, ref.Object(), opts...); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", ref, err)
	}
	return nil
}

// Release lets go of the check's lease on node: the check no longer remediates it.
func (s Starter) Release(ctx context.Context, node string) error {
	if err := s.Leases.InvalidateLease(ctx, node); err != nil {
		return fmt.Errorf("releasing the lease of node %s: %w", node, err)
	}
	return nil
}
