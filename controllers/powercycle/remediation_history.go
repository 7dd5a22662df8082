package powercycle

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
)

// The host's record of its remediations: status.recentRemediations of its BMC, the object that names the
// host and outlives every request of it. A request writes its record once, when it lets go of the host
// (just before its finalizer goes): whatever happened before, that is where every remediation the
// remediator acted on ends, and the last moment its status is there to read. kubectl metalheal reads the
// record once the request and its events are gone.

// letGoKind is how a request lets go of its host.
type letGoKind int

const (
	// letGoRestored: the last request of the node restored it (see restore).
	letGoRestored letGoKind = iota
	// letGoPassedOn: deleted while another request of the node remains, which gets the node as it is.
	letGoPassedOn
)

// maxRecordTries bounds the writes of one record that find the BMC changed since it was read (the BMC
// inventory writes its status too): each try reads the BMC again.
const maxRecordTries = 4

// recordRemediation adds rec to the record of the host on its BMC (status.recentRemediations), unless
// it is there already. The BMC is read from the API server (APIReader): the manager's cache does not keep
// the record (bmcaccess.SlimBMC), and a list written from a copy without it would erase it. The write is a
// merge patch of that list alone guarded by the resourceVersion read: a write of the BMC inventory (a merge
// patch of its own fields) or of another request's record in between makes it fail with a conflict, and
// it is made again from the BMC as it is then, so no writer loses another's fields or records. A request
// that never found its BMC, or whose BMC is gone or now powers another host, has nowhere to keep its
// record: nothing is written. Neither is anything when the API server refuses the write for good (the
// manager may not patch BMC status: an old role): a warning says so and the request lets go all the
// same, since a missing record must not keep a host's requests from going.
func (r *RemediationReconciler) recordRemediation(ctx context.Context, s *scope, rec v1alpha1.RemediationRecord) error {
	name := s.status().BMCName
	if name == "" || rec.NodeName == "" {
		s.log.V(2).Info("No BMC to record the remediation on")
		return nil
	}
	key := client.ObjectKey{Namespace: r.opts.ManagerNamespace, Name: name}
	for try := 1; ; try++ {
		b := &v1alpha1.BMC{}
		if err := r.opts.APIReader.Get(ctx, key, b); apierrors.IsNotFound(err) {
			s.log.V(2).Info("The BMC is gone: the remediation is not recorded", "bmc", name)
			return nil
		} else if err != nil {
			return fmt.Errorf("reading BMC %s to record the remediation: %w", key, err)
		}
		if bmcaccess.HostOf(b) != hostOf(s.pcr) {
			s.log.V(2).Info("The BMC powers another host now: the remediation is not recorded", "bmc", name, "host", bmcaccess.HostOf(b))
			return nil
		}
		recent, changed := withRecord(b.Status.RecentRemediations, rec)
		if !changed {
			return nil
		}
		patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
		b.Status.RecentRemediations = recent
		err := r.opts.Client.Status().Patch(ctx, b, patch)
		switch {
		case err == nil:
			s.log.V(2).Info("Recorded the remediation on its BMC", "bmc", name, "result", rec.Result)
			return nil
		case apierrors.IsConflict(err) && try < maxRecordTries:
			continue
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventRemediationNotRecorded, ActionCleanUp,
				"The remediation of node %s could not be recorded on BMC %s: %v", rec.NodeName, name, err)
			return nil
		}
		return fmt.Errorf("recording the remediation on BMC %s: %w", key, err)
	}
}

// withRecord is recent with rec in it: in place of the record of the same request (by UID), else added
// last, the oldest dropped beyond MaxRecentRemediations. changed is false when rec is there already.
func withRecord(recent []v1alpha1.RemediationRecord, rec v1alpha1.RemediationRecord) ([]v1alpha1.RemediationRecord, bool) {
	out := slices.Clone(recent)
	if i := slices.IndexFunc(out, func(o v1alpha1.RemediationRecord) bool { return o.UID == rec.UID }); i >= 0 {
		if equality.Semantic.DeepEqual(out[i], rec) {
			return recent, false
		}
		out[i] = rec
		return out, true
	}
	out = append(out, rec)
	if n := len(out); n > v1alpha1.MaxRecentRemediations {
		out = slices.Clone(out[n-v1alpha1.MaxRecentRemediations:])
	}
	return out, true
}

// remediationRecord is the record of pcr's remediation as it lets go of its host at now, how it lets go;
// node is its Node as clean-up read it (nil when gone or not read), and note what clean-up adds (the
// host left as it was because its Node is gone, a power-off that never happened) or, for a request
// passing the node on, what it says of that. The result, in this order:
//   - Succeeded, Failed: the outcome the request reported (its Succeeded condition), at its time;
//   - HandedOver: timed out by its health check and handed over as it was (Processing=False, HandedOver),
//     at that time; or deleted while another request of the node remains (letGoPassedOn), now;
//   - Succeeded (NodeReady) for a request deleted while it waited for its node after the power cycle,
//     the node Ready again: medik8s' NodeHealthCheck deletes its request the moment the node is Ready,
//     before the remediator reports it;
//   - otherwise Cancelled: deleted before any outcome, now.
func remediationRecord(pcr *v1alpha1.PowerCycleRemediation, node *corev1.Node, how letGoKind, note string, now time.Time) v1alpha1.RemediationRecord {
	st := &pcr.Status
	spec := specOf(pcr)
	rec := v1alpha1.RemediationRecord{
		Kind: remediationKind, Namespace: pcr.Namespace, Name: pcr.Name, UID: pcr.UID,
		HealthCheck: healthCheckOf(pcr),
		NodeName:    st.NodeName, ClusterName: st.ClusterName, Strategy: spec.strategy,
		Started:      pcr.CreationTimestamp,
		PowerChanges: powerChanges(st, how, now),
	}
	var last *v1alpha1.PowerCycleAttempt
	if n := len(st.Attempts); n > 0 {
		last = &st.Attempts[n-1]
		rec.Attempts = last.Number
	}
	succeeded := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSucceeded)
	processing := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProcessing)
	outcome := func(result v1alpha1.RemediationResult, c *metav1.Condition) {
		rec.Result, rec.Reason, rec.Message, rec.Finished = result, c.Reason, c.Message, c.LastTransitionTime
	}
	switch {
	case succeeded != nil && succeeded.Status == metav1.ConditionTrue:
		outcome(v1alpha1.RemediationSucceeded, succeeded)
	case processing != nil && processing.Status == metav1.ConditionFalse && processing.Reason == v1alpha1.ReasonHandedOver:
		outcome(v1alpha1.RemediationHandedOver, processing)
		if succeeded != nil && succeeded.Status == metav1.ConditionFalse {
			rec.Reason = succeeded.Reason // why it was stopped: TimedOut, or RetriesExhausted before
		}
	case succeeded != nil && succeeded.Status == metav1.ConditionFalse:
		outcome(v1alpha1.RemediationFailed, succeeded)
	case how == letGoPassedOn:
		rec.Result, rec.Reason, rec.Message, rec.Finished = v1alpha1.RemediationHandedOver, v1alpha1.ReasonHandedOver, note, stamp(now)
		note = ""
	case st.Phase == v1alpha1.PhaseWaitingForNode && node != nil && last != nil && last.PowerOnRequested != nil &&
		nodeReadySince(node, last.PowerOnRequested.Time):
		rec.Result, rec.Reason, rec.Finished = v1alpha1.RemediationSucceeded, v1alpha1.ReasonNodeReady, stamp(now)
		rec.Message = fmt.Sprintf("Node %s was Ready again when its request was deleted, after %d attempt(s)", st.NodeName, rec.Attempts)
	default:
		phase := phaseLabel(st.Phase)
		rec.Result, rec.Reason, rec.Finished = v1alpha1.RemediationCancelled, v1alpha1.ReasonRemediationCancelled, stamp(now)
		rec.Message = fmt.Sprintf("The request was deleted in phase %s, after %d attempt(s)", phase, rec.Attempts)
	}
	if note != "" {
		rec.Message += "; " + note
	}
	rec.Message = truncate(rec.Message, v1alpha1.MaxRecordMessage)
	return rec
}

// healthCheckOf is the health check among pcr's owners, nil when none is.
func healthCheckOf(pcr *v1alpha1.PowerCycleRemediation) *v1alpha1.HealthCheckReference {
	for _, o := range pcr.OwnerReferences {
		if o.Kind == "NodeHealthCheck" || o.Kind == "MachineHealthCheck" {
			return &v1alpha1.HealthCheckReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name}
		}
	}
	return nil
}

// escalationPowerOff is the power-off a bare node's escalation asked for after its last attempt ended (its
// host is left off and fenced for the health check's next step): confirmed when the remediation ended with
// the host read Off. A power request from before the last attempt ended is that attempt's.
func escalationPowerOff(st *v1alpha1.PowerCycleRemediationStatus) (v1alpha1.PowerChange, bool) {
	req := st.PowerRequest
	if req == nil || req.Target != v1alpha1.PowerOff || len(st.Attempts) == 0 {
		return v1alpha1.PowerChange{}, false
	}
	if last := st.Attempts[len(st.Attempts)-1]; last.Finished == nil || req.Time.Before(last.Finished) {
		return v1alpha1.PowerChange{}, false
	}
	c := v1alpha1.PowerChange{Target: v1alpha1.PowerOff, Requested: req.Time}
	if st.Phase == v1alpha1.PhaseFailed && st.PowerState == v1alpha1.PowerOff && st.LastTransitionTime != nil {
		c.Confirmed = st.LastTransitionTime.DeepCopy()
	}
	return c, true
}

// powerChanges are the power changes st records, oldest first (the last MaxRecordedPowerChanges): each
// attempt's power-off once the BMC confirmed it (or, for the attempt in PoweringOff when the request was
// deleted, once it was asked for), its power-on once asked for, an escalation's power-off, and clean-up's
// power-on. A power-on
// clean-up asked for and then read On (restored, now) is confirmed now.
func powerChanges(st *v1alpha1.PowerCycleRemediationStatus, how letGoKind, now time.Time) []v1alpha1.PowerChange {
	var out []v1alpha1.PowerChange
	for i, a := range st.Attempts {
		lastAttempt := i == len(st.Attempts)-1
		if a.PoweredOff != nil || (lastAttempt && st.Phase == v1alpha1.PhasePoweringOff && st.PowerRequest != nil) {
			out = append(out, v1alpha1.PowerChange{Target: v1alpha1.PowerOff, Requested: a.Started, Confirmed: a.PoweredOff})
		}
		if a.PowerOnRequested != nil {
			out = append(out, v1alpha1.PowerChange{Target: v1alpha1.PowerOn, Requested: *a.PowerOnRequested, Confirmed: a.PoweredOn})
		}
	}
	if c, ok := escalationPowerOff(st); ok {
		out = append(out, c)
	}
	if req := st.PowerRequest; req != nil && req.Target == v1alpha1.PowerOn {
		if n := len(out); n == 0 || out[n-1].Target != v1alpha1.PowerOn || !out[n-1].Requested.Equal(&req.Time) {
			out = append(out, v1alpha1.PowerChange{Target: v1alpha1.PowerOn, Requested: req.Time})
		}
		if c := &out[len(out)-1]; c.Confirmed == nil && how == letGoRestored && st.PowerState == v1alpha1.PowerOn {
			c.Confirmed = new(stamp(now))
		}
	}
	if n := len(out); n > v1alpha1.MaxRecordedPowerChanges {
		out = out[n-v1alpha1.MaxRecordedPowerChanges:]
	}
	return out
}
