package engine

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// RequestOf reads what the engine needs from a remediation request (unstructured, or a typed kind that
// reports its conditions), ref naming it.
func RequestOf(ref Ref, obj client.Object) Request {
	q := Request{
		Ref:          ref,
		UID:          obj.GetUID(),
		TemplateName: obj.GetAnnotations()[template.AnnotationTemplateName],
		Created:      obj.GetCreationTimestamp().Time,
		Deleting:     obj.GetDeletionTimestamp() != nil,
	}
	q.TimedOutAt, q.TimedOut, _ = template.TimedOut(obj) // a malformed mark still counts as timed out
	if c, err := Condition(obj, template.ConditionSucceeded); err == nil && c != nil && c.Status == metav1.ConditionFalse {
		q.Failed = true
	}
	switch c, err := Condition(obj, template.ConditionProcessing); {
	case err != nil:
		q.Processing = metav1.ConditionUnknown // unreadable is not "done with the host"
	case c != nil:
		q.Processing = c.Status
	}
	return q
}

// RefOf names an unstructured request.
func RefOf(u *unstructured.Unstructured) Ref {
	return Ref{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
}

// RefIn names obj, a request of kind gvk: a typed object read from a cache does not carry its kind.
func RefIn(gvk schema.GroupVersionKind, obj client.Object) Ref {
	return Ref{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// ListRequests lists the remediation requests of kind gvk in namespace ns, uncopied (they must not be
// modified): typed for a kind TypedRequest names, so that a cache serves them from the informer RequestKind
// watches, unstructured for any other. scheme is the manager's.
func ListRequests(ctx context.Context, reader client.Reader, scheme *runtime.Scheme, gvk schema.GroupVersionKind, ns string) ([]client.Object, error) {
	listGVK := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	var list client.ObjectList
	if TypedRequest(scheme, gvk) != nil {
		if obj, err := scheme.New(listGVK); err == nil {
			list, _ = obj.(client.ObjectList)
		}
	}
	if list == nil {
		u := &unstructured.UnstructuredList{}
		u.SetGroupVersionKind(listGVK)
		list = u
	}
	if err := reader.List(ctx, list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing %s in %s (is its CRD installed and may the manager list it?): %w", gvk.Kind, ns, err)
	}
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("reading the list of %s in %s: %w", gvk.Kind, ns, err)
	}
	items := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		if item, ok := o.(client.Object); ok {
			items = append(items, item)
		}
	}
	return items, nil
}

// Condition returns a request's condition of type condType, nil when it has none.
func Condition(obj client.Object, condType string) (*metav1.Condition, error) {
	switch o := obj.(type) {
	case interface{ GetConditions() []metav1.Condition }:
		return meta.FindStatusCondition(o.GetConditions(), condType), nil
	case *unstructured.Unstructured:
		return template.FindCondition(o, condType)
	}
	return nil, nil
}

// Object is the request ref names, for a write that needs nothing else of it.
func (r Ref) Object() *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(r.APIVersion)
	obj.SetKind(r.Kind)
	obj.SetNamespace(r.Namespace)
	obj.SetName(r.Name)
	return obj
}

// Holders are the lease holder identities of the remediators of requests (pkg/leases.HolderIdentity): a
// check takes its Node's lease over from them, should one have taken it first.
func Holders(requests []Request) []string {
	var out []string
	for _, q := range requests {
		out = append(out, leases.HolderIdentity(q.Ref.Kind, q.Ref.Name))
	}
	return out
}

// MarkTimedOut marks the request ref timed out at now (template.AnnotationTimedOut, a merge patch: the
// remediator's own fields are left alone): its step has ended and the remediator must let go of the host.
// A request gone is nothing to do.
func MarkTimedOut(ctx context.Context, c client.Client, ref Ref, now time.Time) error {
	obj := ref.Object()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, template.AnnotationTimedOut, now.UTC().Format(time.RFC3339))
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("marking %s timed out: %w", ref, err)
	}
	return nil
}
