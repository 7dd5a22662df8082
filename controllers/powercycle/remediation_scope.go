package powercycle

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// cluster is where the Node lives, reached once per reconcile (see nodeClusterOf).
	cluster *nodeCluster

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

// getNode reads the remediation's node, in its cluster, once per reconcile. A missing node is an error
// for which apierrors.IsNotFound is true; a workload cluster that cannot be reached a *workload.Error.
func (r *RemediationReconciler) getNode(ctx context.Context, s *scope) (*corev1.Node, error) {
	if !s.nodeRead {
		s.nodeRead = true
		nc, err := r.nodeClusterOf(ctx, s)
		if err != nil {
			s.nodeError = err
			return nil, err
		}
		node := &corev1.Node{}
		if err := nc.nodes.Get(ctx, client.ObjectKey{Name: s.pcr.Status.NodeName}, node); err != nil {
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
