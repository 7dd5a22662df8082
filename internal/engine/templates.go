package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/internal/template"
)

// Cause is why a check can start no remediation: its Disabled condition's reason, and a message for people.
type Cause struct {
	Reason  string
	Message string
}

// StepRef is one remediation step of a check's spec as written: its template and timeout (zero: none, a
// single remediationTemplate).
type StepRef struct {
	Ref     v1alpha1.TemplateReference
	Timeout time.Duration
}

// StepRefs lists a spec's remediation steps in the order they are tried: its remediationTemplate, or its
// escalatingRemediations by ascending order. Both kinds' specs say them the same way.
func StepRefs(single *v1alpha1.TemplateReference, escalating []v1alpha1.EscalatingRemediation) []StepRef {
	var steps []StepRef
	if single != nil {
		steps = append(steps, StepRef{Ref: *single})
	}
	esc := slices.Clone(escalating)
	slices.SortStableFunc(esc, func(a, b v1alpha1.EscalatingRemediation) int { return cmp.Compare(a.Order, b.Order) })
	for _, e := range esc {
		steps = append(steps, StepRef{Ref: e.RemediationTemplate, Timeout: e.Timeout.Duration})
	}
	return steps
}

// Names reports whether a step's template reference names obj, a template read in any version of its
// kind's group (a template watch maps its events to the checks naming it).
func Names(ref v1alpha1.TemplateReference, obj client.Object) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	gvk := obj.GetObjectKind().GroupVersionKind()
	return err == nil && gv.Group == gvk.Group && ref.Kind == gvk.Kind && ref.Namespace == obj.GetNamespace() && ref.Name == obj.GetName()
}

// KindStates are the states of the template and remediation kinds a check names, as the kind watcher
// reports them. Nil (no kind watcher: tests that call Reconcile directly, reading through a client) means
// that every kind can be read.
type KindStates map[schema.GroupVersionKind]kindwatch.Status

// Readable reports whether gvk can be read from the cache without waiting.
func (k KindStates) Readable(gvk schema.GroupVersionKind) bool {
	return k == nil || k[gvk].State == kindwatch.Synced
}

// NotWatchable is the cause that disables a check whose template id uses gvk, nil while gvk can be
// watched; retry is when the watcher tries the kind again.
func (k KindStates) NotWatchable(gvk schema.GroupVersionKind, id string, now time.Time) (*Cause, time.Duration) {
	st, ok := k[gvk]
	if !ok || st.State != kindwatch.Failed {
		return nil, 0
	}
	return &Cause{Reason: v1alpha1.ReasonRemediationKindNotWatchable, Message: fmt.Sprintf("Remediation template %s: %v", id, st.Err)},
		max(st.Until.Sub(now), time.Millisecond)
}

// Templates reads a check's remediation templates, the same way for both kinds: from the cache of the
// templates' kinds (each watched, so that a template made, fixed or deleted brings its checks back), and
// never a kind whose watch has not synced.
type Templates struct {
	Mapper meta.RESTMapper
	// Reader reads the templates: the manager's cache (Guarded), or a client.
	Reader client.Reader
	// KindRetry is when a check whose template kind is not installed looks again: no watch reports a CRD
	// installed.
	KindRetry time.Duration
}

// Steps resolves a spec's steps in order (Resolve): each with its request kind and, when usable, its
// template. It returns the first step's Cause that disables the check, and the soonest retry.
func (t Templates) Steps(ctx context.Context, refs []StepRef, kinds KindStates, now time.Time) ([]Step, *Cause, time.Duration, error) {
	steps := make([]Step, 0, len(refs))
	var first *Cause
	var retry time.Duration
	for _, r := range refs {
		tpl, emr, c, again, err := t.Resolve(ctx, r.Ref, kinds, now)
		if err != nil {
			return nil, nil, 0, err
		}
		if again > 0 && (retry == 0 || again < retry) {
			retry = again
		}
		if first == nil {
			first = c
		}
		steps = append(steps, Step{GVK: emr, Namespace: r.Ref.Namespace, Template: r.Ref.Name, Timeout: r.Timeout, Object: tpl})
	}
	return steps, first, retry, nil
}

// probeRef is the owner a template is instantiated for once, to find whether it can make a request.
var probeRef = metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "probe", UID: "probe"}

// Resolve reads the template ref names and says whether it can be used: its kind and its requests' kind
// installed and watched, the template found, and a request instantiable from it. It returns the template,
// the kind of its requests (set as soon as it is known, for the reads of requests a check made before),
// or the Cause that disables the check, with when to look again when no watch would say (retry); err is
// for what could not be read.
func (t Templates) Resolve(ctx context.Context, ref v1alpha1.TemplateReference, kinds KindStates, now time.Time) (
	tpl *unstructured.Unstructured, emr schema.GroupVersionKind, c *Cause, retry time.Duration, err error) {
	id := fmt.Sprintf("%s %s/%s", ref.Kind, ref.Namespace, ref.Name)
	invalid := func(format string, args ...any) *Cause {
		return &Cause{Reason: v1alpha1.ReasonTemplateInvalid, Message: fmt.Sprintf("Remediation template "+id+": "+format, args...)}
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, emr, invalid("apiVersion %q: %v", ref.APIVersion, err), 0, nil
	}
	if ref.Namespace == "" {
		return nil, emr, invalid("namespace is required"), 0, nil
	}
	tplGVK := gv.WithKind(ref.Kind)
	if emr, err = template.RemediationGVK(tplGVK); err != nil {
		return nil, emr, invalid("%v", err), 0, nil
	}
	for _, gvk := range []schema.GroupVersionKind{tplGVK, emr} {
		if _, err := t.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			if meta.IsNoMatchError(err) {
				return nil, emr, &Cause{Reason: v1alpha1.ReasonTemplateNotFound,
					Message: fmt.Sprintf("Remediation template %s: kind %s is not installed (no CRD serves it)", id, gvk)}, t.KindRetry, nil
			}
			return nil, emr, nil, 0, fmt.Errorf("mapping %s: %w", gvk, err)
		}
	}
	for _, gvk := range []schema.GroupVersionKind{tplGVK, emr} {
		if c, retry := kinds.NotWatchable(gvk, id, now); c != nil {
			return nil, emr, c, retry, nil
		}
	}
	tpl = &unstructured.Unstructured{}
	tpl.SetGroupVersionKind(tplGVK)
	if err := t.Reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, tpl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, emr, &Cause{Reason: v1alpha1.ReasonTemplateNotFound, Message: fmt.Sprintf("Remediation template %s not found", id)}, 0, nil
		}
		return nil, emr, nil, 0, fmt.Errorf("getting remediation template %s: %w", id, err)
	}
	if _, err := template.Instantiate(template.Request{Template: tpl, Name: "probe", NodeName: "probe", Target: probeRef, HealthCheck: probeRef}); err != nil {
		var inv *template.InvalidTemplateError
		if errors.As(err, &inv) {
			return nil, emr, &Cause{Reason: v1alpha1.ReasonTemplateInvalid, Message: inv.Error()}, 0, nil
		}
		return nil, emr, nil, 0, fmt.Errorf("validating remediation template %s: %w", id, err)
	}
	return tpl, emr, nil, 0, nil
}
