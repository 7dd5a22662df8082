package powercycle

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// trustedNamespaces is the set of namespaces whose requests are acted on: the manager's own, and those
// listed.
func trustedNamespaces(manager string, listed []string) map[string]bool {
	set := map[string]bool{manager: true}
	for _, ns := range listed {
		if ns = strings.TrimSpace(ns); ns != "" {
			set[ns] = true
		}
	}
	return set
}

// trusts reports whether the remediator acts on requests in namespace ns.
func (r *RemediationReconciler) trusts(ns string) bool { return r.trusted[ns] }

// trustedList names the trusted namespaces, sorted, for messages.
func (r *RemediationReconciler) trustedList() string {
	names := make([]string, 0, len(r.trusted))
	for ns := range r.trusted {
		names = append(names, ns)
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// refuseUntrusted answers a request from a namespace the remediator does not act in (see refuse). A
// refused request stays refused even if its namespace is trusted later (its health check may have moved
// on meanwhile): delete it, and its health check creates it again.
//
// A request that carries our finalizer from a time its namespace was trusted (the flag was narrowed
// since) loses it, and its host, node and lease are left as they are: the request could not be deleted
// otherwise, and acting on it is what the admin has just forbidden.
func (r *RemediationReconciler) refuseUntrusted(ctx context.Context, s *scope) error {
	// The message names the flag, not the namespaces it lists: whoever reads the request need not learn
	// them.
	msg := fmt.Sprintf("Refused: namespace %s is not one the remediator acts in (the manager's --remediation-namespaces "+
		"flag lists them); nothing was done to node %s, its host or its lease", s.pcr.Namespace, remediationNodeKey(s.pcr))
	news, err := r.refuse(ctx, s, v1alpha1.ReasonNamespaceNotTrusted, msg)
	if err != nil || !news {
		return err
	}
	s.log.Info("Refused a request from a namespace not trusted", "namespace", s.pcr.Namespace, "trusted", r.trustedList())
	r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventNamespaceNotTrusted, ActionPowerCycle, "%s", msg)
	return nil
}

// refuse ends a request the remediator will not act on, for good: Processing=False and Succeeded=False
// with the reason (so that a health check moves on rather than waiting), the phase Failed, and no
// finalizer. Nothing else is done: no BMC call, no taint, no lease. It reports whether the refusal is
// news (recorded now), for the caller to announce once.
func (r *RemediationReconciler) refuse(ctx context.Context, s *scope, reason, msg string) (news bool, err error) {
	st := s.status()
	news = s.setCondition(v1alpha1.ConditionProcessing, metav1.ConditionFalse, reason, msg)
	s.setCondition(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, reason, msg)
	if !terminal(st.Phase) {
		st.Phase, st.LastTransitionTime = v1alpha1.PhaseFailed, new(stamp(s.now))
	}
	if controllerutil.ContainsFinalizer(s.pcr, v1alpha1.FinalizerPowerCycle) {
		err = r.patchFinalizer(ctx, s, controllerutil.RemoveFinalizer) // records the status first
	} else {
		err = r.persist(ctx, s)
	}
	return news && err == nil && !s.abandoned, err
}
