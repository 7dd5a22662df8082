package nhc

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// holderKind is the check's kind, in its requests' owner references and its lease holder identity.
const holderKind = "NodeHealthCheck"

// leaseHolder is the lease holder identity of the check of a name, group-qualified
// ("NodeHealthCheck.remediation.metalheal.io-<name>"): medik8s' NodeHealthCheck holds leases as
// "NodeHealthCheck-<name>", and a metalheal check and a medik8s check of the same name must not take each
// other's lease for their own (docs/interop.md).
func leaseHolder(checkName string) string {
	return leases.QualifiedHolderIdentity(holderKind, v1alpha1.GroupVersion.Group, checkName)
}

// defaultSelector is the API's default: the worker Nodes.
var defaultSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
	{Key: "node-role.kubernetes.io/worker", Operator: metav1.LabelSelectorOpExists},
}}

// observe reads what decide needs, all from the informer cache (and the RESTMapper): the selected Nodes,
// the templates, the remediation requests of the templates' kinds, the node leases and the other checks.
// retry is non-zero when a template kind is not installed, which no watch reports, or cannot be watched
// (then it is when the kind is tried again). A kind whose watch has not synced yet is never read: the
// error is then an *engine.WatchPendingError.
func (r *Reconciler) observe(ctx context.Context, check *v1alpha1.NodeHealthCheck) (observed, time.Duration, error) {
	in := observed{
		Check:         check,
		Holder:        leaseHolder(check.Name),
		LeaseDuration: r.opts.LeaseDuration,
	}
	var badSelector *cause
	if sel, err := selectorOf(check); err != nil {
		// The API server validates selectors; this guards the rest. Nothing is selected.
		badSelector = &cause{Reason: ReasonInvalidSelector, Message: fmt.Sprintf("Invalid selector: %v", err)}
	} else {
		var err error
		if in.Nodes, err = r.selectNodes(ctx, sel); err != nil {
			return in, 0, err
		}
	}

	kinds, err := r.watchKinds(ctx, check)
	if err != nil {
		return in, 0, err
	}
	var retry time.Duration
	in.Steps, in.Disabled, retry, err = r.resolveSteps(ctx, check, kinds)
	if err != nil {
		return in, 0, err
	}
	if badSelector != nil {
		in.Disabled = badSelector
	}
	if in.Ours, in.Foreign, in.Unread, err = r.listRemediations(ctx, check, in.Steps, kinds); err != nil {
		return in, 0, err
	}
	if in.Tracked, err = r.trackedNodes(ctx, check, in.Nodes, in.Ours); err != nil {
		return in, 0, err
	}
	if in.Leases, err = r.listLeases(ctx); err != nil {
		return in, 0, err
	}
	if in.Peers, in.BusyControlPlane, err = r.peers(ctx, check); err != nil {
		return in, 0, err
	}
	// The control-plane Nodes whose lease someone else holds are busy too. What the cache does not show
	// yet (another check's start a moment ago) the control-plane claim's live read catches when the lease
	// is taken (execute).
	leased, err := engine.LeasedControlPlane(ctx, in.Leases, in.Holder, r.clock.Now(), r.nodeCluster().IsControlPlane)
	in.BusyControlPlane = slices.Compact(slices.Sorted(slices.Values(append(in.BusyControlPlane, leased...))))
	return in, retry, err
}

// selectNodes returns the Nodes sel matches, from the cache; they must not be modified. With a manager it
// reads the node informer's store: the cached Nodes themselves. A cached List would copy every Node into a
// new slice first, megabytes per reconcile at 5,000 Nodes (and as much garbage to collect).
func (r *Reconciler) selectNodes(ctx context.Context, sel labels.Selector) ([]*corev1.Node, error) {
	if r.nodeStore != nil {
		objs := r.nodeStore.List()
		nodes := make([]*corev1.Node, 0, len(objs))
		for _, o := range objs {
			if n, ok := o.(*corev1.Node); ok && sel.Matches(labels.Set(n.Labels)) {
				nodes = append(nodes, n)
			}
		}
		return nodes, nil
	}
	var list corev1.NodeList
	if err := r.client.List(ctx, &list, client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make([]*corev1.Node, len(list.Items))
	for i := range list.Items {
		nodes[i] = &list.Items[i]
	}
	return nodes, nil
}

// selectorOf returns the check's node selector (the worker Nodes when unset).
func selectorOf(check *v1alpha1.NodeHealthCheck) (labels.Selector, error) {
	ls := check.Spec.Selector
	if ls == nil {
		ls = &defaultSelector
	}
	return metav1.LabelSelectorAsSelector(ls)
}

// stepRefs lists the check's remediation steps in order, unresolved.
func stepRefs(spec v1alpha1.NodeHealthCheckSpec) []engine.StepRef {
	return engine.StepRefs(spec.RemediationTemplate, spec.EscalatingRemediations)
}

// resolveSteps reads every step's template (engine.Templates). The first problem found disables the
// check; retry is set when a kind is not installed or cannot be watched.
func (r *Reconciler) resolveSteps(ctx context.Context, check *v1alpha1.NodeHealthCheck, kinds kindStates) ([]engine.Step, *cause, time.Duration, error) {
	refs := stepRefs(check.Spec)
	if len(refs) == 0 {
		return nil, &cause{Reason: v1alpha1.ReasonTemplateInvalid, Message: "Neither remediationTemplate nor escalatingRemediations is set"}, 0, nil
	}
	if c := refusedKinds(refs); c != nil {
		// Nothing of the steps is resolved, read or watched.
		steps := make([]engine.Step, 0, len(refs))
		for _, ref := range refs {
			steps = append(steps, engine.Step{Namespace: ref.Ref.Namespace, Template: ref.Ref.Name, Timeout: ref.Timeout})
		}
		return steps, c, 0, nil
	}
	return engine.Templates{Mapper: r.client.RESTMapper(), Reader: r.reader(), KindRetry: r.opts.KindRetryPeriod}.
		Steps(ctx, refs, kinds, r.clock.Now())
}

// refusedKinds is the cause that disables a check naming a kind that is not a remediation kind, or too
// many distinct ones (template.CheckRemediationKinds); nil when its kinds may be watched.
func refusedKinds(steps []engine.StepRef) *cause {
	var kinds []schema.GroupVersionKind
	for _, s := range steps {
		gv, err := schema.ParseGroupVersion(s.Ref.APIVersion)
		if err != nil {
			continue // resolveSteps says so
		}
		if emr, err := template.RemediationGVK(gv.WithKind(s.Ref.Kind)); err == nil {
			kinds = append(kinds, emr)
		}
	}
	if err := template.CheckRemediationKinds(kinds); err != nil {
		return &cause{Reason: v1alpha1.ReasonRemediationKindRefused, Message: err.Error()}
	}
	return nil
}

// listRemediations lists the remediation requests of every kind and namespace the steps (and the status
// history) use, from the cache, and sorts them into ours (by Node) and foreign. A kind that cannot be
// watched is not read (its check is disabled): the Nodes whose status records requests of it are unread.
// The requests the check created a moment ago that the cache does not show yet are added
// (engine.RecentWrites).
func (r *Reconciler) listRemediations(ctx context.Context, check *v1alpha1.NodeHealthCheck, steps []engine.Step, kinds kindStates) (map[string][]remediationObject, map[emrRef]string, map[string]bool, error) {
	type listKey struct {
		gvk schema.GroupVersionKind
		ns  string
	}
	var keys []listKey
	add := func(gvk schema.GroupVersionKind, ns string) {
		if gvk.Kind != "" && ns != "" && !slices.Contains(keys, listKey{gvk, ns}) {
			keys = append(keys, listKey{gvk, ns})
		}
	}
	for _, s := range steps {
		add(s.GVK, s.Namespace)
	}
	for _, u := range check.Status.UnhealthyNodes {
		for _, rem := range u.Remediations {
			if gv, err := schema.ParseGroupVersion(rem.APIVersion); err == nil && rem.APIVersion != "" {
				add(gv.WithKind(rem.Kind), rem.Namespace)
			}
		}
	}

	now := r.clock.Now()
	ours := map[string][]remediationObject{}
	foreign := map[emrRef]string{}
	var unreadable []schema.GroupVersionKind
	for _, k := range keys {
		if _, err := r.client.RESTMapper().RESTMapping(k.gvk.GroupKind(), k.gvk.Version); err != nil {
			if meta.IsNoMatchError(err) {
				continue // the kind is not installed: there is nothing to list
			}
			return nil, nil, nil, fmt.Errorf("mapping %s: %w", k.gvk, err)
		}
		if !kinds.Readable(k.gvk) {
			unreadable = append(unreadable, k.gvk)
			continue
		}
		items, err := engine.ListRequests(ctx, r.reader(), r.client.Scheme(), k.gvk, k.ns)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, item := range items {
			ref := engine.RefIn(k.gvk, item)
			if !ownedBy(item, check.UID) {
				foreign[ref] = engine.OwnerDescription(item)
				continue
			}
			node := item.GetAnnotations()[template.AnnotationNodeName]
			if node == "" {
				node = item.GetName()
			}
			o := engine.RequestOf(ref, item)
			if r.recent.Seen(ref, now) {
				o.Deleting = true // we deleted it a moment ago; the cache does not show it yet
			}
			ours[node] = append(ours[node], o)
		}
	}
	r.recent.AddCreated(check.UID, ours, now)
	return ours, foreign, unreadNodes(check, unreadable), nil
}

// unreadNodes are the Nodes whose status entry records a request of one of the kinds (those that cannot
// be read now).
func unreadNodes(check *v1alpha1.NodeHealthCheck, kinds []schema.GroupVersionKind) map[string]bool {
	if len(kinds) == 0 {
		return nil
	}
	out := map[string]bool{}
	for _, u := range check.Status.UnhealthyNodes {
		for _, rem := range u.Remediations {
			if gv, err := schema.ParseGroupVersion(rem.APIVersion); err == nil && slices.Contains(kinds, gv.WithKind(rem.Kind)) {
				out[u.Name] = true
			}
		}
	}
	return out
}

// ownedBy reports whether obj has an owner reference to the object with uid.
var ownedBy = engine.OwnedBy

// trackedNodes finds the Nodes the check still remediates that its selector no longer matches (nil when
// gone), from the cache.
func (r *Reconciler) trackedNodes(ctx context.Context, check *v1alpha1.NodeHealthCheck, selected []*corev1.Node, ours map[string][]remediationObject) (map[string]*corev1.Node, error) {
	wanted := map[string]bool{}
	for _, u := range check.Status.UnhealthyNodes {
		wanted[u.Name] = true
	}
	for name := range ours {
		wanted[name] = true
	}
	if len(wanted) == 0 {
		return nil, nil
	}
	for _, n := range selected {
		delete(wanted, n.Name)
	}
	tracked := make(map[string]*corev1.Node, len(wanted))
	for name := range wanted {
		node, err := r.nodeNamed(ctx, name)
		if err != nil {
			return nil, err
		}
		tracked[name] = node
	}
	return tracked, nil
}

// listLeases reads the node leases in the lease namespace from the cache.
func (r *Reconciler) listLeases(ctx context.Context) (map[string]leaseInfo, error) {
	return gates.ListLeases(ctx, r.client, r.opts.LeaseNamespace)
}

// peers lists the other checks for the overlapping rule (disabled ones own nothing) and the control-plane
// Nodes any of them is remediating. Of their status it reads only peerStatus: a change of that, as of their
// spec, brings this check back at once (engine.WatchChecks).
func (r *Reconciler) peers(ctx context.Context, check *v1alpha1.NodeHealthCheck) ([]peer, []string, error) {
	var list v1alpha1.NodeHealthCheckList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing NodeHealthChecks: %w", err)
	}
	var out []peer
	var busy []string
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == check.UID {
			continue
		}
		st := peerStatus(other)
		for name := range st.Remediating {
			node, err := r.nodeNamed(ctx, name)
			if err != nil {
				return nil, nil, err
			}
			if node != nil && isControlPlane(node) && !slices.Contains(busy, name) {
				busy = append(busy, name)
			}
		}
		if !other.DeletionTimestamp.IsZero() || st.Disabled {
			continue
		}
		sel, err := selectorOf(other)
		if err != nil {
			continue // it cannot select anything either
		}
		out = append(out, peer{Name: other.Name, Created: other.CreationTimestamp.Time, Selector: sel,
			Criteria: criteriaOf(other.Spec.UnhealthyConditions), InFlight: st.Remediating})
	}
	slices.Sort(busy)
	return out, busy, nil
}

// nodeNamed returns a Node by name, nil when it does not exist; it must not be modified. With a manager it
// reads the node informer's store, uncopied, as selectNodes does: a reconcile looks up the Node of every
// lease someone else holds, hundreds in a wave of power cycles, and a cached Get copies each one.
func (r *Reconciler) nodeNamed(ctx context.Context, name string) (*corev1.Node, error) {
	if r.nodeStore != nil {
		obj, ok, err := r.nodeStore.GetByKey(name)
		if err != nil {
			return nil, fmt.Errorf("getting node %s: %w", name, err)
		}
		node, isNode := obj.(*corev1.Node)
		if !ok || !isNode {
			return nil, nil
		}
		return node, nil
	}
	node := &corev1.Node{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting node %s: %w", name, err)
	}
	return node, nil
}

// reader reads unstructured objects: the cache when there is one. Only kinds whose watch has synced are
// read (see watchKinds), so no read waits for an informer; each read is still bounded (engine.Guarded),
// as a cache read of a kind without a synced informer would wait for one for ever.
func (r *Reconciler) reader() client.Reader {
	if r.cache != nil {
		return engine.Guarded{Reader: r.cache}
	}
	return r.client
}
