package nhc

import (
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/internal/metrics"
	"github.com/metalheal/metalheal/pkg/leases"
)

// ControllerName names the controller, its event recorder and its log lines.
const ControllerName = "nodehealthcheck"

// Defaults for Options.
const (
	DefaultLeaseDuration           = 10 * time.Minute
	DefaultResyncPeriod            = engine.DefaultResyncPeriod
	DefaultKindRetryPeriod         = time.Minute
	DefaultMaxConcurrentReconciles = 1
	DefaultMaxConcurrentWrites     = 64
)

// Options configure a Reconciler. Client, Clock and Recorder are required.
type Options struct {
	// Client reads NodeHealthChecks, Nodes and Leases and writes everything. In a manager, give it
	// mgr.GetClient(), whose reads come from the informer cache; its Lease cache must be limited to
	// LeaseNamespace (see the package documentation).
	Client client.Client
	// Cache reads remediation templates and requests, which are unstructured. A controller-runtime client
	// reads unstructured objects from the API server unless told otherwise, so SetupWithManager defaults
	// it to the manager's cache; without a manager (tests) it defaults to Client.
	Cache client.Reader
	// APIReader reads a remediation request live when creating one finds it already there. Defaults to
	// the manager's API reader, or Client.
	APIReader client.Reader
	// Clock is the only source of time.
	Clock clock.Clock
	// Recorder emits events on the NodeHealthChecks, e.g. mgr.GetEventRecorder(ControllerName).
	Recorder events.EventRecorder
	// LeaseNamespace holds the node leases; defaults to leases.DefaultNamespace (medik8s-leases). It is
	// created when missing.
	LeaseNamespace string
	// LeaseDuration is how long a node lease is taken for; it is renewed when half has run out.
	LeaseDuration time.Duration
	// ResyncPeriod is the safety net: every check is looked at again at least this often, though every
	// deadline is requeued exactly and nothing waits for it.
	ResyncPeriod time.Duration
	// KindRetryPeriod is how often a check whose template kind is not installed looks again (no watch
	// can tell when a CRD appears).
	KindRetryPeriod time.Duration
	// KindSyncTimeout bounds the first sync of a template or remediation kind's watch. A kind not synced
	// by then (the manager may not list it, typically) disables the checks that name it, with the reason
	// RemediationKindNotWatchable, and is tried again with a backoff (internal/kindwatch); no other check
	// ever waits for it. Defaults to kindwatch.DefaultSyncTimeout.
	KindSyncTimeout time.Duration
	// MaxConcurrentReconciles is how many checks are reconciled at once; 1 by default. A reconcile takes
	// about a millisecond per thousand Nodes and creates its requests in parallel, so one worker serves
	// many checks; and the rules between checks (overlapping selectors, one control-plane Node at a time)
	// are decided one check after another. When it is raised, node leases still keep two checks off the
	// same Node, and ControlPlaneClaim two checks off two control-plane Nodes.
	MaxConcurrentReconciles int
	// MaxConcurrentWrites bounds the lease and remediation request writes one reconcile issues at once,
	// so a burst of failures is requested in parallel: each failed Node costs two writes one after the
	// other (its lease, then its request), and with 64 a burst of 50 is requested in one round trip of
	// each rather than four.
	MaxConcurrentWrites int
	// ControlPlaneClaim is the manager's one claim on starting a control-plane remediation, shared with its
	// MachineHealthChecks (internal/gates): a check takes a control-plane Node's lease only under it, and
	// only while no other control-plane Node's lease is held. Nil: a claim of this reconciler's own.
	ControlPlaneClaim *gates.ControlPlaneClaim
}

// Reconciler reconciles NodeHealthChecks. Build it with New and register it with SetupWithManager, or
// call Reconcile directly (tests).
type Reconciler struct {
	opts      Options
	client    client.Client
	cache     client.Reader
	apiReader client.Reader
	clock     clock.Clock
	recorder  events.EventRecorder
	// watches starts, bounds and stops the watches on template and remediation kinds; nil without a
	// manager.
	watches *kindwatch.Watcher
	// nodeStore is the node informer's store, read without copying (see selectNodes); nil without a
	// manager.
	nodeStore toolscache.Store
	recent    engine.RecentWrites
	cpClaim   *gates.ControlPlaneClaim
	statuses  engine.StatusWrites

	// skipNameValidation lets tests start several managers in one process.
	skipNameValidation bool
}

// New validates opts, fills in the defaults and returns a Reconciler.
func New(opts Options) (*Reconciler, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("nodehealthcheck reconciler needs a client")
	case opts.Clock == nil:
		return nil, errors.New("nodehealthcheck reconciler needs a clock")
	case opts.Recorder == nil:
		return nil, errors.New("nodehealthcheck reconciler needs an event recorder")
	case opts.LeaseDuration < 0 || opts.ResyncPeriod < 0 || opts.KindRetryPeriod < 0 || opts.KindSyncTimeout < 0:
		return nil, errors.New("nodehealthcheck reconciler durations must not be negative")
	}
	if opts.LeaseNamespace == "" {
		opts.LeaseNamespace = leases.DefaultNamespace
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.LeaseDuration < 2*time.Second {
		return nil, fmt.Errorf("lease duration %s is too short: at least 2s", opts.LeaseDuration)
	}
	if opts.ResyncPeriod == 0 {
		opts.ResyncPeriod = DefaultResyncPeriod
	}
	if opts.KindRetryPeriod == 0 {
		opts.KindRetryPeriod = DefaultKindRetryPeriod
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if opts.MaxConcurrentWrites <= 0 {
		opts.MaxConcurrentWrites = DefaultMaxConcurrentWrites
	}
	if opts.ControlPlaneClaim == nil {
		opts.ControlPlaneClaim = &gates.ControlPlaneClaim{}
	}
	return &Reconciler{opts: opts, client: opts.Client, cache: opts.Cache, apiReader: opts.APIReader,
		clock: opts.Clock, recorder: opts.Recorder, cpClaim: opts.ControlPlaneClaim}, nil
}

// Reconcile observes one NodeHealthCheck from the cache, decides, acts, and writes the status when it
// changed. It requeues at the earliest deadline decide found (a condition expiring, healthyDelay, an
// escalation timeout, a lease to renew, a storm cooldown), and at the latest after ResyncPeriod.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	check := &v1alpha1.NodeHealthCheck{}
	if err := r.client.Get(ctx, req.NamespacedName, check); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.UnhealthyTargets.DeleteLabelValues(metrics.CheckerNHC, req.Name)
			backoff.NHCMetrics.Held.DeleteLabelValues(req.Name)
			r.forgetKinds(ctx, req.Name)
			r.statuses.Forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting NodeHealthCheck %s: %w", req.Name, err)
	}
	if !check.DeletionTimestamp.IsZero() {
		r.forgetKinds(ctx, req.Name)
		r.statuses.Forget(req.NamespacedName)
		return ctrl.Result{}, nil // its requests go with it (owner references); its leases expire
	}

	// Annotated for Go's execution tracer (/debug/pprof/trace with --pprof-bind-address): each reconcile a
	// task, its stages regions, each request's creation a region of its own (execute), the wall clock at
	// its start a log entry, so that a trace tells where a burst's time goes (`bench --pprof-dir`).
	ctx, task := trace.NewTask(ctx, "NodeHealthCheck")
	defer task.End()
	trace.Log(ctx, "start", check.Name+" "+r.clock.Now().UTC().Format(time.RFC3339Nano))
	observing := trace.StartRegion(ctx, "observe")
	in, retry, err := r.observe(ctx, check)
	observing.End()
	if pending := (*engine.WatchPendingError)(nil); errors.As(err, &pending) {
		// Nothing is decided from a kind not watched yet; the kind watcher enqueues the check once it is.
		return ctrl.Result{RequeueAfter: max(pending.Until.Sub(r.clock.Now()), time.Millisecond)}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.clock.Now()
	var p plan
	trace.WithRegion(ctx, "decide", func() { p = decide(in, now) })
	execErr := r.execute(ctx, check, in, &p)
	base := check.DeepCopy()
	writing := trace.StartRegion(ctx, "status")
	err = r.patchStatus(ctx, check, p.status(check), r.clock.Now())
	writing.End()
	if err != nil {
		if apierrors.IsConflict(err) && execErr == nil {
			// The cache showed an older check than the API server has (often our own last status
			// write): decide again from a fresh view.
			ctrl.LoggerFrom(ctx).V(4).Info("Status conflict, looking again")
			return ctrl.Result{RequeueAfter: engine.ConflictRetry}, nil
		}
		return ctrl.Result{}, errors.Join(execErr, err)
	}
	for _, reason := range p.Skipped {
		metrics.RemediationsSkipped.WithLabelValues(metrics.CheckerNHC, reason).Inc()
	}
	engine.RecordBackoff(backoff.NHCMetrics, check.Name, p.Backoff, p.Holds)
	r.emit(base, p.Events, false)
	if execErr != nil {
		return ctrl.Result{}, execErr
	}
	r.cpClaim.Looked(claimKey(check.Name), r.clock.Now())
	// Counted from the clock now, not from the decision: the writes since took time, and a condition must
	// be looked at again when it expires, not that much later.
	return ctrl.Result{RequeueAfter: engine.RequeueAfter(p.Next, r.clock.Now(), r.opts.ResyncPeriod, retry)}, nil
}

// patchStatus writes st when it differs from what the check shows (or the check is not the copy the last
// status write left: engine.StatusWrites), stamping lastUpdateTime when it differs.
func (r *Reconciler) patchStatus(ctx context.Context, check *v1alpha1.NodeHealthCheck, st v1alpha1.NodeHealthCheckStatus, now time.Time) error {
	st.LastUpdateTime = check.Status.LastUpdateTime
	changed := !equality.Semantic.DeepEqual(check.Status, st)
	if changed {
		st.LastUpdateTime = &metav1.Time{Time: now}
	}
	check.Status = st
	// Guarded by the resourceVersion: a reconcile that decided from a stale check must not overwrite a
	// newer status (engine.StatusWrites). An update, which means the same as a patch with optimistic
	// locking, costs the API server less (see the power-cycle remediator's persist).
	if err := r.statuses.Write(ctx, r.client, check, changed); err != nil {
		return fmt.Errorf("updating the status of NodeHealthCheck %s: %w", check.Name, err)
	}
	return nil
}
