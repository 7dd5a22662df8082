package mhc

import (
	"cmp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/engine/enginetest"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// TestParity runs the rules both health checks promise (internal/engine/enginetest) against planChecks,
// with remediation templates: the mode a NodeHealthCheck has too. Owner remediation (no template) is the
// MachineHealthCheck's own; plan_safety_test.go holds its rows.
func TestParity(t *testing.T) { enginetest.Run(t, parityAdapter{}) }

// knownDrift are the shared rows the MachineHealthCheck is known to fail, with how it behaves instead.
// enginetest.Run fails a row whose drift is gone: take it out then.
var knownDrift = map[string]enginetest.Drift{}

// parityNamespace is the check's namespace: its Machines, templates and requests are there.
const parityNamespace = "ns"

// parityAdapter builds planChecks' input from a scenario as observe and observeSafety would, and reads
// the outcome from the plan. A target is a Machine of its name, controlled by a MachineSet (a
// KubeadmControlPlane for a control-plane one), whose Node has its name too.
type parityAdapter struct{}

func (parityAdapter) KnownDrift() map[string]enginetest.Drift { return knownDrift }

func (parityAdapter) Decide(t *testing.T, s enginetest.Scenario) enginetest.Outcome {
	k := parityKit{s: s}
	in, err := k.input()
	if err != nil {
		t.Fatalf("building the MachineHealthCheck's input: %v", err)
	}
	p, err := planChecks(in)
	if err != nil {
		t.Fatalf("planChecks: %v", err)
	}
	return k.outcome(t, p)
}

// parityKit maps one scenario's neutral names to the MachineHealthCheck's objects and back.
type parityKit struct{ s enginetest.Scenario }

func (k parityKit) gvk(i int) schema.GroupVersionKind {
	st := k.s.Policy.Steps[i]
	return schema.FromAPIVersionAndKind(st.APIVersion, st.Kind)
}

// requestName is the name of the request step i makes for target.
func (k parityKit) requestName(target string, i int) string {
	keys := make([]template.StepKey, len(k.s.Policy.Steps))
	for j := range k.s.Policy.Steps {
		keys[j] = template.StepKey{Kind: k.gvk(j).GroupKind(), Namespace: parityNamespace, Template: k.s.Policy.Steps[j].Template}
	}
	return template.RequestName(target, keys, i)
}

// stepOf is the step whose template made a request or a record, -1 if none.
func (k parityKit) stepOf(kind, templateName string) int {
	for i, st := range k.s.Policy.Steps {
		if st.Kind == kind && st.Template == templateName {
			return i
		}
	}
	return -1
}

func (k parityKit) spec(name string, created time.Time) *v1alpha1.MachineHealthCheck {
	pol := k.s.Policy
	c := &v1alpha1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: parityNamespace, UID: types.UID(name + "-uid"), Generation: 1,
			CreationTimestamp: metav1.NewTime(created)},
		Spec: v1alpha1.MachineHealthCheckSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
				{Type: "Ready", Status: "False", Timeout: metav1.Duration{Duration: enginetest.ConditionTimeout}}},
		},
	}
	if pol.MaxUnhealthy != nil {
		c.Spec.MaxUnhealthy = ptr.To(intstr.FromInt(*pol.MaxUnhealthy))
	}
	ref := func(i int) v1alpha1.TemplateReference {
		st := pol.Steps[i]
		return v1alpha1.TemplateReference{APIVersion: st.APIVersion, Kind: st.Kind + "Template", Name: st.Template}
	}
	if len(pol.Steps) == 1 && pol.Steps[0].Timeout == 0 {
		c.Spec.RemediationTemplate = ptr.To(ref(0))
	} else {
		for i, st := range pol.Steps {
			c.Spec.EscalatingRemediations = append(c.Spec.EscalatingRemediations, v1alpha1.EscalatingRemediation{
				RemediationTemplate: ref(i), Order: int32(i + 1), Timeout: metav1.Duration{Duration: st.Timeout}})
		}
	}
	if pol.StormCooldown > 0 {
		c.Spec.StormCooldownDuration = &metav1.Duration{Duration: pol.StormCooldown}
	}
	c.Spec.DryRun = pol.DryRun
	if pol.HealthyDelay != 0 {
		c.Spec.HealthyDelay = &metav1.Duration{Duration: pol.HealthyDelay}
	}
	if b := pol.Backoff; b != nil {
		c.Spec.RemediationBackoff = &v1alpha1.RemediationBackoff{After: ptr.To(int32(b.After)), Window: &metav1.Duration{Duration: b.Window},
			Initial: &metav1.Duration{Duration: b.Initial}, Max: &metav1.Duration{Duration: b.Max}}
	}
	return c
}

func (k parityKit) check() *v1alpha1.MachineHealthCheck {
	s, pol := k.s, k.s.Policy
	c := k.spec(enginetest.CheckName, s.Created)
	c.Status.Conditions = parityConditions(s.Conditions)
	for _, tg := range s.Targets {
		if e := tg.Status; e != nil {
			// Every unhealthy Machine has an entry, remediated or not: the check's last pass saw it unhealthy.
			u := v1alpha1.UnhealthyMachine{Name: tg.Name, Reason: clusterv1.MachineHealthCheckUnhealthyNodeReason}
			for _, r := range e.Records {
				st := pol.Steps[r.Step]
				rec := v1alpha1.RequestRecord{APIVersion: st.APIVersion, Kind: st.Kind, TemplateName: st.Template,
					Started: metav1.NewTime(r.Started)}
				if !r.Ended.IsZero() {
					rec.TimedOut = ptr.To(metav1.NewTime(r.Ended))
				}
				u.Remediations = append(u.Remediations, rec)
			}
			if !e.HealthySince.IsZero() {
				u.ConditionsHealthyTimestamp = ptr.To(metav1.NewTime(e.HealthySince))
			}
			if e.WaitingFor != nil {
				u.WaitingFor = pol.Steps[*e.WaitingFor].Kind + " " + parityNamespace + "/" + k.requestName(tg.Name, *e.WaitingFor)
			}
			c.Status.UnhealthyMachines = append(c.Status.UnhealthyMachines, u)
		}
		if len(tg.RecentStarts) > 0 {
			rr := v1alpha1.RecentRemediation{Name: tg.Name}
			for _, at := range tg.RecentStarts {
				rr.Starts = append(rr.Starts, metav1.NewTime(at))
			}
			c.Status.RecentRemediations = append(c.Status.RecentRemediations, rr)
		}
	}
	return c
}

// parityConditions are a check's previous storm conditions (the same types and reasons in both kinds).
func parityConditions(c enginetest.Conditions) []metav1.Condition {
	if c.Storm == "" {
		return nil
	}
	allowed := metav1.Condition{Type: v1alpha1.ConditionRemediationAllowed, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonTooManyUnhealthy, LastTransitionTime: metav1.NewTime(enginetest.T0.Add(-24 * time.Hour))}
	if !c.AllowedSince.IsZero() {
		allowed.Status, allowed.Reason, allowed.LastTransitionTime = metav1.ConditionTrue, v1alpha1.ReasonWithinBudget, metav1.NewTime(c.AllowedSince)
	}
	return []metav1.Condition{allowed, {Type: v1alpha1.ConditionStormActive, Status: metav1.ConditionTrue, Reason: c.Storm,
		LastTransitionTime: allowed.LastTransitionTime}}
}

func (k parityKit) input() (planInput, error) {
	s := k.s
	check := k.check()
	steps, err := stepsFor(check)
	if err != nil {
		return planInput{}, err
	}
	in := planInput{Check: check, Spec: checkSpecFor(check), Steps: steps, Now: s.Now, Safety: safetyInput{
		Holder: checkLeaseHolder(check.Name), LeaseDuration: enginetest.LeaseDuration, Leases: map[string]gates.Lease{},
		BusyControlPlane: s.BusyControlPlane(), Elsewhere: map[string]string{}}}
	if s.Policy.TemplateMissing { // as observe finds it (engine.Templates)
		in.Disabled = &engine.Cause{Reason: v1alpha1.ReasonTemplateNotFound, Message: "Remediation template missing not found"}
	}
	for _, tg := range s.Targets {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: tg.Name, Namespace: parityNamespace, UID: types.UID("uid-" + tg.Name),
			CreationTimestamp: metav1.NewTime(s.Now.Add(-24 * time.Hour)), Labels: map[string]string{"pool": "a"}}}
		m.Status.NodeRef.Name = tg.Name
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tg.Name, Labels: map[string]string{}}}
		ready := corev1.ConditionTrue
		if tg.NotReady {
			ready = corev1.ConditionFalse
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(tg.Since)}}
		if tg.ControlPlane {
			m.Labels[clusterv1.MachineControlPlaneLabel] = ""
			controlledBy("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane")(m)
			n.Labels[gates.LabelControlPlane] = ""
		} else {
			byMachineSet(m)
		}
		if tg.Excluded {
			n.Labels[v1alpha1.LabelExcludeFromRemediation] = "true"
		}
		if tg.Confirmed {
			n.Annotations = map[string]string{v1alpha1.AnnotationConfirmedHealthy: ""}
		}
		for _, p := range s.Peers {
			if p.Selects(tg.Name) {
				m.Labels[peerLabel(p.Name)] = "true"
			}
		}
		o := observedTarget{Machine: m, Node: n}
		for _, q := range tg.Requests {
			o.Requests = append(o.Requests, k.request(tg.Name, q))
		}
		in.Machines = append(in.Machines, o)
		if l := tg.Lease; l != nil {
			in.Safety.Leases[tg.Name] = gates.Lease{Holder: k.holder(tg, l.Holder, in.Safety.Holder), Until: l.Until}
		}
	}
	for _, p := range s.Peers {
		other := k.spec(p.Name, p.Created)
		sel := labels.SelectorFromSet(labels.Set{peerLabel(p.Name): "true"})
		pr := mhcPeer{Check: other, Spec: checkSpecFor(other), Sel: sel, Remediating: map[string]bool{}}
		for _, name := range p.Remediating {
			pr.Remediating[name] = true
		}
		in.Safety.Peers = append(in.Safety.Peers, pr)
	}
	return in, nil
}

// request is a scenario's request as the cache shows it (unstructured, with the remediator's conditions),
// as observe reads it.
func (k parityKit) request(target string, q enginetest.Request) engine.Request {
	st := k.s.Policy.Steps[q.Step]
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.gvk(q.Step))
	u.SetNamespace(parityNamespace)
	u.SetName(k.requestName(target, q.Step))
	u.SetCreationTimestamp(metav1.NewTime(q.Created))
	u.SetAnnotations(map[string]string{template.AnnotationTemplateName: st.Template})
	if !q.TimedOutAt.IsZero() {
		template.MarkTimedOut(u, q.TimedOutAt)
	}
	if q.Deleting {
		u.SetDeletionTimestamp(ptr.To(metav1.NewTime(q.Created)))
	}
	var conds []any
	if q.Failed {
		conds = append(conds, map[string]any{"type": "Succeeded", "status": "False", "reason": "Failed", "message": "",
			"lastTransitionTime": k.s.Now.Format(time.RFC3339)})
	}
	if q.Processing != "" {
		conds = append(conds, map[string]any{"type": "Processing", "status": string(q.Processing), "reason": "Test", "message": "",
			"lastTransitionTime": k.s.Now.Format(time.RFC3339)})
	}
	if len(conds) > 0 {
		_ = unstructured.SetNestedSlice(u.Object, conds, "status", "conditions")
	}
	return engine.RequestOf(engine.RefOf(u), u)
}

// holder is the lease holder identity a scenario's holder stands for.
func (k parityKit) holder(tg enginetest.Target, holder, self string) string {
	switch holder {
	case enginetest.Self:
		return self
	case enginetest.OwnRemediator:
		return leases.HolderIdentity(k.s.Policy.Steps[tg.Requests[0].Step].Kind, k.requestName(tg.Name, tg.Requests[0].Step))
	}
	return holder
}

func peerLabel(name string) string { return "peer.example.com/" + name }

// parityEvents are the events that report decisions, by what they report.
var parityEvents = map[string]enginetest.EventKind{
	EventRemediationRestricted:  enginetest.StormBegan,
	EventStormCooldown:          enginetest.StormCooling,
	EventStormEnded:             enginetest.StormEnded,
	EventRemediationSkipped:     enginetest.Skipped,
	EventRemediationBackingOff:  enginetest.BackingOff,
	engine.EventWouldRemediate:  enginetest.WouldRemediate,
	EventWaitingForHandOver:     enginetest.WaitingForHandOver,
	EventWaitingForConfirmation: enginetest.WaitingForConfirmation,
	EventHandOverTimedOut:       enginetest.HandOverTimedOut,
	EventDisabled:               enginetest.Disabled,
}

func (k parityKit) outcome(t *testing.T, p plan) enginetest.Outcome {
	out := enginetest.Outcome{Next: p.NextCheck, Releases: p.Release, Skips: map[string]string{}, WaitingFor: map[string]int{},
		Records: map[string][]enginetest.Record{}, HealthySince: map[string]time.Time{}}
	refs := func(target string, list []engine.Request) []enginetest.Ref {
		var rs []enginetest.Ref
		for _, q := range list {
			i := k.stepOf(q.Ref.Kind, q.TemplateName)
			if i < 0 || q.Ref.Name != k.requestName(target, i) {
				t.Errorf("%s is no request of the scenario's for %s", q.Ref, target)
			}
			rs = append(rs, enginetest.Ref{Target: target, Step: i})
		}
		return rs
	}
	created := map[string]int{}
	for _, tp := range p.Targets {
		name := tp.Machine.Name
		if c := tp.create(); c != nil {
			i := k.stepOf(p.Steps[c.Step].GVK.Kind, p.Steps[c.Step].Template)
			out.Creates = append(out.Creates, enginetest.Ref{Target: name, Step: i})
			created[name] = i
		}
		o := cmp.Or(tp.Out, &engine.Outcome{})
		out.TimeOuts = append(out.TimeOuts, refs(name, requests(o, o.Walk.TimeOut))...)
		out.Deletes = append(out.Deletes, refs(name, requests(o, o.Walk.Delete, o.Delete))...)
		if o.Walk.Exhausted && o.Walk.Ended != nil {
			out.Exhausted = append(out.Exhausted, name)
		}
		if tp.Unconfirm {
			out.Unconfirms = append(out.Unconfirms, name)
		}
		if tp.Lease != nil && tp.create() == nil {
			out.LeaseWrites = append(out.LeaseWrites, name)
		}
	}
	for _, e := range p.Status.UnhealthyMachines {
		if e.SkipReason != "" {
			out.Skips[e.Name] = e.SkipReason
		}
		if e.WaitingFor != "" {
			out.WaitingFor[e.Name] = -1
			for i, st := range k.s.Policy.Steps {
				if st.Kind+" "+parityNamespace+"/"+k.requestName(e.Name, i) == e.WaitingFor {
					out.WaitingFor[e.Name] = i
				}
			}
		}
		var records []enginetest.Record
		for _, r := range e.Remediations {
			rec := enginetest.Record{Step: k.stepOf(r.Kind, r.TemplateName), Started: r.Started.Time}
			if r.TimedOut != nil {
				rec.Ended = r.TimedOut.Time
			}
			records = append(records, rec)
		}
		// A new step's request is recorded at once (execute drops the record if the create fails): the
		// outcome's records are those before it.
		if i, ok := created[e.Name]; ok && len(records) > 0 {
			if last := records[len(records)-1]; last.Step == i && last.Started.Equal(k.s.Now) && last.Ended.IsZero() {
				records = records[:len(records)-1]
			}
		}
		out.Records[e.Name] = records
		if e.ConditionsHealthyTimestamp != nil {
			out.HealthySince[e.Name] = e.ConditionsHealthyTimestamp.Time
		}
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionStormActive); c != nil && c.Status == metav1.ConditionTrue {
		out.Storm = c.Reason
	}
	out.Restricted = meta.IsStatusConditionFalse(p.Status.Conditions, v1alpha1.ConditionRemediationAllowed)
	for _, ev := range p.Events {
		kind, ok := parityEvents[ev.Reason]
		if !ok {
			kind = enginetest.EventKind("MachineHealthCheck " + ev.Reason)
		}
		target := ""
		if m, ok := ev.Regarding.(*clusterv1.Machine); ok {
			target = m.Name
		}
		out.Events = append(out.Events, enginetest.Event{Kind: kind, Target: target})
	}
	return out
}
