package powercycle

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// scope is one reconcile of one remediation: the object, the status as last recorded, what was read
// along the way, and the instant the decisions are made at.
type scope struct {
	pcr  *v1alpha1.PowerCycleRemediation
	base *v1alpha1.PowerCycleRemediation // as last read or written: what persist compares the status with
	spec effectiveSpec
	now  time.Time
	log  logr.Logger

	node      *corev1.Node // read once, on demand
	nodeRead  bool
	nodeError error

	// leaseRecheck, when positive, is when the node lease must be looked at again (renewed).
	leaseRecheck time.Duration
	// abandoned is set when a write failed or the object is gone: nothing more is written this time.
	abandoned bool
	// entered are the phases entered since the last write, announced by the next one (see enter).
	entered []phaseChange
}

func (r *RemediationReconciler) newScope(pcr *v1alpha1.PowerCycleRemediation, logger logr.Logger) *scope {
	return &scope{
		pcr:  pcr,
		base: pcr.DeepCopy(),
		spec: specOf(pcr),
		now:  r.opts.Clock.Now(),
		log:  logger,
	}
}

// capRequeue makes sure a waiting remediation comes back in time to renew its node lease.
func (s *scope) capRequeue(res ctrl.Result) ctrl.Result {
	if res.RequeueAfter > 0 && s.leaseRecheck > 0 && s.leaseRecheck < res.RequeueAfter {
		res.RequeueAfter = s.leaseRecheck
	}
	return res
}

// status is a shorthand.
func (s *scope) status() *v1alpha1.PowerCycleRemediationStatus { return &s.pcr.Status }

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
	old := s.pcr.ResourceVersion
	if err := r.opts.Client.Status().Update(ctx, s.pcr); err != nil {
		s.abandoned = true
		if apierrors.IsNotFound(err) {
			return nil
		}
		return r.staleOr(s, fmt.Errorf("recording the status of PowerCycleRemediation %s/%s: %w", s.pcr.Namespace, s.pcr.Name, err))
	}
	s.base = s.pcr.DeepCopy()
	r.written.wrote(client.ObjectKeyFromObject(s.pcr), old, s.base)
	r.announce(s)
	return nil
}

// staleObjectError is a write refused because the remediation changed since it was read: the read was
// stale (the cache had not caught up with our own last write) or someone else wrote meanwhile. Either
// way a newer version exists, and its watch event brings another reconcile: nothing is retried now.
type staleObjectError struct{ err error }

func (e *staleObjectError) Error() string { return e.err.Error() }
func (e *staleObjectError) Unwrap() error { return e.err }

// staleOr marks a conflict as a staleObjectError, after which the remediation waits for the cache.
func (r *RemediationReconciler) staleOr(s *scope, err error) error {
	if apierrors.IsConflict(err) {
		r.written.conflicted(client.ObjectKeyFromObject(s.pcr))
		return &staleObjectError{err: err}
	}
	return err
}

// ensureFinalizer adds the finalizer, so that the host is powered back on and the node cleaned up
// before the request goes away.
func (r *RemediationReconciler) ensureFinalizer(ctx context.Context, s *scope) error {
	if controllerutil.ContainsFinalizer(s.pcr, v1alpha1.FinalizerPowerCycle) {
		return nil
	}
	return r.patchFinalizer(ctx, s, controllerutil.AddFinalizer)
}

// patchFinalizer adds or removes the finalizer, guarded by the resourceVersion.
func (r *RemediationReconciler) patchFinalizer(ctx context.Context, s *scope, change func(client.Object, string) bool) error {
	if err := r.persist(ctx, s); err != nil { // the status first: the patch below refreshes the object
		return err
	}
	if s.abandoned {
		return nil
	}
	change(s.pcr, v1alpha1.FinalizerPowerCycle)
	old := s.pcr.ResourceVersion
	if err := r.opts.Client.Update(ctx, s.pcr); err != nil { // guarded by the resourceVersion (see persist)
		s.abandoned = true
		if apierrors.IsNotFound(err) {
			return nil
		}
		return r.staleOr(s, fmt.Errorf("updating the finalizer of PowerCycleRemediation %s/%s: %w", s.pcr.Namespace, s.pcr.Name, err))
	}
	s.base = s.pcr.DeepCopy()
	r.written.wrote(client.ObjectKeyFromObject(s.pcr), old, s.base)
	return nil
}

// setCondition sets a condition stamped with the scope's time and reports whether it changed.
func (s *scope) setCondition(condType string, status metav1.ConditionStatus, reason, message string) bool {
	return meta.SetStatusCondition(&s.pcr.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            truncate(message, maxConditionMessage),
		LastTransitionTime: stamp(s.now),
		ObservedGeneration: s.pcr.Generation,
	})
}

// condition returns a condition of the remediation, or nil.
func (s *scope) condition(condType string) *metav1.Condition {
	return meta.FindStatusCondition(s.pcr.Status.Conditions, condType)
}

// currentAttempt is the attempt in progress (the last one), or nil.
func (s *scope) currentAttempt() *v1alpha1.PowerCycleAttempt {
	a := s.pcr.Status.Attempts
	if len(a) == 0 {
		return nil
	}
	return &a[len(a)-1]
}

// phaseStart is when the current phase was entered.
func (s *scope) phaseStart() time.Time {
	if t := s.pcr.Status.LastTransitionTime; t != nil {
		return t.Time
	}
	return s.now
}

// getNode reads the remediation's node once per reconcile. A missing node is an error for which
// apierrors.IsNotFound is true.
func (r *RemediationReconciler) getNode(ctx context.Context, s *scope) (*corev1.Node, error) {
	if !s.nodeRead {
		s.nodeRead = true
		node := &corev1.Node{}
		if err := r.opts.Client.Get(ctx, client.ObjectKey{Name: s.pcr.Status.NodeName}, node); err != nil {
			s.nodeError = err
		} else {
			s.node = node
		}
	}
	return s.node, s.nodeError
}

// Limits of status strings.
const (
	maxConditionMessage = 32768
	maxAttemptMessage   = 1024
	maxAttempts         = 10
)

// stamp is a status time: whole seconds, as the API server keeps them, so a decision made before and
// after a restart compares the same values.
func stamp(t time.Time) metav1.Time {
	return metav1.NewTime(t.Truncate(time.Second))
}

// truncate cuts s to at most n bytes, on a character boundary, marking the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
