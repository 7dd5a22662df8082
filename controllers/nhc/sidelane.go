package nhc

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// A sideLane keeps detection from waiting behind a reconcile's writes. A check is reconciled by one worker
// at a time, and a reconcile that deletes, releases, renews and writes the status can take a second on a
// busy API server; a Node whose condition expires meanwhile would be requested only after it. While a
// reconcile writes, its side lane waits for the next expiry instant decide found and, when it comes,
// looks at the cache again and creates the first requests of the Nodes that have just expired, and
// nothing else: no status, no deletion, no lease but those of its own requests. The reconcile, once done,
// looks again at once and records them.
//
// It keeps out of the reconcile's way: it leaves alone every Node the reconcile's plan touches (or
// records in the status), control-plane Nodes (one at a time, decided by the reconcile alone), and
// escalation steps; and it runs only when the reconcile's plan let new remediations start (no storm, not
// paused, not disabled) and its own decision does too. With the default of one worker, only one
// reconcile runs at a time, so only one side lane does.
type sideLane struct {
	stop chan struct{}
	done chan struct{}
	// acted tells whether the lane asked for anything (read after done).
	acted bool
}

// startSideLane starts the side lane of a reconcile of check key that decided p, before p is executed. It
// returns nil when there is nothing the lane could do.
func (r *Reconciler) startSideLane(ctx context.Context, key types.NamespacedName, p *plan) *sideLane {
	if p.NextExpiry.IsZero() || p.Hold != "" || p.Disabled != nil || len(p.Paused) > 0 {
		return nil
	}
	busy := map[string]bool{}
	for name := range p.Entries {
		busy[name] = true
	}
	for _, c := range p.Creates {
		busy[c.Node.Name] = true
	}
	for _, refs := range [][]emrRef{p.Deletes, p.TimeOuts} {
		for _, ref := range refs {
			busy[p.nodeOf(ref)] = true
		}
	}
	for _, n := range p.Renew {
		busy[n.Node.Name] = true
	}
	for _, name := range p.Release {
		busy[name] = true
	}
	l := &sideLane{stop: make(chan struct{}), done: make(chan struct{})}
	go l.run(ctx, r, key, busy, p.NextExpiry)
	return l
}

// finish stops the lane and waits for it; it reports whether the lane asked for anything, which the
// reconcile has not recorded.
func (l *sideLane) finish() bool {
	if l == nil {
		return false
	}
	close(l.stop)
	<-l.done
	return l.acted
}

func (l *sideLane) run(ctx context.Context, r *Reconciler, key types.NamespacedName, busy map[string]bool, next time.Time) {
	defer close(l.done)
	for !next.IsZero() {
		t := r.clock.NewTimer(next.Sub(r.clock.Now()))
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		var acted bool
		next, acted = r.sideLaneOnce(ctx, key, busy)
		l.acted = l.acted || acted
	}
}

// sideLaneOnce decides afresh from the cache and creates the first requests of the Nodes that have just
// expired and are not busy. It returns the next expiry instant, and whether it created anything.
func (r *Reconciler) sideLaneOnce(ctx context.Context, key types.NamespacedName, busy map[string]bool) (time.Time, bool) {
	log := ctrl.LoggerFrom(ctx).WithValues("lane", "side")
	ctx = ctrl.LoggerInto(ctx, log) // its creations are logged as the side lane's
	check := &v1alpha1.NodeHealthCheck{}
	if err := r.client.Get(ctx, key, check); err != nil || !check.DeletionTimestamp.IsZero() {
		return time.Time{}, false // the reconcile sees to it
	}
	in, _, err := r.observe(ctx, check)
	if err != nil {
		log.V(1).Info("Side lane could not look", "error", err.Error())
		return time.Time{}, false
	}
	p := decide(in, r.clock.Now())
	var creates []createAction
	for _, c := range p.Creates {
		if c.Step == 0 && !c.ExpiredAt.IsZero() && !busy[c.Node.Name] && !isControlPlane(c.Node) {
			creates = append(creates, c)
			busy[c.Node.Name] = true
		}
	}
	if len(creates) == 0 {
		return p.NextExpiry, false
	}
	lm, err := r.leaseManager(in.Holder)
	if err != nil {
		log.V(1).Info("Side lane has no lease manager", "error", err.Error())
		return time.Time{}, false
	}
	var evs []event
	for i, res := range r.createAll(ctx, lm, check, in, creates) {
		switch {
		case res.err != nil:
			log.V(1).Info("Side lane could not create a request", "node", creates[i].Node.Name, "error", res.err.Error())
		case res.remediation != nil && !res.adopted:
			if res.leaseErr != nil {
				log.V(1).Info("Side lane could not take a lease", "node", creates[i].Node.Name, "error", res.leaseErr.Error())
			}
			evs = append(evs, r.created(ctx, in, creates[i], res))
		}
	}
	r.emit(check, evs, true)
	return p.NextExpiry, true
}
