package nhc

import (
	"cmp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/engine/enginetest"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// TestParity runs the rules both health checks promise (internal/engine/enginetest) against decide.
func TestParity(t *testing.T) { enginetest.Run(t, parityAdapter{}) }

// knownDrift are the shared rows the NodeHealthCheck is known to fail, with how it behaves instead.
var knownDrift = map[string]enginetest.Drift{}

// parityNamespace is where the rows' templates, hence their requests, are.
const parityNamespace = "metalheal-system"

// parityAdapter builds decide's input from a scenario as observe would, and reads the outcome from the
// plan. A target is a Node of its name.
type parityAdapter struct{}

func (parityAdapter) KnownDrift() map[string]enginetest.Drift { return knownDrift }

func (parityAdapter) Decide(t *testing.T, s enginetest.Scenario) enginetest.Outcome {
	k := parityKit{s: s}
	in := k.observed()
	return k.outcome(t, in, decide(in, s.Now))
}

// parityKit maps one scenario's neutral names to the NodeHealthCheck's objects and back.
type parityKit struct{ s enginetest.Scenario }

func (k parityKit) templateRef(i int) v1alpha1.TemplateReference {
	st := k.s.Policy.Steps[i]
	return v1alpha1.TemplateReference{APIVersion: st.APIVersion, Kind: st.Kind + "Template", Name: st.Template, Namespace: parityNamespace}
}

func (k parityKit) gvk(i int) schema.GroupVersionKind {
	st := k.s.Policy.Steps[i]
	return schema.FromAPIVersionAndKind(st.APIVersion, st.Kind)
}

// ref is the request step i makes for target.
func (k parityKit) ref(target string, i int) emrRef {
	keys := make([]template.StepKey, len(k.s.Policy.Steps))
	for j := range k.s.Policy.Steps {
		keys[j] = template.StepKey{Kind: k.gvk(j).GroupKind(), Namespace: parityNamespace, Template: k.s.Policy.Steps[j].Template}
	}
	return emrRef{APIVersion: k.s.Policy.Steps[i].APIVersion, Kind: k.s.Policy.Steps[i].Kind, Namespace: parityNamespace,
		Name: template.RequestName(target, keys, i)}
}

// stepOf is the step a request of target was made by, -1 if none.
func (k parityKit) stepOf(target string, ref emrRef) int {
	for i := range k.s.Policy.Steps {
		if k.ref(target, i) == ref {
			return i
		}
	}
	return -1
}

func (k parityKit) check() *v1alpha1.NodeHealthCheck {
	s, pol := k.s, k.s.Policy
	c := &v1alpha1.NodeHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: enginetest.CheckName, UID: "nhc-uid", Generation: 1, CreationTimestamp: metav1.NewTime(s.Created)},
		Spec: v1alpha1.NodeHealthCheckSpec{
			UnhealthyConditions: []v1alpha1.NodeUnhealthyCondition{
				{Type: "Ready", Status: "False", Duration: metav1.Duration{Duration: enginetest.ConditionTimeout}}},
			MaxUnhealthy: ptr.To(intstr.FromString("100%")),
		},
	}
	if pol.MaxUnhealthy != nil {
		c.Spec.MaxUnhealthy = ptr.To(intstr.FromInt(*pol.MaxUnhealthy))
	}
	if len(pol.Steps) == 1 && pol.Steps[0].Timeout == 0 {
		c.Spec.RemediationTemplate = ptr.To(k.templateRef(0))
	} else {
		for i, st := range pol.Steps {
			c.Spec.EscalatingRemediations = append(c.Spec.EscalatingRemediations, v1alpha1.EscalatingRemediation{
				RemediationTemplate: k.templateRef(i), Order: int32(i + 1), Timeout: metav1.Duration{Duration: st.Timeout}})
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
	c.Status.Conditions = parityConditions(s.Conditions)
	for _, tg := range s.Targets {
		if e := tg.Status; e != nil {
			u := v1alpha1.UnhealthyNode{Name: tg.Name}
			for _, r := range e.Records {
				ref := k.ref(tg.Name, r.Step)
				rem := v1alpha1.RequestRecord{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name,
					TemplateName: pol.Steps[r.Step].Template, Started: metav1.NewTime(r.Started)}
				if !r.Ended.IsZero() {
					rem.TimedOut = ptr.To(metav1.NewTime(r.Ended))
				}
				u.Remediations = append(u.Remediations, rem)
			}
			if !e.HealthySince.IsZero() {
				u.ConditionsHealthyTimestamp = ptr.To(metav1.NewTime(e.HealthySince))
			}
			if e.WaitingFor != nil {
				u.WaitingFor = k.ref(tg.Name, *e.WaitingFor).String()
			}
			c.Status.UnhealthyNodes = append(c.Status.UnhealthyNodes, u)
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

func (k parityKit) observed() observed {
	s := k.s
	check := k.check()
	in := observed{Check: check, Ours: map[string][]remediationObject{}, Foreign: map[emrRef]string{}, Leases: map[string]leaseInfo{},
		BusyControlPlane: s.BusyControlPlane(), Holder: leaseHolder(check.Name), LeaseDuration: enginetest.LeaseDuration}
	for i := range s.Policy.Steps {
		in.Steps = append(in.Steps, stepOf(k.templateRef(i), k.gvk(i), s.Policy.Steps[i].Timeout))
	}
	if s.Policy.TemplateMissing { // as observe finds it (engine.Templates)
		in.Disabled = &cause{Reason: v1alpha1.ReasonTemplateNotFound, Message: "Remediation template missing not found"}
		in.Steps[len(in.Steps)-1].Object = nil
	}
	for _, tg := range s.Targets {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tg.Name, UID: types.UID("uid-" + tg.Name), Labels: map[string]string{}}}
		ready := corev1.ConditionTrue
		if tg.NotReady {
			ready = corev1.ConditionFalse
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(tg.Since)}}
		if tg.ControlPlane {
			n.Labels[gates.LabelControlPlane] = ""
		}
		if tg.Excluded {
			n.Labels[v1alpha1.LabelExcludeFromRemediation] = "true"
		}
		if tg.Confirmed {
			n.Annotations = map[string]string{v1alpha1.AnnotationConfirmedHealthy: ""}
		}
		for _, p := range s.Peers {
			if p.Selects(tg.Name) {
				n.Labels[peerLabel(p.Name)] = "true"
			}
		}
		in.Nodes = append(in.Nodes, n)
		for _, q := range tg.Requests {
			in.Ours[tg.Name] = append(in.Ours[tg.Name], engine.Request{Ref: k.ref(tg.Name, q.Step), TemplateName: s.Policy.Steps[q.Step].Template,
				Created: q.Created, TimedOut: !q.TimedOutAt.IsZero(), TimedOutAt: q.TimedOutAt, Failed: q.Failed,
				Processing: q.Processing, Deleting: q.Deleting})
		}
		if l := tg.Lease; l != nil {
			in.Leases[tg.Name] = leaseInfo{Holder: k.holder(tg, l.Holder, in.Holder), Until: l.Until}
		}
	}
	for _, p := range s.Peers {
		pr := peer{Name: p.Name, Created: p.Created, Selector: labels.SelectorFromSet(labels.Set{peerLabel(p.Name): "true"}),
			Criteria: criteriaOf(check.Spec.UnhealthyConditions), InFlight: map[string]bool{}}
		for _, name := range p.Remediating {
			pr.InFlight[name] = true
		}
		in.Peers = append(in.Peers, pr)
	}
	return in
}

// holder is the lease holder identity a scenario's holder stands for.
func (k parityKit) holder(tg enginetest.Target, holder, self string) string {
	switch holder {
	case enginetest.Self:
		return self
	case enginetest.OwnRemediator:
		ref := k.ref(tg.Name, tg.Requests[0].Step)
		return leases.HolderIdentity(ref.Kind, ref.Name)
	}
	return holder
}

func peerLabel(name string) string { return "peer.example.com/" + name }

// parityEvents are the events that report decisions, by what they report.
var parityEvents = map[string]enginetest.EventKind{
	EventRemediationShortCircuited: enginetest.StormBegan,
	EventStormCooldown:             enginetest.StormCooling,
	EventStormEnded:                enginetest.StormEnded,
	EventSkippedExcluded:           enginetest.Skipped,
	EventSkippedOwnedByOtherCheck:  enginetest.Skipped,
	EventSkippedControlPlaneBusy:   enginetest.Skipped,
	EventSkippedLeaseHeld:          enginetest.Skipped,
	EventSkippedRemediationExists:  enginetest.Skipped,
	EventRemediationBackingOff:     enginetest.BackingOff,
	engine.EventWouldRemediate:     enginetest.WouldRemediate,
	EventWaitingForHandOver:        enginetest.WaitingForHandOver,
	EventWaitingForConfirmation:    enginetest.WaitingForConfirmation,
	EventHandOverTimedOut:          enginetest.HandOverTimedOut,
	EventDisabled:                  enginetest.Disabled,
}

// parityActions are the events that report what the plan does, which the outcome holds otherwise (and
// which the MachineHealthCheck emits as it executes).
var parityActions = map[string]bool{
	EventRemediationTimedOut: true, EventRemediationFailed: true, EventRemediationsExhausted: true,
	EventRemediationFinished: true, EventNodeGone: true,
}

func (k parityKit) outcome(t *testing.T, in observed, p plan) enginetest.Outcome {
	out := enginetest.Outcome{Next: p.Next, Skips: map[string]string{}, WaitingFor: map[string]int{},
		Records: map[string][]enginetest.Record{}, HealthySince: map[string]time.Time{}}
	refs := func(list []emrRef) []enginetest.Ref {
		var rs []enginetest.Ref
		for _, ref := range list {
			target := nodeOf(p, ref)
			i := k.stepOf(target, ref)
			if i < 0 {
				t.Errorf("%s is no request of the scenario's", ref)
			}
			rs = append(rs, enginetest.Ref{Target: target, Step: i})
		}
		return rs
	}
	for _, c := range creates(p) {
		out.Creates = append(out.Creates, enginetest.Ref{Target: c.Target.Name, Step: c.Create.Step})
	}
	out.TimeOuts, out.Deletes = refs(timeOuts(p)), refs(deletes(p))
	for name, e := range p.Entries {
		if e.SkipReason != "" {
			out.Skips[name] = e.SkipReason
		}
		if e.WaitingFor != "" {
			out.WaitingFor[name] = -1
			for i := range k.s.Policy.Steps {
				if k.ref(name, i).String() == e.WaitingFor {
					out.WaitingFor[name] = i
				}
			}
		}
		for _, r := range e.Remediations {
			i := k.stepOf(name, emrRef{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: requestNameOf(name, r)})
			rec := enginetest.Record{Step: i, Started: r.Started.Time}
			if r.TimedOut != nil {
				rec.Ended = r.TimedOut.Time
			}
			out.Records[name] = append(out.Records[name], rec)
		}
		if e.ConditionsHealthyTimestamp != nil {
			out.HealthySince[name] = e.ConditionsHealthyTimestamp.Time
		}
	}
	for _, r := range renewals(p) {
		out.LeaseWrites = append(out.LeaseWrites, r.Node.Name)
	}
	out.Releases, out.Unconfirms = p.Release, p.Unconfirm
	if c := meta.FindStatusCondition(p.Conditions, v1alpha1.ConditionStormActive); c != nil && c.Status == metav1.ConditionTrue {
		out.Storm = c.Reason
	}
	out.Restricted = meta.IsStatusConditionFalse(p.Conditions, v1alpha1.ConditionRemediationAllowed)
	for _, ev := range p.Events {
		if ev.Reason == EventRemediationsExhausted {
			out.Exhausted = append(out.Exhausted, ev.Node)
		}
		if parityActions[ev.Reason] {
			continue
		}
		kind, ok := parityEvents[ev.Reason]
		if !ok {
			kind = enginetest.EventKind("NodeHealthCheck " + ev.Reason)
		}
		out.Events = append(out.Events, enginetest.Event{Kind: kind, Target: ev.Node})
	}
	return out
}

// requestNameOf is the name of the request node's status entry r describes: the Node's name unless the
// entry records another.
func requestNameOf(node string, r v1alpha1.RequestRecord) string {
	return cmp.Or(r.Name, node)
}
