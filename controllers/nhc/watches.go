package nhc

import (
	"context"
	"fmt"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// SetupWithManager registers the controller. It watches NodeHealthChecks (a check's own spec, and what the
// overlapping rule reads of the others: engine.WatchChecks), Nodes (only label and condition changes, not
// heartbeats) and the node leases; the template and remediation kinds are watched from the
// first reconcile that names them, through the manager's cache, which then also serves their reads (see
// watchKinds).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.cache == nil {
		r.cache = mgr.GetCache()
	}
	if r.apiReader == nil {
		r.apiReader = mgr.GetAPIReader()
	}
	kinds, err := kindwatch.New(kindwatch.Options{Name: ControllerName, Cache: mgr.GetCache(), Probe: r.apiReader,
		Mapper: mgr.GetRESTMapper(), Clock: r.clock, SyncTimeout: r.opts.KindSyncTimeout})
	if err != nil {
		return err
	}
	opts := controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}
	if r.skipNameValidation {
		opts.SkipNameValidation = ptr.To(true)
	}
	_, err = engine.WatchChecks(ctrl.NewControllerManagedBy(mgr).Named(ControllerName), r.client, checkKind).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.checksForNode), builder.WithPredicates(engine.NodeUpdates())).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.checksForLease), builder.WithPredicates(engine.LeaseChanged(r.opts.LeaseNamespace))).
		WatchesRawSource(kinds.Source()).
		WithOptions(opts).
		Build(r)
	if err != nil {
		return fmt.Errorf("building the %s controller: %w", ControllerName, err)
	}
	r.watches = kinds
	// After a start, no control-plane remediation before every check has looked once (gates.ControlPlaneClaim).
	r.cpClaim.Expect(engine.ClaimChecks(r.client, holderKind, func() client.ObjectList { return &v1alpha1.NodeHealthCheckList{} }))
	// The Nodes are read from the node informer's store, uncopied. Its informer is the one the Node watch
	// above uses; a cache that cannot hand it out is read through the client.
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return fmt.Errorf("getting the node informer: %w", err)
	}
	if si, ok := inf.(toolscache.SharedIndexInformer); ok {
		r.nodeStore = si.GetStore()
	}
	ctrl.LoggerFrom(ctx).V(4).Info("Controller registered", "controller", ControllerName)
	return nil
}

// watchRole says how events of a dynamically watched kind map to checks.
type watchRole int

const (
	roleTemplate    watchRole = iota // a template: the checks that name it
	roleRemediation                  // a remediation request: the check that owns it
)

// kindStates are the states of the template and remediation kinds a check names (engine.KindStates).
type kindStates = engine.KindStates

// watchKinds tells the kind watcher which template and remediation kinds the check names (those
// installed: the steps' and the ones its status remembers requests of) and returns their states. It never
// waits for a watch: a kind not synced yet makes an *engine.WatchPendingError, and one that cannot be watched
// disables the check (see resolveStep) while the others go on.
func (r *Reconciler) watchKinds(ctx context.Context, check *v1alpha1.NodeHealthCheck) (kindStates, error) {
	if r.watches == nil {
		return nil, nil
	}
	var kinds []kindwatch.Kind
	add := func(gvk schema.GroupVersionKind, role watchRole) error {
		if slices.ContainsFunc(kinds, func(k kindwatch.Kind) bool { return k.GVK == gvk }) {
			return nil
		}
		if template.CheckRemediationKind(gvk) != nil {
			return nil // never watched (resolveSteps says why)
		}
		if _, err := r.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			if meta.IsNoMatchError(err) {
				return nil // not installed: nothing to watch (resolveStep says so)
			}
			return fmt.Errorf("mapping %s: %w", gvk, err)
		}
		kinds = append(kinds, r.kindFor(gvk, role))
		return nil
	}
	steps := stepRefs(check.Spec)
	if refusedKinds(steps) != nil {
		steps = nil // none of the steps' kinds is watched (resolveSteps says why)
	}
	for _, s := range steps {
		gv, err := schema.ParseGroupVersion(s.Ref.APIVersion)
		if err != nil {
			continue // resolveStep says so
		}
		emr, err := template.RemediationGVK(gv.WithKind(s.Ref.Kind))
		if err != nil {
			continue
		}
		if err := add(gv.WithKind(s.Ref.Kind), roleTemplate); err != nil {
			return nil, err
		}
		if err := add(emr, roleRemediation); err != nil {
			return nil, err
		}
	}
	for _, u := range check.Status.UnhealthyNodes {
		for _, rem := range u.Remediations {
			if gv, err := schema.ParseGroupVersion(rem.APIVersion); err == nil && rem.APIVersion != "" {
				if err := add(gv.WithKind(rem.Kind), roleRemediation); err != nil {
					return nil, err
				}
			}
		}
	}
	states := kindStates(r.watches.Want(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: check.Name}}, kinds))
	return states, engine.Pending(states)
}

// forgetKinds tells the kind watcher that a check is gone: the kinds no other check names stop being
// watched, so nothing of them lingers (an unwatchable kind would otherwise keep failing in the log).
func (r *Reconciler) forgetKinds(ctx context.Context, name string) {
	if r.watches != nil {
		r.watches.Forget(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
}

// kindFor says how a kind's events map to checks: a template's to the checks naming it, a remediation
// request's to the check owning it (engine.RequestKind).
func (r *Reconciler) kindFor(gvk schema.GroupVersionKind, role watchRole) kindwatch.Kind {
	if role == roleTemplate {
		return kindwatch.Kind{GVK: gvk, Handler: handler.EnqueueRequestsFromMapFunc(r.checksUsingTemplate)}
	}
	return engine.RequestKind(r.client.Scheme(), gvk, holderKind, false, &r.recent)
}

// checkKind is how the controller watches its own NodeHealthChecks: every other check looks again at a
// check's change that the overlapping rule reads (engine.WatchChecks).
var checkKind = engine.CheckKind{Object: &v1alpha1.NodeHealthCheck{},
	NewList: func() client.ObjectList { return &v1alpha1.NodeHealthCheckList{} }, Peer: peerStatus}

// peerStatus is what the other NodeHealthChecks read of a check's status (engine.PeerStatus): its Disabled
// condition and its inFlightRemediations.
func peerStatus(obj client.Object) engine.PeerStatus {
	check, ok := obj.(*v1alpha1.NodeHealthCheck)
	if !ok {
		return engine.PeerStatus{}
	}
	st := engine.PeerStatus{Disabled: meta.IsStatusConditionTrue(check.Status.Conditions, v1alpha1.ConditionDisabled),
		Remediating: make(map[string]bool, len(check.Status.InFlightRemediations))}
	for node := range check.Status.InFlightRemediations {
		st.Remediating[node] = true
	}
	return st
}

// allChecks enqueues every check: a control-plane Node's lease matters to each (checksForLease).
func (r *Reconciler) allChecks(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.NodeHealthCheckList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing NodeHealthChecks")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
	}
	return out
}

// checksForNode enqueues the checks whose selector matches the Node, and those remediating it.
func (r *Reconciler) checksForNode(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.checksFor(ctx, obj.GetName(), labels.Set(obj.GetLabels()), true)
}

// checksFor enqueues the checks that select a Node with these labels (when known) or remember it.
func (r *Reconciler) checksFor(ctx context.Context, name string, set labels.Set, known bool) []reconcile.Request {
	var list v1alpha1.NodeHealthCheckList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing NodeHealthChecks")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		check := &list.Items[i]
		sel, err := selectorOf(check)
		if (known && err == nil && sel.Matches(set)) || remembers(check, name) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: check.Name}})
		}
	}
	return out
}

func remembers(check *v1alpha1.NodeHealthCheck, node string) bool {
	if _, ok := check.Status.InFlightRemediations[node]; ok {
		return true
	}
	return findEntry(check.Status.UnhealthyNodes, node) != nil
}

// checksForLease enqueues the checks a lease changing hands can matter to: those that remember its Node
// (skipped while someone else held it, or being remediated), those that select it while it is not Ready
// (their status may not show the skip yet), and, for a control-plane Node, every check (one
// control-plane Node down at a time, whoever took it down). The lease of a Ready Node that no check
// remembers costs no reconcile: node maintenance, or a remediator working for someone else, takes
// hundreds of them at a time, and each reconcile looks at every Node. A check that finds the Node
// unhealthy later reads its lease then.
func (r *Reconciler) checksForLease(ctx context.Context, obj client.Object) []reconcile.Request {
	name, ok := strings.CutPrefix(obj.GetName(), leases.LeaseName(""))
	if !ok || name == "" {
		return nil
	}
	node, err := r.nodeNamed(ctx, name)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Getting the node of a lease", "lease", obj.GetName())
		return nil
	}
	switch {
	case node != nil && isControlPlane(node):
		return r.allChecks(ctx, obj)
	case node != nil && !ready(node):
		return r.checksFor(ctx, name, labels.Set(node.Labels), true)
	default:
		return r.checksFor(ctx, name, nil, false)
	}
}

// ready reports whether the Node's Ready condition is True.
func ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checksUsingTemplate enqueues the checks that name a template.
func (r *Reconciler) checksUsingTemplate(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.NodeHealthCheckList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing NodeHealthChecks")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		for _, s := range stepRefs(list.Items[i].Spec) {
			if engine.Names(s.Ref, obj) {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
				break
			}
		}
	}
	return out
}
