package powercycle

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/internal/workload"
)

// Reconcile is the shell of the state machine: fetch the request, take the step its phase is due,
// record what changed.
func (r *RemediationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s, res, err := r.fetch(ctx, req.NamespacedName)
	if s == nil {
		return res, err
	}
	ctx = ctrl.LoggerInto(ctx, s.log)
	res, err = r.step(ctx, s)
	return r.record(ctx, s, res, err)
}

// fetch reads the request from the cache and makes the reconcile's scope, going on from our own last
// write when the cache has not shown it yet (see memory). No scope when there is nothing to do: the
// request is gone, or its cached copy is stale and nothing newer is known.
func (r *RemediationReconciler) fetch(ctx context.Context, key types.NamespacedName) (*scope, ctrl.Result, error) {
	cached := &v1alpha1.PowerCycleRemediation{}
	if err := r.opts.Client.Get(ctx, key, cached); err != nil {
		if apierrors.IsNotFound(err) {
			r.memory.forget(key)
		}
		return nil, ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pcr, stale, wait := r.memory.latest(cached)
	logger := ctrl.LoggerFrom(ctx).WithValues("powercycleremediation", klog.KObj(pcr), "phase", pcr.Status.Phase)
	switch {
	case wait:
		// Someone else wrote after us: the watch event of that write brings the next reconcile; the
		// requeue is only a backstop.
		logger.V(4).Info("The cache has not caught up with the latest write yet; waiting for it")
		CacheWaits.Inc()
		return nil, ctrl.Result{RequeueAfter: r.opts.PowerPollInterval}, nil
	case stale:
		logger.V(4).Info("The cache has not caught up with our last write yet; going on from what it left")
		CacheSkips.Inc()
	}
	return r.newScope(pcr, logger), ctrl.Result{}, nil
}

// step does what the request is due, in this order, whatever its phase: a request from a namespace not
// trusted, or whose Machine's Node is not in this cluster, moves nothing (no finalizer, no BMC call, no
// taint, no lease); a deleted or timed-out one is cleaned up; the others wait for their health check's
// lease and for another request of the node to let go of it, get the finalizer, and run their phase's
// handler.
func (r *RemediationReconciler) step(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !r.trusts(s.pcr.Namespace) {
		return ctrl.Result{}, r.refuseUntrusted(ctx, s)
	}
	if refused, err := r.refuseNodeElsewhere(ctx, s); err != nil || refused {
		return ctrl.Result{}, err
	}
	if _, timedOut, _ := template.TimedOut(s.pcr); !s.pcr.DeletionTimestamp.IsZero() || timedOut {
		return r.cleanup(ctx, s)
	}
	if wait, err := r.claim.awaitOwnerLease(ctx, s); err != nil || wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, err
	}
	if wait, err := r.claim.awaitHandOver(ctx, s); err != nil || wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, err
	}
	if err := r.ensureFinalizer(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	handle, ok := r.phases[s.pcr.Status.Phase]
	if !ok {
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("unknown phase %q", s.pcr.Status.Phase))
	}
	return handle(ctx, s)
}

// record persists what the step left unwritten, brings the requeue forward to the lease's renewal, and
// turns a write refused because the request changed since it was read into a quiet end: the newer
// version's watch event brings the next reconcile.
func (r *RemediationReconciler) record(ctx context.Context, s *scope, res ctrl.Result, err error) (ctrl.Result, error) {
	if !s.abandoned {
		err = errors.Join(err, r.persist(ctx, s))
	}
	if unreachable := (*workload.Error)(nil); errors.As(err, &unreachable) {
		res, err = r.clusterUnreachable(s, unreachable), nil
		if !s.abandoned {
			err = r.persist(ctx, s)
		}
	}
	res = s.capRequeue(res)
	if stale := (*staleObjectError)(nil); errors.As(err, &stale) {
		s.log.V(4).Info("Remediation changed since it was read; waiting for the newer version", "error", err.Error())
		return ctrl.Result{}, nil
	}
	return res, err
}

// persist records the status, if it changed, with the resourceVersion it was computed from: when the
// object changed meanwhile (or the read was stale) the write fails and nothing more is done this time.
// Whatever must be durable before the controller acts (a power request, a taint about to be added) is
// persisted through here first.
//
// The remediation's writes are updates, not patches. Guarded by the resourceVersion, the two mean the
// same, but an update costs the API server far less: a patch to a custom resource makes it encode the
// stored object, apply the patch and decode the result, which was a fifth of its CPU in a wave of 500
// power cycles (BENCHMARKS.md). The status subresource ignores the rest of the object, and managed
// fields left out (the cache drops them) are kept as they are.
func (r *RemediationReconciler) persist(ctx context.Context, s *scope) error {
	if s.abandoned || equality.Semantic.DeepEqual(s.base.Status, s.pcr.Status) {
		return nil
	}
	s.pcr.Status.ObservedGeneration = s.pcr.Generation
	if err := r.write(ctx, s, func() error { return r.opts.Client.Status().Update(ctx, s.pcr) }, "recording the status"); err != nil || s.abandoned {
		return err // nothing recorded (the request may be gone): nothing to announce
	}
	r.announce(s)
	return nil
}

// ensureFinalizer adds the finalizer, so that the host is powered back on and the node cleaned up
// before the request goes away.
func (r *RemediationReconciler) ensureFinalizer(ctx context.Context, s *scope) error {
	if controllerutil.ContainsFinalizer(s.pcr, v1alpha1.FinalizerPowerCycle) {
		return nil
	}
	return r.patchFinalizer(ctx, s, controllerutil.AddFinalizer)
}

// patchFinalizer adds or removes the finalizer, guarded by the resourceVersion (see persist), once the
// status is recorded.
func (r *RemediationReconciler) patchFinalizer(ctx context.Context, s *scope, change func(client.Object, string) bool) error {
	if err := r.persist(ctx, s); err != nil || s.abandoned {
		return err
	}
	change(s.pcr, v1alpha1.FinalizerPowerCycle)
	return r.write(ctx, s, func() error { return r.opts.Client.Update(ctx, s.pcr) }, "updating the finalizer")
}

// write makes one write of the request and remembers what it left (see memory). A failed write
// abandons the scope: nothing more is written this time, and a conflict becomes a staleObjectError.
func (r *RemediationReconciler) write(ctx context.Context, s *scope, update func() error, what string) error {
	key, old := client.ObjectKeyFromObject(s.pcr), s.pcr.ResourceVersion
	if err := update(); err != nil {
		s.abandoned = true
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			r.memory.conflicted(key)
			return &staleObjectError{err: fmt.Errorf("%s of PowerCycleRemediation %s/%s: %w", what, s.pcr.Namespace, s.pcr.Name, err)}
		}
		return fmt.Errorf("%s of PowerCycleRemediation %s/%s: %w", what, s.pcr.Namespace, s.pcr.Name, err)
	}
	s.base = s.pcr.DeepCopy()
	r.memory.wrote(key, old, s.base)
	return nil
}

// staleObjectError is a write refused because the remediation changed since it was read: the read was
// stale (the cache had not caught up with our own last write) or someone else wrote meanwhile. Either
// way a newer version exists, and its watch event brings another reconcile: nothing is retried now.
type staleObjectError struct{ err error }

func (e *staleObjectError) Error() string { return e.err.Error() }
func (e *staleObjectError) Unwrap() error { return e.err }
