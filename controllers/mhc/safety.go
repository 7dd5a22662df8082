package mhc

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/budget"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/workload"
	"github.com/metalheal/metalheal/pkg/leases"
)

// holderKind is the kind in the check's lease holder identity,
// "MachineHealthCheck.remediation.metalheal.io-<name>" (checkLeaseHolder). Two checks of one name in two namespaces share it; each only
// ever renews or releases the leases of the Nodes of its own Machines, so they never touch each other's.
const holderKind = "MachineHealthCheck"

// Default lease settings, the manager's flag defaults.
const defaultLeaseDuration = 10 * time.Minute

// Skip reasons of the safety gates: status.unhealthyMachines[].skipReason and the reason label of the
// skipped metric, the NodeHealthCheck's.
const (
	blockedOwnedByOtherCheck blocker = engine.SkipOwnedByOtherCheck
	blockedControlPlaneBusy  blocker = gates.SkipControlPlaneBusy
	blockedLeaseHeld         blocker = gates.SkipLeaseHeldByOther
	blockedRemediationExists blocker = engine.SkipRemediationExists
	// blockedStormCooldown: the storm is over but stormCooldownDuration has not passed.
	blockedStormCooldown blocker = "StormCooldown"
)

// safetyInput is what the safety gates decide from, read by observeSafety.
type safetyInput struct {
	// Holder is the check's lease holder identity; LeaseDuration how long it takes a lease for.
	Holder        string
	LeaseDuration time.Duration
	// Site is the cluster the check's Nodes were read from (observe): their leases are read, claimed,
	// taken and released there.
	Site nodeSite
	// Leases are the node leases in the lease namespace of Site, by Node name (nil: none were read, and
	// the plan takes, renews and releases none).
	Leases map[string]gates.Lease
	// BusyControlPlane are control-plane Nodes other checks (of both kinds) are remediating now, or whose
	// lease someone else holds.
	BusyControlPlane []string
	// Peers are the other MachineHealthChecks of the namespace, for the overlapping rule.
	Peers []mhcPeer
	// Elsewhere are the Nodes other checks of either kind are remediating, valued by who ("NodeHealthCheck
	// <name>"): the overlapping rule across kinds, for when their lease is not in the cache yet.
	Elsewhere map[string]string
}

// mhcPeer is another MachineHealthCheck as the overlapping rule sees it.
type mhcPeer struct {
	Check *v1alpha1.MachineHealthCheck
	Spec  checkSpec
	Sel   labels.Selector
	// Remediating are the Machines it is remediating: its status records requests for them.
	Remediating map[string]bool
}

// checkKind is how the controller watches its own MachineHealthChecks: the other checks of a check's
// namespace look again at a change of it that the overlapping rule reads (engine.WatchChecks).
var checkKind = engine.CheckKind{Object: &v1alpha1.MachineHealthCheck{},
	NewList: func() client.ObjectList { return &v1alpha1.MachineHealthCheckList{} }, Namespaced: true, Peer: peerStatus}

// peerStatus is what the other MachineHealthChecks read of a check's status (engine.PeerStatus): its
// Disabled condition, and the Machines it records requests for. Requests stay until the Machine is healthy,
// ended steps' too: as the NodeHealthCheck's in-flight Nodes, a Machine with any is being remediated.
func peerStatus(obj client.Object) engine.PeerStatus {
	mhc, ok := obj.(*v1alpha1.MachineHealthCheck)
	if !ok {
		return engine.PeerStatus{}
	}
	st := engine.PeerStatus{Disabled: meta.IsStatusConditionTrue(mhc.Status.Conditions, v1alpha1.ConditionDisabled),
		Remediating: map[string]bool{}}
	for _, um := range mhc.Status.UnhealthyMachines {
		if len(um.Remediations) > 0 {
			st.Remediating[um.Name] = true
		}
	}
	return st
}

// checkLeaseHolder is the holder identity a MachineHealthCheck takes node leases as: group-qualified, like
// metalheal's NodeHealthCheck's (pkg/leases.QualifiedHolderIdentity), which is the form the power-cycle
// remediator recognises as its request's owner.
func checkLeaseHolder(name string) string {
	return leases.QualifiedHolderIdentity(holderKind, v1alpha1.GroupVersion.Group, name)
}

// observeSafety reads what the safety gates need, from the caches: the node leases of the cluster of the
// check's Nodes (the management cluster's, or the workload cluster's: in.Safety.Site), the other checks of
// both kinds and the control-plane Nodes they or anyone's lease hold.
func (r *Reconciler) observeSafety(ctx context.Context, in *planInput) error {
	mhc := in.Check
	in.Safety.Holder = checkLeaseHolder(mhc.Name)
	in.Safety.LeaseDuration = r.opts.LeaseDuration
	in.Safety.Elsewhere = map[string]string{}
	site := in.Safety.Site
	remote := site.Remote != nil
	ls, err := r.listLeases(ctx, site)
	if err != nil {
		return err
	}
	in.Safety.Leases = ls
	controlPlaneNode := r.controlPlaneNode(site)
	busy := map[string]bool{}
	leased, err := engine.LeasedControlPlane(ctx, in.Safety.Leases, in.Safety.Holder, in.Now, controlPlaneNode)
	if err != nil {
		return err
	}
	for _, node := range leased {
		busy[node] = true
	}
	// A workload cluster's Nodes share no names with the Nodes NodeHealthChecks see.
	var nhcs v1alpha1.NodeHealthCheckList
	if !remote {
		if err := r.reader.List(ctx, &nhcs, client.UnsafeDisableDeepCopy); err != nil && !meta.IsNoMatchError(err) {
			return fmt.Errorf("listing NodeHealthChecks: %w", err)
		}
	}
	for i := range nhcs.Items {
		for node := range nhcs.Items[i].Status.InFlightRemediations {
			in.Safety.Elsewhere[node] = "NodeHealthCheck " + nhcs.Items[i].Name
			if busy[node] {
				continue
			}
			if cp, err := controlPlaneNode(ctx, node); err != nil {
				return err
			} else if cp {
				busy[node] = true
			}
		}
	}
	var mhcs v1alpha1.MachineHealthCheckList
	if err := r.reader.List(ctx, &mhcs, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing MachineHealthChecks: %w", err)
	}
	for i := range mhcs.Items {
		other := &mhcs.Items[i]
		if other.UID == mhc.UID {
			continue
		}
		st := peerStatus(other)
		// Only checks of the same Nodes compare Node names: the local ones, or those of one workload cluster.
		sameNodes := r.remoteNodes(other) == remote &&
			(!remote || (other.Namespace == mhc.Namespace && other.Spec.ClusterName == mhc.Spec.ClusterName))
		for machine := range st.Remediating {
			if !sameNodes {
				continue
			}
			node, err := r.busyMachine(ctx, other.Namespace, machine, controlPlaneNode, busy)
			if err != nil {
				return err
			}
			if node != "" {
				in.Safety.Elsewhere[node] = "MachineHealthCheck " + other.Namespace + "/" + other.Name
			}
		}
		if other.Namespace != mhc.Namespace || !other.DeletionTimestamp.IsZero() || st.Disabled {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&other.Spec.Selector)
		if err != nil || sel.Empty() {
			continue // it cannot select anything either
		}
		in.Safety.Peers = append(in.Safety.Peers, mhcPeer{Check: other, Spec: checkSpecFor(other), Sel: sel, Remediating: st.Remediating})
	}
	for node := range busy {
		in.Safety.BusyControlPlane = append(in.Safety.BusyControlPlane, node)
	}
	slices.Sort(in.Safety.BusyControlPlane)
	return nil
}

// remoteNodes reports whether the check reads its Nodes from a workload cluster.
func (r *Reconciler) remoteNodes(mhc *v1alpha1.MachineHealthCheck) bool {
	return mhc.Spec.ClusterName != "" && r.remotes.Connected(clusterKey(mhc))
}

// nodeSite is the cluster a check's Nodes were read from in one reconcile, as observe found it: the
// management cluster (the zero value) or a workload cluster. Node names repeat across clusters, so the
// check's node leases are read, claimed, taken and released in that cluster and nowhere else: a workload
// cluster's worker-1 is never leased in the management cluster, nor the reverse. The site is decided once
// per reconcile: a connection dropped or replaced meanwhile still reaches the same cluster.
type nodeSite struct {
	// Key names the workload cluster; Remote reaches it (nil for the management cluster).
	Key    types.NamespacedName
	Remote *workload.Cluster
}

// listLeases reads the node leases of the site's lease namespace from a cache: the manager's, or the
// workload cluster connection's (which holds that namespace's Leases only).
func (r *Reconciler) listLeases(ctx context.Context, site nodeSite) (map[string]gates.Lease, error) {
	if site.Remote != nil {
		ls, err := gates.ListLeases(ctx, site.Remote.Leases(), r.opts.LeaseNamespace)
		if err != nil {
			return nil, fmt.Errorf("workload cluster %s: %w", site.Key, err)
		}
		return ls, nil
	}
	return gates.ListLeases(ctx, r.reader, r.opts.LeaseNamespace)
}

// controlPlaneNode returns how to tell whether a Node of the site is a control-plane Node, from its Node
// cache. A Node that is gone is not one.
func (r *Reconciler) controlPlaneNode(site nodeSite) func(ctx context.Context, name string) (bool, error) {
	nodes := r.reader
	if site.Remote != nil {
		nodes = site.Remote.Nodes()
	}
	return func(ctx context.Context, name string) (bool, error) {
		n := &corev1.Node{}
		if err := nodes.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, fmt.Errorf("reading Node %s: %w", name, err)
		}
		return gates.IsControlPlane(n.Labels), nil
	}
}

// busyMachine adds the Node (or, without one, the Machine) of another check's control-plane Machine under
// remediation to busy, and returns the Machine's Node ("" when it has none or is gone). controlPlaneNode
// reads the roles of the Nodes of the cluster the two checks share.
func (r *Reconciler) busyMachine(ctx context.Context, ns, name string, controlPlaneNode func(context.Context, string) (bool, error),
	busy map[string]bool) (string, error) {
	version, err := r.served.get()
	if err != nil {
		return "", err
	}
	m, err := getMachine(ctx, r.reader, version, types.NamespacedName{Namespace: ns, Name: name})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading Machine %s/%s: %w", ns, name, err)
	}
	n := m.Status.NodeRef.Name
	if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		busy[cpKey(m)] = true
		return n, nil
	}
	if n != "" {
		if cp, err := controlPlaneNode(ctx, n); err != nil {
			return "", err
		} else if cp {
			busy[n] = true
		}
	}
	return n, nil
}

// cpKey names a control-plane target for the one-at-a-time rule: its Node, which both checkers know it
// by, or the Machine when it has none.
func cpKey(m *clusterv1.Machine) string {
	return cmp.Or(m.Status.NodeRef.Name, "Machine "+m.Namespace+"/"+m.Name)
}

// isControlPlaneTarget: a Machine of a control plane, or one whose Node has a control-plane role.
func isControlPlaneTarget(o observedTarget) bool {
	if _, cp := o.Machine.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		return true
	}
	return o.Node != nil && gates.IsControlPlane(o.Node.Labels)
}

// safety applies the gates across the Machines of one plan (engine.Gate): the control-plane targets this
// check is remediating are busy, and each gated target admitted adds itself.
type safety struct {
	in planInput
	// pass decides the template remediations (engine.Pass), and keeps the leases of every kind.
	pass *engine.Pass
}

func newSafety(in planInput, memory *backoff.Memory) *safety {
	s := &safety{in: in, pass: &engine.Pass{Steps: in.Steps, Now: in.Now, Holder: in.Safety.Holder, Leases: in.Safety.Leases,
		LeaseDuration: in.Safety.LeaseDuration, Gate: engine.Gate{Backoff: memory, DryRun: in.Check.Spec.DryRun,
			Admission: gates.NewAdmission(in.Safety.Holder, in.Safety.Leases, in.Safety.BusyControlPlane, in.Now)}}}
	for _, o := range in.Machines {
		if holdsControlPlane(o) || changingControlPlane(o) {
			s.pass.Gate.Admission.Busy(cpKey(o.Machine))
		}
	}
	return s
}

// changingControlPlane reports whether the Machine is a control-plane Machine being deleted, or without a
// Node: one joining (a replacement its owner is building), or whose Node is gone. The control plane is
// changing (an etcd member leaving or joining), and, as Cluster API's control-plane controller counts it
// before it remediates, no other control-plane Machine's remediation starts meanwhile: a replacement has
// no Node, so no lease records it.
func changingControlPlane(o observedTarget) bool {
	_, cp := o.Machine.Labels[clusterv1.MachineControlPlaneLabel]
	return cp && (!o.Machine.DeletionTimestamp.IsZero() || o.Node == nil)
}

// changingKeys are the one-at-a-time keys of the changing control-plane Machines (changingControlPlane),
// which the check tells the manager's control-plane claim: a NodeHealthCheck reads no Machines, and no
// lease records them.
func changingKeys(machines []observedTarget) []string {
	var out []string
	for _, o := range machines {
		if changingControlPlane(o) {
			out = append(out, cpKey(o.Machine))
		}
	}
	return out
}

// holdsControlPlane reports whether the Machine is a control-plane target the check acts on: a request of
// ours lives for it, whatever its step's state (one timed out may still be handing the host over, and its
// lease may have lapsed while the manager was down), or its owner was asked to replace it. As a
// NodeHealthCheck's Nodes with requests, it keeps every other control-plane start of the check back.
func holdsControlPlane(o observedTarget) bool {
	return isControlPlaneTarget(o) && (len(o.Requests) > 0 || ownerReplacing(o.Machine))
}

// remediating reports whether the check is remediating the Machine: it has a request of ours not ended,
// or its owner was asked to replace it.
func remediating(o observedTarget) bool {
	for _, r := range o.Requests {
		if !r.TimedOut && !r.Deleting {
			return true
		}
	}
	return ownerReplacing(o.Machine)
}

// ownerOf is the overlapping rule for a Machine this check finds unhealthy (engine.Start.Owner), across
// both kinds, unless the check has started remediating it (started).
func (s *safety) ownerOf(o observedTarget, started bool, now time.Time) func() (string, string) {
	node := o.Machine.Status.NodeRef.Name
	return func() (string, string) {
		if started {
			return "", ""
		}
		if owner := s.owner(o, now); owner != "" {
			return engine.SkipOwnedByOtherCheck, gates.OwnedMessage("MachineHealthCheck", owner, "Machine")
		}
		// A check of the other kind remediating the Node keeps it; while someone holds its lease, the
		// admission says so.
		if _, held := s.in.Safety.Leases[node].HeldByOther(s.in.Safety.Holder, now); node != "" && s.in.Safety.Elsewhere[node] != "" && !held {
			return engine.SkipOwnedByOtherCheck, fmt.Sprintf("%s is remediating node %s (the check already remediating a node keeps it)",
				s.in.Safety.Elsewhere[node], node)
		}
		return "", ""
	}
}

// target is the Machine as the engine decides its remediation.
func (s *safety) target(t *targetPlan, o observedTarget, prev v1alpha1.RemediationProgress) engine.Target {
	et := engine.Target{Name: t.Machine.Name, Subject: "Machine", Node: o.Node, NodeName: t.Machine.Status.NodeRef.Name, Why: t.Verdict.Reason,
		ExpiredAt: t.Verdict.ExpiredAt, Held: t.Blocked != notBlocked, Requests: o.Requests, Status: prev,
		Owner: s.ownerOf(o, len(prev.Remediations) > 0 || len(o.Requests) > 0 || remediating(o), s.in.Now)}
	if isControlPlaneTarget(o) {
		et.CPKey = cpKey(o.Machine)
	}
	return et
}

// owner applies the overlapping rule (internal/gates) to a Machine this check finds unhealthy: "" when
// this check owns it, else the owning check's name.
func (s *safety) owner(o observedTarget, now time.Time) string {
	set := labels.Set(o.Machine.Labels)
	contenders := make([]gates.Contender, 0, len(s.in.Safety.Peers))
	for _, p := range s.in.Safety.Peers {
		c := gates.Contender{Name: p.Check.Name, Created: p.Check.CreationTimestamp.Time, Remediating: p.Remediating[o.Machine.Name]}
		if p.Sel.Matches(set) && (p.Check.Spec.ClusterName == "" || p.Check.Spec.ClusterName == o.Machine.Spec.ClusterName) {
			v := checkTarget(p.Spec, targetInput{Machine: o.Machine, Node: o.Node, NodeMissing: o.NodeMissing, Cluster: s.in.Cluster}, now)
			c.Claims = v.State == stateUnhealthy
		}
		contenders = append(contenders, c)
	}
	self := s.in.Check
	return gates.Owner(gates.Contender{Name: self.Name, Created: self.CreationTimestamp.Time, Claims: true}, contenders)
}

// keepLease keeps the check's node lease for one Machine (engine.Pass.KeepLease) while a request of ours
// lives, or while the Machine's owner replaces it (OwnerRemediated=False): every remediation of a Node,
// whoever carries it out, holds the Node's lease for as long as it acts, so that every checker (a
// NodeHealthCheck's control-plane rule, say) and every outside actor sees it.
func (s *safety) keepLease(t *targetPlan, o observedTarget) {
	if len(o.Requests) == 0 && !ownerReplacing(o.Machine) {
		return
	}
	if out := s.pass.KeepLease(engine.Target{Node: o.Node, Requests: o.Requests}); out.Lease {
		t.Lease = &leaseAction{Node: o.Node, From: out.From}
	}
}

// releaseLeases lists the Nodes of this check's Machines (and of its orphaned requests) whose lease the
// check holds but no longer needs: no request of ours for it, none being created.
func (s *safety) releaseLeases(p *plan) []string {
	if s.in.Safety.Leases == nil {
		return nil
	}
	mine, keep := map[string]bool{}, map[string]bool{}
	for _, o := range s.in.Machines {
		if n := o.Machine.Status.NodeRef.Name; n != "" {
			mine[n] = true
			if len(o.Requests) > 0 || ownerReplacing(o.Machine) {
				keep[n] = true
			}
		}
	}
	for _, t := range p.Targets {
		if n := t.Machine.Status.NodeRef.Name; n != "" && (t.create() != nil || t.MarkedForOwner) {
			keep[n] = true
		}
	}
	for _, o := range s.in.Orphans {
		if o.Node != "" {
			mine[o.Node] = true
		}
	}
	return gates.Release(s.in.Safety.Leases, s.in.Safety.Holder, func(node string) bool { return !mine[node] || keep[node] })
}

// leaseAction takes the Node's lease for the check (From: the remediators of our own requests, which the
// check takes it over from).
type leaseAction struct {
	Node *corev1.Node
	From []string
	// Fresh: no request of ours for the Machine exists, so the lease is taken for the one being created
	// alone, and let go should that creation be skipped.
	Fresh bool
}

// checkWide decides the check's Disabled, Paused, RemediationAllowed and StormActive conditions and the
// events of their transitions (engine.DecideCheckWide, the NodeHealthCheck's rules): while the budget is
// exceeded, and stormCooldownDuration after it is met again, no remediation starts. The storm's beginning
// is said under Cluster API's name for it, RemediationRestricted.
func checkWide(p *plan, mhc *v1alpha1.MachineHealthCheck, paused string, disabled *engine.Cause, d budget.Decision, now time.Time) engine.CheckWide {
	var pauses []string
	if paused != "" {
		pauses = []string{paused}
	}
	cw := engine.DecideCheckWide(engine.CheckWideInput{Conditions: mhc.Status.Conditions, Generation: mhc.Generation,
		Paused: pauses, Budget: d, Cooldown: engine.DurationOf(mhc.Spec.StormCooldownDuration), Disabled: disabled,
		Works: "Cluster API, the Cluster's kubeconfig, the remediation kinds and templates are readable", Now: now})
	p.NextCheck = engine.Earliest(p.NextCheck, cw.Storm.Until)
	for _, ev := range cw.Events {
		if ev.Reason == engine.EventRemediationShortCircuited {
			ev.Reason = EventRemediationRestricted
		}
		p.Events = append(p.Events, checkEvent{Regarding: mhc, Type: eventType(ev), Reason: ev.Reason, Note: ev.Note})
	}
	return cw
}

// applyGate applies the safety gates to a Machine about to be handed to its owner (condition-based
// remediation, which the back-off does not hold) and returns when to look again. An admitted one takes its
// Node's lease first, as a request would: the owner's replacement is a remediation of the Node too.
func applyGate(s *safety, t *targetPlan, entry *v1alpha1.UnhealthyMachine, o observedTarget, now time.Time) time.Time {
	key := ""
	if isControlPlaneTarget(o) {
		key = cpKey(o.Machine)
	}
	if r := s.pass.Gate.Start(engine.Start{Target: o.Machine.Name, Node: o.Machine.Status.NodeRef.Name, CPKey: key,
		Owner: s.ownerOf(o, remediating(o), now), WouldDo: engine.WouldHandToOwner}); r != nil {
		t.refuse(entry, r)
		return r.Retry
	}
	if s.in.Safety.Leases != nil && o.Node != nil {
		t.Lease = &leaseAction{Node: o.Node, Fresh: true}
	}
	return time.Time{}
}

// refuse records a gate's refusal in the plan and the Machine's status entry.
func (t *targetPlan) refuse(entry *v1alpha1.UnhealthyMachine, r *engine.Skip) {
	t.Blocked, t.Skip = blocker(r.Reason), r
	entry.SkipReason, entry.SkipMessage = r.Reason, r.Message
}

// ownerReplacing reports whether the Machine was handed to its owner for replacement
// (OwnerRemediated=False) and is not gone yet.
func ownerReplacing(m *clusterv1.Machine) bool {
	return meta.IsStatusConditionFalse(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition)
}

// admitted applies what the engine decided for a Machine's template remediation (engine.Pass.Unhealthy,
// then Admit) to its plan and status entry: the walk's records and marks, the skip, and the request to
// create (recorded once it is sent: execute) with its Node's lease first.
func (s *safety) admitted(t *targetPlan, o observedTarget, entry *v1alpha1.UnhealthyMachine, out *engine.Outcome) {
	t.Out = out
	if out.Skip != nil {
		t.refuse(entry, out.Skip)
	} else {
		out.Entry.SkipReason, out.Entry.SkipMessage = entry.SkipReason, entry.SkipMessage // the Machine's own (Excluded)
	}
	entry.RemediationProgress = out.Entry
	switch c := out.Create; {
	case c != nil:
		if s.in.Safety.Leases != nil && o.Node != nil {
			t.Lease = &leaseAction{Node: o.Node, From: engine.Holders(o.Requests), Fresh: len(o.Requests) == 0}
		}
	case out.Lease:
		t.Lease = &leaseAction{Node: o.Node, From: out.From}
	}
}

// machineEvents are the engine's events about a Machine that the plan records; a step's end, the last
// step's and a request's deletion are recorded once execute has written them.
func machineEvents(mhc *v1alpha1.MachineHealthCheck, m *clusterv1.Machine, evs []engine.Event) []checkEvent {
	var out []checkEvent
	for _, ev := range evs {
		switch ev.Reason {
		case engine.EventRemediationTimedOut, engine.EventRemediationFailed, engine.EventRemediationsExhausted, engine.EventRemediationFinished:
			continue
		}
		out = append(out, checkEvent{Regarding: m, Related: mhc, Type: eventType(ev), Reason: cmp.Or(ev.Reason, EventRemediationSkipped), Note: ev.Note})
	}
	return out
}

// skipEvents is the event a skip calls for (engine.Skip.Event): once per reason and message, once
// per back-off hold.
func skipEvents(mhc *v1alpha1.MachineHealthCheck, t *targetPlan, entry, prev *v1alpha1.UnhealthyMachine) []checkEvent {
	if entry.SkipReason == "" {
		return nil
	}
	r := engine.Skip{Reason: entry.SkipReason, Message: entry.SkipMessage}
	if t.Skip != nil {
		r = *t.Skip
	}
	var prevReason, prevMessage string
	if prev != nil {
		prevReason, prevMessage = prev.SkipReason, prev.SkipMessage
	}
	ev := r.Event(prevReason, prevMessage, "Machine", t.Verdict.Reason)
	if ev == nil {
		return nil
	}
	return []checkEvent{{Regarding: t.Machine, Related: mhc, Type: eventType(*ev), Reason: cmp.Or(ev.Reason, EventRemediationSkipped), Note: ev.Note}}
}

// eventType is the type of an engine's event.
func eventType(ev engine.Event) string {
	if ev.Normal {
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}
