package mhc

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/internal/workload"
	"github.com/metalheal/metalheal/pkg/leases"
)

// indexMachineByNodeName indexes Machines by status.nodeRef.name, to map a Node event to its Machine.
const indexMachineByNodeName = "metalheal.mhc.status.nodeRef.name"

func machineNodeName(o client.Object) []string {
	if _, node, ok := machineFields(o); ok && node != "" {
		return []string{node}
	}
	return nil
}

// machineFields reads the fields the watches map by from a Machine of either served version.
func machineFields(o client.Object) (clusterName, nodeName string, ok bool) {
	switch m := o.(type) {
	case *clusterv1.Machine:
		return m.Spec.ClusterName, m.Status.NodeRef.Name, true
	case *clusterv1beta1.Machine:
		if m.Status.NodeRef != nil {
			nodeName = m.Status.NodeRef.Name
		}
		return m.Spec.ClusterName, nodeName, true
	}
	return "", "", false
}

// selects reports whether the check selects a Machine of the cluster and labels (its selector and
// clusterName).
func selects(mhc *v1alpha1.MachineHealthCheck, clusterName string, machineLabels map[string]string) bool {
	if mhc.Spec.ClusterName != "" && clusterName != mhc.Spec.ClusterName {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(&mhc.Spec.Selector)
	if err != nil || sel.Empty() {
		return false
	}
	return sel.Matches(labels.Set(machineLabels))
}

// machineToChecks maps a Machine (of either served version) to the checks in its namespace that select it.
func (r *Reconciler) machineToChecks(ctx context.Context, m client.Object) []reconcile.Request {
	clusterName, _, ok := machineFields(m)
	if !ok {
		return nil
	}
	var checks v1alpha1.MachineHealthCheckList
	if err := r.reader.List(ctx, &checks, client.InNamespace(m.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing MachineHealthChecks for a Machine event", "machine", client.ObjectKeyFromObject(m))
		return nil
	}
	var out []reconcile.Request
	for i := range checks.Items {
		if selects(&checks.Items[i], clusterName, m.GetLabels()) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&checks.Items[i])})
		}
	}
	return out
}

// machineUpdates passes the Machine updates that change what a check reads: anything but a check's own
// HealthCheckSucceeded condition, the resourceVersion and the managed fields. A check writes that
// condition whenever one of its Machines' health changes (and Cluster API's MachineHealthCheck does too);
// without the filter each write would cost the check one more reconcile over all its Machines, for
// nothing it reads. OwnerRemediated, which the check sets and the Machine's owner acts on, still passes.
func machineUpdates() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, okO := machineView(e.ObjectOld)
		n, okN := machineView(e.ObjectNew)
		return !okO || !okN || !reflect.DeepEqual(o, n)
	}}
}

// machineView is a Machine of either served version as the Machine watch compares it (machineUpdates).
func machineView(m client.Object) (map[string]any, bool) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		return nil, false
	}
	unstructured.RemoveNestedField(u, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(u, "metadata", "managedFields")
	withoutHealthCheckSucceeded(u["status"])
	return u, true
}

// withoutHealthCheckSucceeded removes HealthCheckSucceeded from every conditions list under v: v1beta2's
// status.conditions and status.deprecated.v1beta1.conditions, v1beta1's status.conditions and
// status.v1beta2.conditions.
func withoutHealthCheckSucceeded(v any) {
	fields, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k, f := range fields {
		if list, ok := f.([]any); ok && k == "conditions" {
			fields[k] = slices.DeleteFunc(list, func(c any) bool {
				cond, _ := c.(map[string]any)
				return cond["type"] == clusterv1.MachineHealthCheckSucceededCondition
			})
			continue
		}
		withoutHealthCheckSucceeded(f)
	}
}

// clusterToChecks maps a Cluster to the checks naming it.
func (r *Reconciler) clusterToChecks(ctx context.Context, o client.Object) []reconcile.Request {
	var checks v1alpha1.MachineHealthCheckList
	if err := r.reader.List(ctx, &checks, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing MachineHealthChecks for a Cluster event", "cluster", client.ObjectKeyFromObject(o))
		return nil
	}
	var out []reconcile.Request
	for i := range checks.Items {
		if checks.Items[i].Spec.ClusterName == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&checks.Items[i])})
		}
	}
	return out
}

// nodeToChecks maps a Node to the checks selecting its Machine. cluster is the workload cluster the
// Node is in, nil for the management cluster's own Nodes.
func (r *Reconciler) nodeToChecks(ctx context.Context, node client.Object, cluster *types.NamespacedName) []reconcile.Request {
	version := r.indexedVersion()
	if version == "" {
		return nil // no Machines watched yet: the checks read everything when they first see them
	}
	// Bounded all the same: were the indexed informer stopped meanwhile, a cache read would start another
	// and wait for it.
	machines, err := listMachinesByNode(ctx, engine.Guarded{Reader: r.reader}, version, node.GetName())
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Machines for a Node event", "node", node.GetName())
		return nil
	}
	var out []reconcile.Request
	for _, m := range machines {
		clusterName, _, _ := machineFields(m)
		if cluster != nil && (m.GetNamespace() != cluster.Namespace || clusterName != cluster.Name) {
			continue
		}
		for _, req := range r.machineToChecks(ctx, m) {
			if !slices.Contains(out, req) {
				out = append(out, req)
			}
		}
	}
	return out
}

// leaseToChecks enqueues the checks a node lease of the management cluster changing hands can matter to:
// those with a Machine on its Node (skipped while someone else held it, or remediating it) and, for a
// control-plane Node, every check (one control-plane Node acted on at a time, whoever acts on it), as a
// NodeHealthCheck does.
func (r *Reconciler) leaseToChecks(ctx context.Context, lease client.Object) []reconcile.Request {
	return r.nodeLeaseToChecks(ctx, lease, r.reader, nil)
}

// nodeLeaseToChecks is leaseToChecks for the cluster whose Nodes nodes reads: the management cluster
// (cluster nil), or the workload cluster named by cluster, whose control-plane Nodes concern the checks of
// that cluster only.
func (r *Reconciler) nodeLeaseToChecks(ctx context.Context, lease client.Object, nodes client.Reader, cluster *types.NamespacedName) []reconcile.Request {
	name, ok := strings.CutPrefix(lease.GetName(), leases.LeaseName(""))
	if !ok || name == "" {
		return nil
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := nodes.Get(ctx, client.ObjectKeyFromObject(node), node); err == nil && gates.IsControlPlane(node.Labels) {
		if cluster != nil {
			return r.clusterToChecks(ctx, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: cluster.Name}})
		}
		var list v1alpha1.MachineHealthCheckList
		if err := r.reader.List(ctx, &list); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing MachineHealthChecks for a lease event", "lease", lease.GetName())
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return out
	}
	return r.nodeToChecks(ctx, node, cluster)
}

// clusterEvents enqueues the checks of a Cluster and drops the Cluster's workload cache when it goes.
type clusterEvents struct {
	handler.EventHandler
	forget func(types.NamespacedName)
}

func (h clusterEvents) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if !e.ObjectNew.GetDeletionTimestamp().IsZero() {
		h.forget(client.ObjectKeyFromObject(e.ObjectNew))
	}
	h.EventHandler.Update(ctx, e, q)
}

func (h clusterEvents) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.forget(client.ObjectKeyFromObject(e.Object))
	h.EventHandler.Delete(ctx, e, q)
}

// watchRemoteNodes starts watching a workload cluster's Nodes, its node leases and the connection itself
// (called once per new connection): a lease changing hands there brings the checks of that cluster, as the
// management cluster's lease watch does for its own Nodes, and so does the connection breaking.
func (r *Reconciler) watchRemoteNodes(cluster types.NamespacedName, c *workload.Cluster) error {
	if r.controller == nil {
		return nil
	}
	if err := r.controller.Watch(source.Kind(c.Cache(), client.Object(&corev1.Node{}),
		handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.nodeToChecks(ctx, o, &cluster)
		}), engine.NodeUpdates())); err != nil {
		return err
	}
	if err := r.controller.Watch(source.Kind(c.Cache(), client.Object(&coordinationv1.Lease{}),
		handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.nodeLeaseToChecks(ctx, o, c.Nodes(), &cluster)
		}), engine.LeaseChanged(c.LeaseNamespace()))); err != nil {
		return err
	}
	// A connection found broken brings the cluster's checks at once: they say so (WorkloadClusterUnreachable)
	// and connect again, rather than at their next event or resync.
	return r.controller.Watch(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			select {
			case <-c.Broken():
				for _, req := range r.clusterToChecks(ctx, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
					Namespace: cluster.Namespace, Name: cluster.Name}}) {
					q.Add(req)
				}
			case <-c.Done():
			case <-ctx.Done():
			}
		}()
		return nil
	}))
}

// watchKinds tells the kind watcher which kinds the check reads: Machines and Clusters in the served
// version, and the remediation kinds its steps make; it returns whether each can be read. It never waits
// for a watch: a kind not synced yet makes an *engine.WatchPendingError, one that cannot be watched a
// *kindNotWatchableError (the check is disabled; the others go on). Without a manager (tests that call
// Reconcile directly) every kind is read through the reader.
func (r *Reconciler) watchKinds(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, version string, gvks, templates []schema.GroupVersionKind) error {
	if r.kinds == nil {
		return nil
	}
	r.dropIndexUnless(version)
	gv := clusterv1.GroupVersion.Group + "/" + version
	machine, cluster := emptyMachine(version), emptyCluster(version)
	kinds := make([]kindwatch.Kind, 0, len(gvks)+2)
	kinds = append(kinds,
		kindwatch.Kind{GVK: schema.FromAPIVersionAndKind(gv, "Machine"), Object: machine,
			Handler: handler.EnqueueRequestsFromMapFunc(r.machineToChecks), Predicates: []predicate.Predicate{machineUpdates()},
			Verbs: []string{"get", "list", "watch", "patch"}},
		kindwatch.Kind{GVK: schema.FromAPIVersionAndKind(gv, "Cluster"), Object: cluster,
			Handler: clusterEvents{EventHandler: handler.EnqueueRequestsFromMapFunc(r.clusterToChecks), forget: r.remotes.Forget}})
	for _, gvk := range gvks {
		kinds = append(kinds, engine.RequestKind(r.client.Scheme(), gvk, "MachineHealthCheck", true, &r.recent))
	}
	for _, gvk := range templates {
		kinds = append(kinds, kindwatch.Kind{GVK: gvk, Handler: handler.EnqueueRequestsFromMapFunc(r.checksUsingTemplate)})
	}
	states := r.kinds.Want(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(mhc)}, kinds)
	for _, k := range kinds { // in order: a failing request kind is named before its template kind
		gvk, st := k.GVK, states[k.GVK]
		if gvk.Kind == "Machine" && gvk.Group == clusterv1.GroupVersion.Group {
			switch st.State {
			case kindwatch.Synced:
				r.indexMachines(ctx, version, machine)
			case kindwatch.Failed:
				r.served.forget() // Cluster API may have been upgraded past this version, or removed
			}
		}
		if st.State == kindwatch.Failed {
			return &kindNotWatchableError{gvk: gvk, err: st.Err, retry: st.Until}
		}
	}
	return engine.Pending(states)
}

// checksUsingTemplate enqueues the checks of a template's namespace that name it.
func (r *Reconciler) checksUsingTemplate(ctx context.Context, obj client.Object) []reconcile.Request {
	var checks v1alpha1.MachineHealthCheckList
	if err := r.reader.List(ctx, &checks, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing MachineHealthChecks")
		return nil
	}
	var out []reconcile.Request
	for i := range checks.Items {
		steps, _ := stepsFor(&checks.Items[i])
		if slices.ContainsFunc(steps, func(s engine.Step) bool { return engine.Names(s.Ref(), obj) }) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&checks.Items[i])})
		}
	}
	return out
}

// forgetKinds tells the kind watcher that a check is gone: the kinds no other check names stop being
// watched, so nothing of them lingers (an unwatchable kind would otherwise keep failing in the log).
func (r *Reconciler) forgetKinds(ctx context.Context, key types.NamespacedName) {
	if r.kinds != nil {
		r.kinds.Forget(ctx, reconcile.Request{NamespacedName: key})
	}
}

// kindNotWatchableError says that a remediation kind the check names cannot be watched: the check is
// disabled until the kind watcher's next attempt (retry) succeeds.
type kindNotWatchableError struct {
	gvk   schema.GroupVersionKind
	err   error
	retry time.Time
}

func (e *kindNotWatchableError) Error() string { return e.err.Error() }

func (e *kindNotWatchableError) Unwrap() error { return e.err }

// machineIndexer is what the controller needs of the manager's cache to index Machines by Node.
type machineIndexer interface {
	IndexField(ctx context.Context, obj client.Object, field string, extractValue client.IndexerFunc) error
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// indexMachines indexes the synced Machine informer of the version by Node name, once per informer (the
// kind watcher starts a new one after a failure or a version change), so that a Node event finds its
// Machines without a scan.
func (r *Reconciler) indexMachines(ctx context.Context, version string, machine client.Object) {
	if r.indexer == nil {
		return
	}
	inf, err := r.indexer.GetInformer(ctx, machine, cache.BlockUntilSynced(false))
	if err != nil {
		return
	}
	r.indexMu.Lock()
	defer r.indexMu.Unlock()
	if r.indexed == inf && r.indexedVer == version {
		return
	}
	// A conflict means this informer has the index already (a namespaced cache hands out a new wrapper of
	// the same informers on every call).
	if err := r.indexer.IndexField(ctx, machine, indexMachineByNodeName, machineNodeName); err != nil && !strings.Contains(err.Error(), "indexer conflict") {
		ctrl.LoggerFrom(ctx).Error(err, "Indexing Machines by Node", "version", version)
		return
	}
	r.indexed, r.indexedVer = inf, version
}

// dropIndexUnless forgets the indexed informer unless it is of version: the served version changed (or
// Cluster API went away, version ""), and the kind watcher stops the old informer once no check reads it.
// Node events are not mapped until the new version's informer is indexed; the checks read everything
// when they first see it anyway.
func (r *Reconciler) dropIndexUnless(version string) {
	r.indexMu.Lock()
	defer r.indexMu.Unlock()
	if r.indexedVer != version {
		r.indexed, r.indexedVer = nil, ""
	}
}

// indexedVersion is the version whose Machines are indexed by Node ("" before any is): Node events are
// mapped through it.
func (r *Reconciler) indexedVersion() string {
	if r.indexer == nil {
		v, _ := r.served.get()
		return v
	}
	r.indexMu.Lock()
	defer r.indexMu.Unlock()
	return r.indexedVer
}

// listMachinesByNode lists the Machines of the version whose nodeRef names the Node.
func listMachinesByNode(ctx context.Context, reader client.Reader, version, node string) ([]client.Object, error) {
	var out []client.Object
	if version == clusterv1beta1.GroupVersion.Version {
		var list clusterv1beta1.MachineList
		if err := reader.List(ctx, &list, client.MatchingFields{indexMachineByNodeName: node}); err != nil {
			return nil, err
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		return out, nil
	}
	var list clusterv1.MachineList
	if err := reader.List(ctx, &list, client.MatchingFields{indexMachineByNodeName: node}); err != nil {
		return nil, err
	}
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}
