package powercycle

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The decisions of the state machine that need no API call: pure functions of the observed objects and
// the time.

// Spec defaults, the same as the CRD's (an object written before a default existed still works).
const (
	defaultDeleteAfterRetries = 3
	defaultPowerOffTimeout    = 120 * time.Second
	defaultPowerOnTimeout     = 600 * time.Second
	defaultBackoffInitial     = 30 * time.Second
	defaultBackoffMax         = 10 * time.Minute
	defaultDiagnosticTimeout  = 300 * time.Second
	defaultGracefulTimeout    = 60 * time.Second
)

// effectiveSpec is a remediation's spec with every default applied.
type effectiveSpec struct {
	strategy           v1alpha1.Strategy
	deleteAfterRetries int32
	powerOffTimeout    time.Duration
	powerOnTimeout     time.Duration
	backoffInitial     time.Duration
	backoffMax         time.Duration
	outOfServiceTaint  bool
	// diagnosticTimeout bounds the wait after a diagnostic interrupt; zero: none is sent.
	diagnosticTimeout time.Duration
	// gracefulTimeout bounds the wait after a graceful shutdown; zero: none is asked for.
	gracefulTimeout time.Duration
}

func specOf(pcr *v1alpha1.PowerCycleRemediation) effectiveSpec {
	in := pcr.Spec
	s := effectiveSpec{
		strategy:           in.Strategy,
		deleteAfterRetries: defaultDeleteAfterRetries,
		powerOffTimeout:    time.Duration(in.PowerOffTimeoutSeconds) * time.Second,
		powerOnTimeout:     time.Duration(in.PowerOnTimeoutSeconds) * time.Second,
		backoffInitial:     defaultBackoffInitial,
		backoffMax:         defaultBackoffMax,
		outOfServiceTaint:  in.OutOfServiceTaint == nil || *in.OutOfServiceTaint,
	}
	if s.strategy == "" {
		s.strategy = v1alpha1.StrategyReboot
	}
	if in.DeleteAfterRetries != nil && *in.DeleteAfterRetries > 0 {
		s.deleteAfterRetries = *in.DeleteAfterRetries
	}
	if s.powerOffTimeout <= 0 {
		s.powerOffTimeout = defaultPowerOffTimeout
	}
	if s.powerOnTimeout <= 0 {
		s.powerOnTimeout = defaultPowerOnTimeout
	}
	if b := in.RetryBackoff; b != nil {
		if b.Initial.Duration > 0 {
			s.backoffInitial = b.Initial.Duration
		}
		if b.Max.Duration > 0 {
			s.backoffMax = b.Max.Duration
		}
	}
	s.backoffMax = max(s.backoffMax, s.backoffInitial)
	if d := in.DiagnosticInterrupt; d != nil {
		s.diagnosticTimeout = time.Duration(d.TimeoutSeconds) * time.Second
		if s.diagnosticTimeout <= 0 {
			s.diagnosticTimeout = defaultDiagnosticTimeout
		}
	}
	if g := in.GracefulShutdown; g != nil {
		s.gracefulTimeout = time.Duration(g.TimeoutSeconds) * time.Second
		if s.gracefulTimeout <= 0 {
			s.gracefulTimeout = defaultGracefulTimeout
		}
	}
	return s
}

// retryBackoff is the wait after the n-th failed attempt (n ≥ 1): initial, doubled for each further
// failure, capped at max.
func retryBackoff(spec effectiveSpec, failures int32) time.Duration {
	d := spec.backoffInitial
	for i := int32(1); i < failures && d < spec.backoffMax; i++ {
		d *= 2
	}
	return min(d, spec.backoffMax)
}

// afterFailure decides what follows a failed attempt, once failures attempts have failed: the next
// attempt after a backoff, or escalation when the escalate strategy has used up its attempts.
func afterFailure(spec effectiveSpec, failures int32, now time.Time) (next v1alpha1.PowerCyclePhase, retryAt time.Time) {
	if spec.strategy == v1alpha1.StrategyEscalate && failures >= spec.deleteAfterRetries {
		return v1alpha1.PhaseEscalating, time.Time{}
	}
	return v1alpha1.PhaseRetrying, now.Add(retryBackoff(spec, failures))
}

// growingWait is how long to wait before trying again something that has been failing since since: the
// time it has been failing, at least floor and at most ceiling. Successive waits thus double.
func growingWait(since, now time.Time, floor, ceiling time.Duration) time.Duration {
	return min(max(now.Sub(since), floor), max(ceiling, floor))
}

// lastSend is the latest moment a power request may go out in a wait of timeout that ends at deadline:
// the wait must keep a poll interval (half its timeout, if that is shorter) to see the host act on it.
// Sent later, the attempt would fail before the host could act, and the next attempt would ask again.
func lastSend(deadline time.Time, timeout, poll time.Duration) time.Time {
	return deadline.Add(-min(poll, timeout/2))
}

// untilDeadline is the wait until deadline, never less than a second's tick.
func untilDeadline(deadline, now time.Time) time.Duration {
	return max(deadline.Sub(now), time.Millisecond)
}

// readyState is what of a Node's Ready condition a remediation looks at.
type readyState struct {
	status     corev1.ConditionStatus
	heartbeat  time.Time
	transition time.Time
}

func readyCondition(node *corev1.Node) readyState {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return readyState{status: c.Status, heartbeat: c.LastHeartbeatTime.Time, transition: c.LastTransitionTime.Time}
		}
	}
	return readyState{}
}

// nodeReadySince reports whether the Node is Ready according to a report made at or after t (its
// kubelet's heartbeat, or the condition's change). A Ready condition older than t is what the node said
// before it was power-cycled, not news of its return.
func nodeReadySince(node *corev1.Node, t time.Time) bool {
	c := readyCondition(node)
	if c.status != corev1.ConditionTrue {
		return false
	}
	t = t.Truncate(time.Second)
	return !c.heartbeat.Before(t) || !c.transition.Before(t)
}

// excluded reports whether the Node is labelled to be left alone.
func excluded(node *corev1.Node) bool {
	return node.Labels[v1alpha1.LabelExcludeFromRemediation] == "true"
}

// The taints a remediation puts on its Node.
func remediationTaint() corev1.Taint {
	return corev1.Taint{Key: v1alpha1.TaintRemediation, Effect: corev1.TaintEffectNoSchedule}
}

func outOfServiceTaint(now time.Time) corev1.Taint {
	t := metav1.NewTime(now.Truncate(time.Second))
	return corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: v1alpha1.TaintOutOfServiceValue,
		Effect: corev1.TaintEffectNoExecute, TimeAdded: &t}
}

// taintEffects are the effects of the taints a remediation adds, by key.
var taintEffects = map[string]corev1.TaintEffect{
	v1alpha1.TaintRemediation:  corev1.TaintEffectNoSchedule,
	v1alpha1.TaintOutOfService: corev1.TaintEffectNoExecute,
}

// hasTaint reports whether taints hold one with key and effect.
func hasTaint(taints []corev1.Taint, key string, effect corev1.TaintEffect) bool {
	return slices.ContainsFunc(taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == effect })
}

// terminal reports whether a phase ends the state machine.
func terminal(p v1alpha1.PowerCyclePhase) bool {
	return p == v1alpha1.PhaseSucceeded || p == v1alpha1.PhaseFailed
}

// One hand per host: what a request decides from the other requests of its Node (its siblings), read
// from the cache. A request's siblings never include itself, nor a request the remediator never acts on
// (see RemediationReconciler.actsOn).

// refusalReasons are the reasons the remediator refuses a request for good, before it does anything for
// it: such a request ends Failed with no attempt, Succeeded=False with one of them. A refusal added
// elsewhere is one more line here.
var refusalReasons = []string{
	v1alpha1.ReasonNamespaceNotTrusted,
	v1alpha1.ReasonNodeNotInThisCluster,
}

// refused reports whether the remediator refused p for good (see refusalReasons): it never acted on its
// Node, and never will. Only the remediator writes what this reads (the status).
func refused(p *v1alpha1.PowerCycleRemediation) bool {
	if p.Status.Phase != v1alpha1.PhaseFailed || len(p.Status.Attempts) > 0 {
		return false
	}
	c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionSucceeded)
	return c != nil && c.Status == metav1.ConditionFalse && slices.Contains(refusalReasons, c.Reason)
}

// holdsNode reports whether p still holds our finalizer: whatever it did to its Node is not settled yet.
func holdsNode(p *v1alpha1.PowerCycleRemediation) bool {
	return slices.Contains(p.Finalizers, v1alpha1.FinalizerPowerCycle)
}

// deleting reports whether p is being deleted.
func deleting(p *v1alpha1.PowerCycleRemediation) bool {
	return !p.DeletionTimestamp.IsZero()
}

// timedOutMark reports whether p's health check marked it timed out.
func timedOutMark(p *v1alpha1.PowerCycleRemediation) bool {
	_, ok := p.Annotations[v1alpha1.AnnotationTimedOut]
	return ok
}

// handedOver reports whether p let go of its Node after a time-out (Processing=False, HandedOver).
func handedOver(p *v1alpha1.PowerCycleRemediation) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionProcessing)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonHandedOver
}

// newerThan orders the requests of a Node: by creation time, then name, then namespace. Of several
// deleted at once, the newest restores the Node.
func newerThan(a, b *v1alpha1.PowerCycleRemediation) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	if a.Name != b.Name {
		return a.Name > b.Name
	}
	return a.Namespace > b.Namespace
}

// releaseAction is what a deleted request does with its Node.
type releaseAction int

const (
	// releaseRestore: it is the last remediation of the Node; it restores it (power, taints, lease).
	releaseRestore releaseAction = iota
	// releaseHandOver: another request of the Node is not being deleted; the Node is left to it as it is.
	releaseHandOver
	// releaseAwait: a newer request of the Node is being deleted too and still holds it; that one
	// restores the Node, this one lets go once it has.
	releaseAwait
)

// onDeletion decides what a deleted request does with its Node, and names the sibling it defers to. A
// live sibling (not being deleted; timed out or not, but then holding our finalizer) takes the Node as it
// is. Of the requests being
// deleted together, the newest restores; the others wait until it no longer holds the Node, then restore
// only what is left (nothing, unless the newest, seeing a sibling as live a moment before it was deleted
// too, left the Node to them). The wait is bounded by the newest's clean-up, which is bounded itself and
// never waits for an older request.
func onDeletion(self *v1alpha1.PowerCycleRemediation, siblings []v1alpha1.PowerCycleRemediation) (releaseAction, *v1alpha1.PowerCycleRemediation) {
	for i := range siblings {
		// A sibling that was timed out before it ever started holds nothing and never will: it would
		// never restore a node left to it.
		if p := &siblings[i]; !deleting(p) && (holdsNode(p) || !timedOutMark(p)) {
			return releaseHandOver, p
		}
	}
	for i := range siblings {
		if p := &siblings[i]; holdsNode(p) && newerThan(p, self) {
			return releaseAwait, p
		}
	}
	return releaseRestore, nil
}

// busySibling returns a sibling still acting on the Node while it lets go of it, which a request that
// has not started waits for: one being deleted that holds the Node (it hands the Node over, or restores
// it), or one timed out that is still landing a power request (Processing=True). A sibling that is
// simply remediating is no such thing: the node lease keeps the two apart.
func busySibling(siblings []v1alpha1.PowerCycleRemediation) *v1alpha1.PowerCycleRemediation {
	for i := range siblings {
		p := &siblings[i]
		if !holdsNode(p) {
			continue
		}
		if deleting(p) {
			return p
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionProcessing); timedOutMark(p) && c != nil && c.Status == metav1.ConditionTrue {
			return p
		}
	}
	return nil
}

// remediationHolderPrefix starts the node lease holder identity of every PowerCycleRemediation.
const remediationHolderPrefix = remediationKind + "-"

// takeOverFrom reports whether a request may take the node lease held by holder, a PowerCycleRemediation
// of the same Node that let go of it: timed out or being deleted (found among siblings), or gone (found
// nowhere: known tells whether another request of that name exists in that namespace, on any node). The
// holder is the request of that name in the namespace the lease records; a lease that records none was
// written before holders recorded theirs, and may be any request's of that name, this one's included: it
// is this one's only when no other request of the name exists.
func takeOverFrom(holder leases.Holder, self *v1alpha1.PowerCycleRemediation, siblings []v1alpha1.PowerCycleRemediation, known func(name, namespace string) bool) bool {
	name, ok := strings.CutPrefix(holder.Identity, remediationHolderPrefix)
	if !ok || name == "" || (name == self.Name && holder.Namespace == self.Namespace) {
		return false
	}
	found := false
	for i := range siblings {
		if p := &siblings[i]; p.Name == name && (holder.Namespace == "" || p.Namespace == holder.Namespace) {
			found = true
			if !deleting(p) && !timedOutMark(p) {
				return false // it still acts on the Node
			}
		}
	}
	return found || !known(name, holder.Namespace)
}
