package engine

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/internal/template"
)

// NodeUpdates passes the Node events that can change a check's decision (NodeChanged): heartbeats are
// dropped.
func NodeUpdates() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*corev1.Node)
			n, okN := e.ObjectNew.(*corev1.Node)
			return !okO || !okN || NodeChanged(o, n)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// RequestKind is how a check of kind owner (NodeHealthCheck, MachineHealthCheck; namespaced or not) watches
// the remediation requests of kind gvk: each event goes to the check that owns the request (ChecksOwning),
// unless RequestChanged drops it, and a deletion first ends what recent remembers of the request
// (ForgetDeleted); a kind this manager serves itself is watched through the typed informer its remediator
// keeps already (TypedRequest), any other as unstructured objects. scheme is the manager's.
func RequestKind(scheme *runtime.Scheme, gvk schema.GroupVersionKind, owner string, namespaced bool, recent *RecentWrites) kindwatch.Kind {
	return kindwatch.Kind{GVK: gvk, Object: TypedRequest(scheme, gvk),
		Handler:    ForgetDeleted(handler.EnqueueRequestsFromMapFunc(ChecksOwning(owner, namespaced)), recent, gvk),
		Predicates: []predicate.Predicate{RequestChanged()},
		Verbs:      []string{"get", "list", "watch", "create", "update", "patch", "delete"}}
}

// RequestChanged passes the remediation request events a check acts on: creation, deletion, and changes
// of what a check reads of a request (RequestOf: annotations, owner references, the deletion timestamp,
// the status of the Succeeded and Processing conditions; Processing=False hands the host over to the next
// escalation step). The remediator's other progress reports are dropped: a power cycle writes a dozen of
// them, and each would cost a reconcile of the check over all its targets.
func RequestChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return true
			}
			return !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
				!equality.Semantic.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
				conditionStatus(o, template.ConditionSucceeded) != conditionStatus(n, template.ConditionSucceeded) ||
				conditionStatus(o, template.ConditionProcessing) != conditionStatus(n, template.ConditionProcessing)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// conditionStatus is the status of a request's condition, "" when it has none or it cannot be read.
func conditionStatus(obj client.Object, condType string) metav1.ConditionStatus {
	c, err := Condition(obj, condType)
	if err != nil || c == nil {
		return ""
	}
	return c.Status
}

// TypedRequest returns a new typed object of a remediation kind scheme knows (metalheal's own
// PowerCycleRemediation), nil for any other kind. Such requests are watched and read through the typed
// informer the remediator keeps already, not a second, unstructured one: each of their watch events would
// be decoded twice, and in a wave of power cycles each request held twice, the second time as nested maps.
// Only kinds that report their conditions (GetConditions) qualify.
func TypedRequest(scheme *runtime.Scheme, gvk schema.GroupVersionKind) client.Object {
	if scheme == nil {
		return nil
	}
	obj, err := scheme.New(gvk)
	if err != nil {
		return nil
	}
	typed, ok := obj.(client.Object)
	if _, hasConditions := obj.(interface{ GetConditions() []metav1.Condition }); !ok || !hasConditions {
		return nil
	}
	return typed
}

// ChecksOwning maps a remediation request to the check of kind (NodeHealthCheck, MachineHealthCheck) that
// owns it: metalheal's, not medik8s' check of the same kind. A namespaced check is in the request's
// namespace.
func ChecksOwning(kind string, namespaced bool) func(context.Context, client.Object) []reconcile.Request {
	return func(_ context.Context, obj client.Object) []reconcile.Request {
		var out []reconcile.Request
		for _, o := range obj.GetOwnerReferences() {
			if gv, err := schema.ParseGroupVersion(o.APIVersion); err == nil && o.Kind == kind && gv.Group == v1alpha1.GroupVersion.Group {
				key := types.NamespacedName{Name: o.Name}
				if namespaced {
					key.Namespace = obj.GetNamespace()
				}
				out = append(out, reconcile.Request{NamespacedName: key})
			}
		}
		return out
	}
}

// WatchPendingError says that a kind a check names is being watched for the first time: nothing of it can
// be read yet without waiting, so the check is looked at again when the watch has synced (the kind watcher
// enqueues it) or been given up (at Until, at the latest).
type WatchPendingError struct{ Until time.Time }

func (e *WatchPendingError) Error() string {
	return "a remediation kind the check names is not watched yet"
}

// Pending is the WatchPendingError of the kinds among states whose first watch is still pending (the
// earliest give-up), nil when none is.
func Pending(states map[schema.GroupVersionKind]kindwatch.Status) error {
	var pending *WatchPendingError
	for _, st := range states {
		if st.State == kindwatch.Pending && (pending == nil || st.Until.Before(pending.Until)) {
			pending = &WatchPendingError{Until: st.Until}
		}
	}
	if pending == nil {
		return nil
	}
	return pending
}

// CacheReadGuard bounds a read of a check's cache: a read of a synced informer takes microseconds, and one
// of a kind without a synced informer would wait for one for ever.
const CacheReadGuard = 5 * time.Second

// Guarded bounds every read of its Reader with CacheReadGuard.
type Guarded struct{ client.Reader }

func (g Guarded) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	ctx, cancel := context.WithTimeout(ctx, CacheReadGuard)
	defer cancel()
	return g.Reader.Get(ctx, key, obj, opts...)
}

func (g Guarded) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	ctx, cancel := context.WithTimeout(ctx, CacheReadGuard)
	defer cancel()
	return g.Reader.List(ctx, list, opts...)
}

// CheckKind is a check kind (NodeHealthCheck, MachineHealthCheck) as its controller watches its own
// checks (WatchChecks).
type CheckKind struct {
	// Object is an empty check (&v1alpha1.NodeHealthCheck{}); NewList returns an empty list of the kind.
	Object  client.Object
	NewList func() client.ObjectList
	// Namespaced: a check's peers are the checks of its namespace (the overlapping rule among
	// MachineHealthChecks is per namespace); otherwise every check of the kind.
	Namespaced bool
	// Peer reads a check's status as its peers do.
	Peer func(client.Object) PeerStatus
}

// PeerStatus is what the overlapping and control-plane rules read of another check's status: whether it is
// disabled (it owns nothing then), and the targets it is remediating (it keeps them, and a control-plane
// one keeps the other control-plane targets waiting).
type PeerStatus struct {
	Disabled    bool
	Remediating map[string]bool
}

// WatchChecks adds a kind's two watches of its own checks to b: a check is looked at again for a change of
// its own (CheckChanged), and every other check of the kind (of its namespace, for a namespaced kind:
// PeersOf) for a change its peers read (PeerChanged). reader lists the checks; it should be a cache.
func WatchChecks(b *builder.Builder, reader client.Reader, kind CheckKind) *builder.Builder {
	return b.For(kind.Object, builder.WithPredicates(CheckChanged())).
		Watches(kind.Object, handler.EnqueueRequestsFromMapFunc(PeersOf(reader, kind)), builder.WithPredicates(PeerChanged(kind.Peer)))
}

// CheckChanged passes the events of a check that can change its own decision: its creation and deletion,
// a spec change (a new generation), the start of its deletion and a change of its annotations (a
// MachineHealthCheck is paused by one). Its status is the record of its last pass, not news to it: a
// status write, the check's own or anyone's, does not bring it back; the deadlines its pass returns, and
// the resync, cover what time alone changes.
func CheckChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return true
			}
			return o.GetGeneration() != n.GetGeneration() || deletionStarted(o, n) || !maps.Equal(o.GetAnnotations(), n.GetAnnotations())
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// PeerChanged passes the events of a check that can change another check's decision, by the overlapping
// rule (a check remediating a target keeps it, else the oldest check claiming it owns it) and the
// control-plane rule: its creation and deletion, a spec change (what it selects and finds unhealthy), the
// start of its deletion, and a change of what peer reads of its status (PeerStatus: disabled or not, the
// targets it is remediating). Its other status writes are dropped: a pass writes one, and each would cost
// every other check a pass.
func PeerChanged(peer func(client.Object) PeerStatus) predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return true
			}
			if o.GetGeneration() != n.GetGeneration() || deletionStarted(o, n) {
				return true
			}
			po, pn := peer(o), peer(n)
			return po.Disabled != pn.Disabled || !maps.Equal(po.Remediating, pn.Remediating)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// PeersOf maps a check to the other checks of its kind, those of its namespace for a namespaced kind:
// the checks whose decision it can change.
func PeersOf(reader client.Reader, kind CheckKind) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		list := kind.NewList()
		opts := []client.ListOption{client.UnsafeDisableDeepCopy}
		if kind.Namespaced {
			opts = append(opts, client.InNamespace(obj.GetNamespace()))
		}
		if err := reader.List(ctx, list, opts...); err != nil {
			log.FromContext(ctx).Error(err, "Listing the peers of a check", "check", klog.KObj(obj))
			return nil
		}
		var out []reconcile.Request
		_ = meta.EachListItem(list, func(item runtime.Object) error {
			if c, ok := item.(client.Object); ok && c.GetUID() != obj.GetUID() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
			}
			return nil
		})
		return out
	}
}

// deletionStarted reports whether an update set (or cleared) the deletion timestamp.
func deletionStarted(o, n client.Object) bool {
	return (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil)
}
