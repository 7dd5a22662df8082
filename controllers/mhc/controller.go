package mhc

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/pkg/leases"
)

// Defaults for Options.
const (
	DefaultWorkloadClusterSyncTimeout = 10 * time.Second
	DefaultKubeconfigRecheckInterval  = time.Minute
)

// Options configure the Reconciler. SetupWithManager fills what is left empty from the manager; a test
// that calls Reconcile directly sets Client, Reader, APIReader, Recorder and Clock.
type Options struct {
	// Client reads MachineHealthChecks and writes Machines' status, remediation requests and the check's
	// status. Default: the manager's client.
	Client client.Client
	// Reader reads Machines, Clusters, local Nodes and remediation requests (unstructured). It should be
	// a cache, so that no read reaches the API server. Default: the manager's cache (which caches
	// unstructured objects too, unlike the manager's client).
	Reader client.Reader
	// APIReader reads, uncached, what is read rarely and must not be cached cluster-wide: kubeconfig
	// Secrets (only when a workload cluster is first connected) and remediation templates (only when a
	// request is created). Default: the manager's API reader.
	APIReader client.Reader
	// Recorder records events. Default: the manager's recorder named "machinehealthcheck".
	Recorder events.EventRecorder
	// Clock tells the time. Required.
	Clock clock.Clock
	// MaxConcurrentReconciles is how many checks are reconciled at once. Default 1.
	MaxConcurrentReconciles int
	// WorkloadClusterSyncTimeout bounds the wait for a workload cluster's Nodes when it is first
	// connected. Default DefaultWorkloadClusterSyncTimeout.
	WorkloadClusterSyncTimeout time.Duration
	// KubeconfigRecheckInterval is how long a missing <clusterName>-kubeconfig Secret is remembered
	// before it is looked up again. Default DefaultKubeconfigRecheckInterval.
	KubeconfigRecheckInterval time.Duration
	// KindSyncTimeout bounds the first sync of a remediation kind's watch. A kind not synced by then (the
	// manager may not list it, typically) disables the checks that name it (condition Disabled, reason
	// RemediationKindNotWatchable) and is tried again with a backoff (internal/kindwatch); no other check
	// ever waits for it. Default kindwatch.DefaultSyncTimeout.
	KindSyncTimeout time.Duration
	// LeaseNamespace is where node leases live (medik8s-compatible, pkg/leases). Default
	// leases.DefaultNamespace. The manager's cache should hold Leases of this namespace only.
	LeaseNamespace string
	// LeaseDuration is how long the check takes a node lease for; it renews it at half-time while its
	// remediation request lives. Default 10m (the manager's --lease-duration default).
	LeaseDuration time.Duration
}

// Reconciler reconciles MachineHealthChecks.
type Reconciler struct {
	client    client.Client
	reader    client.Reader
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.Clock
	opts      Options
	remotes   *remoteClusters

	// Set by SetupWithManager: dynamic watches on workload clusters' Nodes and on remediation kinds.
	controller controller.Controller
	kinds      *kindwatch.Watcher
}

// New returns a Reconciler. Only Clock is required here; SetupWithManager fills the rest.
func New(opts Options) (*Reconciler, error) {
	if opts.Clock == nil {
		return nil, errors.New("mhc: Options.Clock is required")
	}
	if opts.WorkloadClusterSyncTimeout <= 0 {
		opts.WorkloadClusterSyncTimeout = DefaultWorkloadClusterSyncTimeout
	}
	if opts.KubeconfigRecheckInterval <= 0 {
		opts.KubeconfigRecheckInterval = DefaultKubeconfigRecheckInterval
	}
	if opts.KindSyncTimeout < 0 {
		return nil, errors.New("mhc: Options.KindSyncTimeout must not be negative")
	}
	if opts.LeaseNamespace == "" {
		opts.LeaseNamespace = leases.DefaultNamespace
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = defaultLeaseDuration
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 1
	}
	r := &Reconciler{
		client: opts.Client, reader: opts.Reader, apiReader: opts.APIReader, recorder: opts.Recorder,
		clock: opts.Clock, opts: opts,
		remotes: newRemoteClusters(opts.Clock, opts.WorkloadClusterSyncTimeout, opts.KubeconfigRecheckInterval),
	}
	r.remotes.onConnect = r.watchRemoteNodes
	return r, nil
}

// SetupWithManager registers the controller: it watches MachineHealthChecks, Machines, Clusters and
// local Nodes through the manager's cache, and, as they are first needed, the Nodes of each workload
// cluster and each remediation kind. The manager's scheme must know Cluster API's v1beta2 types.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.client == nil {
		r.client = mgr.GetClient()
	}
	if r.reader == nil {
		r.reader = mgr.GetCache()
	}
	if r.apiReader == nil {
		r.apiReader = mgr.GetAPIReader()
	}
	if r.recorder == nil {
		r.recorder = mgr.GetEventRecorder("machinehealthcheck")
	}
	kinds, err := kindwatch.New(kindwatch.Options{Name: "machinehealthcheck", Cache: mgr.GetCache(), Probe: r.apiReader,
		Mapper: mgr.GetRESTMapper(), Clock: r.clock, SyncTimeout: r.opts.KindSyncTimeout})
	if err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &clusterv1.Machine{}, indexMachineByNodeName, machineNodeName); err != nil {
		return fmt.Errorf("indexing Machines by Node: %w", err)
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named("machinehealthcheck").
		For(&v1alpha1.MachineHealthCheck{}).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(r.machineToChecks)).
		Watches(&clusterv1.Cluster{}, clusterEvents{EventHandler: handler.EnqueueRequestsFromMapFunc(r.clusterToChecks), forget: r.remotes.forget}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.nodeToChecks(ctx, o, nil)
		}), builder.WithPredicates(nodeHealthChanged())).
		WatchesRawSource(kinds.Source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}).
		Build(r)
	if err != nil {
		return fmt.Errorf("building the machinehealthcheck controller: %w", err)
	}
	r.controller, r.kinds = c, kinds
	if err := mgr.Add(r.remotes); err != nil {
		return fmt.Errorf("adding the workload cluster caches to the manager: %w", err)
	}
	return nil
}

// Reconcile checks one MachineHealthCheck's Machines and acts on what it finds.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mhc := &v1alpha1.MachineHealthCheck{}
	if err := r.client.Get(ctx, req.NamespacedName, mhc); err != nil {
		if apierrors.IsNotFound(err) {
			forgetCheckMetrics(req.NamespacedName)
			r.forgetKinds(ctx, req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading MachineHealthCheck %s: %w", req.NamespacedName, err)
	}
	if !mhc.DeletionTimestamp.IsZero() {
		forgetCheckMetrics(req.NamespacedName)
		r.forgetKinds(ctx, req.NamespacedName)
		return ctrl.Result{}, nil
	}
	now := r.clock.Now()
	in, err := r.observe(ctx, mhc, now)
	var pending *watchPendingError
	var unwatchable *kindNotWatchableError
	switch {
	case errors.As(err, &pending):
		// Nothing is decided from a kind not watched yet; the kind watcher enqueues the check once it is.
		return ctrl.Result{RequeueAfter: requeueAfter(pending.until, r.clock.Now())}, nil
	case errors.As(err, &unwatchable):
		return r.disable(ctx, mhc, unwatchable)
	case err != nil:
		return ctrl.Result{}, r.observeFailed(mhc, err)
	}
	if err := r.observeSafety(ctx, &in); err != nil {
		return ctrl.Result{}, err
	}
	p, err := planChecks(in)
	if err != nil {
		r.recorder.Eventf(mhc, nil, corev1.EventTypeWarning, EventRemediationFailed, actionCheck, "%s", err.Error())
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	r.enable(mhc, &p.Status)
	errs := r.execute(ctx, mhc, &p)
	p.Status.RecentRemediations = p.recentRemediations()
	if err := r.patchStatus(ctx, mhc, p.Status); err != nil {
		errs = append(errs, err)
	}
	recordCheckMetrics(req.NamespacedName, p)
	if len(errs) > 0 {
		return ctrl.Result{}, errors.Join(errs...)
	}
	return ctrl.Result{RequeueAfter: requeueAfter(p.NextCheck, r.clock.Now())}, nil
}

// observeFailed reports why the check's inputs could not be read.
func (r *Reconciler) observeFailed(mhc *v1alpha1.MachineHealthCheck, err error) error {
	var spec *InvalidSpecError
	var wc *WorkloadClusterError
	switch {
	case errors.As(err, &spec):
		r.recorder.Eventf(mhc, nil, corev1.EventTypeWarning, EventRemediationFailed, actionCheck, "%s", err.Error())
		return reconcile.TerminalError(err)
	case errors.As(err, &wc):
		r.recorder.Eventf(mhc, nil, corev1.EventTypeWarning, EventWorkloadClusterUnreachable, actionCheck, "%s", err.Error())
	}
	return err
}

// disable records that the check cannot work because a remediation kind it names cannot be watched: its
// Disabled condition says why (the rest of its status is kept as it was: nothing was observed), a Warning
// event says so once, and it is looked at again when the kind watcher tries the kind again.
func (r *Reconciler) disable(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, cause *kindNotWatchableError) (ctrl.Result, error) {
	now := r.clock.Now()
	status := *mhc.Status.DeepCopy()
	was := meta.FindStatusCondition(mhc.Status.Conditions, v1alpha1.ConditionDisabled)
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonRemediationKindNotWatchable, Message: cause.Error(), ObservedGeneration: mhc.Generation,
		LastTransitionTime: metav1.NewTime(now)})
	if err := r.patchStatus(ctx, mhc, status); err != nil {
		return ctrl.Result{}, err
	}
	if was == nil || was.Status != metav1.ConditionTrue || was.Reason != v1alpha1.ReasonRemediationKindNotWatchable {
		r.recorder.Eventf(mhc, nil, corev1.EventTypeWarning, EventDisabled, actionCheck, "No remediation can start: %s", cause.Error())
	}
	return ctrl.Result{RequeueAfter: requeueAfter(cause.retry, now)}, nil
}

// enable clears the Disabled condition of a check that was disabled and works again, with an event.
func (r *Reconciler) enable(mhc *v1alpha1.MachineHealthCheck, status *v1alpha1.MachineHealthCheckStatus) {
	if !meta.IsStatusConditionTrue(status.Conditions, v1alpha1.ConditionDisabled) {
		return
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionDisabled, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonAsExpected, Message: "The remediation kinds are watched", ObservedGeneration: mhc.Generation,
		LastTransitionTime: metav1.NewTime(r.clock.Now())})
	r.recorder.Eventf(mhc, nil, corev1.EventTypeNormal, EventEnabled, actionCheck, "The remediation kinds are watched again")
}

// ClusterAPIInstalled reports whether the API server serves Cluster API's v1beta2 Machines and Clusters.
// Without them the controller's watches never sync and the manager fails to start, so main should only
// set the controller up when this is true.
func ClusterAPIInstalled(mapper meta.RESTMapper) (bool, error) {
	for _, kind := range []string{"Machine", "Cluster"} {
		_, err := mapper.RESTMapping(clusterv1.GroupVersion.WithKind(kind).GroupKind(), clusterv1.GroupVersion.Version)
		if meta.IsNoMatchError(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("looking up Cluster API's %s kind: %w", kind, err)
		}
	}
	return true, nil
}

// requeueAfter is how long after now next is: 0 (no requeue) when there is no next check.
func requeueAfter(next, now time.Time) time.Duration {
	if next.IsZero() {
		return 0
	}
	return max(next.Sub(now), time.Nanosecond)
}

// clusterKey names the check's Cluster.
func clusterKey(mhc *v1alpha1.MachineHealthCheck) types.NamespacedName {
	return types.NamespacedName{Namespace: mhc.Namespace, Name: mhc.Spec.ClusterName}
}
