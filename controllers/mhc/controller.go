package mhc

import (
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/kindwatch"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/internal/workload"
	"github.com/metalheal/metalheal/pkg/leases"
)

// Defaults for Options: those of the workload cluster connections.
const (
	DefaultWorkloadClusterSyncTimeout = workload.DefaultSyncTimeout
	DefaultKubeconfigRecheckInterval  = workload.DefaultRecheck
)

// Options configure the Reconciler. SetupWithManager fills what is left empty from the manager; a test
// that calls Reconcile directly sets Client, Reader, APIReader, Recorder and Clock.
type Options struct {
	// Client reads MachineHealthChecks and writes Machines' status, remediation requests and the check's
	// status. Default: the manager's client.
	Client client.Client
	// Reader reads Machines, Clusters, local Nodes and remediation requests (typed for the kinds the
	// manager's scheme serves, unstructured for any other: engine.ListRequests). It should be a cache, so
	// that no read reaches the API server. Default: the manager's cache (which caches unstructured objects
	// too, unlike the manager's client).
	Reader client.Reader
	// APIReader reads, uncached, what is read rarely and must not be cached cluster-wide: kubeconfig
	// Secrets (only when a workload cluster is first connected). Remediation templates are read from
	// Reader, their kinds watched as the requests' are. Default: the manager's API reader.
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
	// WorkloadClusters are the connections to workload clusters, shared with the remediator (whoever
	// makes them adds them to the manager); they must cache the node leases of LeaseNamespace, where the
	// check holds its workload Nodes' leases. When nil, the check makes its own from the two options above
	// and LeaseNamespace, and SetupWithManager adds them.
	WorkloadClusters *workload.Clusters
	// KindSyncTimeout bounds the first sync of a remediation kind's watch. A kind not synced by then (the
	// manager may not list it, typically) disables the checks that name it (condition Disabled, reason
	// RemediationKindNotWatchable) and is tried again with a backoff (internal/kindwatch); no other check
	// ever waits for it. Default kindwatch.DefaultSyncTimeout.
	KindSyncTimeout time.Duration
	// LeaseNamespace is where node leases live (medik8s-compatible, pkg/leases). Default
	// leases.DefaultNamespace. The manager's cache should hold Leases of this namespace only.
	LeaseNamespace string
	// ResyncPeriod is the safety net: every check is looked at again at least this often, though every
	// deadline its decision knows of is requeued at exactly. Default engine.DefaultResyncPeriod (60s).
	ResyncPeriod time.Duration
	// LeaseDuration is how long the check takes a node lease for; it renews it at half-time while its
	// remediation request lives. Default 10m (the manager's --lease-duration default).
	LeaseDuration time.Duration
	// Discovery tells which Cluster API version the API server serves. Default: a discovery client of the
	// manager's config.
	Discovery Discovery
	// ClusterAPIRecheckInterval is how long the served Cluster API version is remembered: a Cluster API
	// installed or upgraded after the manager started is noticed within it. Default
	// DefaultClusterAPIRecheckInterval.
	ClusterAPIRecheckInterval time.Duration
	// ClusterNamespaces, when not empty, are the only namespaces whose <cluster>-kubeconfig Secrets are
	// read (main's --cluster-namespaces): a check whose Cluster is elsewhere is disabled
	// (KubeconfigNotReadable) without a request. Empty: any namespace, as RBAC allows.
	ClusterNamespaces []string
	// ControlPlaneClaim is the manager's one claim on starting a control-plane remediation, shared with its
	// NodeHealthChecks (internal/gates): a check takes a control-plane Node's lease for a new remediation
	// only under it, and only while no other control-plane Node's lease is held. Nil: a claim of this
	// reconciler's own.
	ControlPlaneClaim *gates.ControlPlaneClaim
}

// Reconciler reconciles MachineHealthChecks.
type Reconciler struct {
	client    client.Client
	reader    client.Reader
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.Clock
	opts      Options
	remotes   *workload.Clusters
	// ownRemotes: remotes were made here, not shared (SetupWithManager adds them to the manager).
	ownRemotes bool
	served     *servedVersion
	// unreachable are the checks whose workload cluster's outage was reported (once per outage).
	unreachable sync.Map
	cpClaim     *gates.ControlPlaneClaim
	statuses    engine.StatusWrites
	// recent are the requests this process just created or deleted, while the cache lags behind.
	recent engine.RecentWrites

	// Set by SetupWithManager: dynamic watches on workload clusters' Nodes and on remediation kinds.
	controller controller.Controller
	kinds      *kindwatch.Watcher
	indexer    machineIndexer
	indexMu    sync.Mutex
	indexed    cache.Informer // the Machine informer indexed by Node
	indexedVer string
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
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = engine.DefaultResyncPeriod
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = defaultLeaseDuration
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 1
	}
	if opts.ClusterAPIRecheckInterval <= 0 {
		opts.ClusterAPIRecheckInterval = DefaultClusterAPIRecheckInterval
	}
	if opts.ControlPlaneClaim == nil {
		opts.ControlPlaneClaim = &gates.ControlPlaneClaim{}
	}
	r := &Reconciler{
		client: opts.Client, reader: opts.Reader, apiReader: opts.APIReader, recorder: opts.Recorder,
		clock: opts.Clock, opts: opts, cpClaim: opts.ControlPlaneClaim,
		remotes: opts.WorkloadClusters,
		served:  &servedVersion{disco: opts.Discovery, clock: opts.Clock, recheck: opts.ClusterAPIRecheckInterval},
	}
	if r.remotes == nil {
		r.remotes, r.ownRemotes = workload.New(workload.Options{Clock: opts.Clock, LeaseNamespace: opts.LeaseNamespace,
			SyncTimeout: opts.WorkloadClusterSyncTimeout, Recheck: opts.KubeconfigRecheckInterval}), true
	}
	if ns := r.remotes.LeaseNamespace(); ns != opts.LeaseNamespace {
		return nil, fmt.Errorf("mhc: the workload cluster connections cache the node leases of namespace %q, not %q (Options.LeaseNamespace)",
			ns, opts.LeaseNamespace)
	}
	r.remotes.OnConnect(r.watchRemoteNodes)
	return r, nil
}

// SetupWithManager registers the controller: it watches MachineHealthChecks (a check's own spec and
// annotations, and what the overlapping rule reads of the others of its namespace: engine.WatchChecks) and
// local Nodes through the manager's cache, and, as they are first needed, Machines and Clusters in the
// version the API server serves (none while Cluster API is not installed), the Nodes of each workload
// cluster and each remediation kind. The manager's scheme must know Cluster API's v1beta2 and v1beta1
// types.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.served.disco == nil {
		d, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("making a discovery client: %w", err)
		}
		r.served.disco = d
	}
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
	poller := &versionPoller{r: r, events: make(chan event.TypedGenericEvent[client.Object])}
	c, err := engine.WatchChecks(ctrl.NewControllerManagedBy(mgr).Named("machinehealthcheck"), r.reader, checkKind).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.nodeToChecks(ctx, o, nil)
		}), builder.WithPredicates(engine.NodeUpdates())).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.leaseToChecks),
			builder.WithPredicates(engine.LeaseChanged(r.opts.LeaseNamespace))).
		WatchesRawSource(kinds.Source()).
		WatchesRawSource(source.Channel(poller.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}).
		Build(r)
	if err != nil {
		return fmt.Errorf("building the machinehealthcheck controller: %w", err)
	}
	r.controller, r.kinds, r.indexer = c, kinds, mgr.GetCache()
	// After a start, no control-plane remediation before every check has looked once (gates.ControlPlaneClaim).
	r.cpClaim.Expect(engine.ClaimChecks(r.reader, holderKind, func() client.ObjectList { return &v1alpha1.MachineHealthCheckList{} }))
	if err := mgr.Add(poller); err != nil {
		return fmt.Errorf("adding the Cluster API version poller to the manager: %w", err)
	}
	if r.ownRemotes {
		if err := mgr.Add(r.remotes); err != nil {
			return fmt.Errorf("adding the workload cluster caches to the manager: %w", err)
		}
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
			r.statuses.Forget(req.NamespacedName)
			r.cpClaim.Forget(engine.ClaimKey(holderKind, req.NamespacedName))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading MachineHealthCheck %s: %w", req.NamespacedName, err)
	}
	if !mhc.DeletionTimestamp.IsZero() {
		r.statuses.Forget(req.NamespacedName)
		r.cpClaim.Forget(claimKey(mhc))
		forgetCheckMetrics(req.NamespacedName)
		r.forgetKinds(ctx, req.NamespacedName)
		return ctrl.Result{}, nil
	}
	// Annotated for Go's execution tracer, as the NodeHealthCheck's reconcile is (see there).
	ctx, task := trace.NewTask(ctx, "MachineHealthCheck")
	defer task.End()
	now := r.clock.Now()
	trace.Log(ctx, "start", req.String()+" "+now.UTC().Format(time.RFC3339Nano))
	observing := trace.StartRegion(ctx, "observe")
	in, err := r.observe(ctx, mhc, now)
	observing.End()
	var pending *engine.WatchPendingError
	var unwatchable *kindNotWatchableError
	var noCAPI *clusterAPINotInstalledError
	var noKubeconfig *workload.ForbiddenError
	var refused *template.RefusedKindError
	switch {
	case errors.As(err, &refused):
		// Let go of whatever an earlier spec of the check had watched.
		r.forgetKinds(ctx, req.NamespacedName)
		return r.disableFor(ctx, mhc, v1alpha1.ReasonRemediationKindRefused, refused.Error(), time.Time{})
	case errors.As(err, &noCAPI):
		// Looked at again when the served version is next rechecked.
		return r.disableFor(ctx, mhc, v1alpha1.ReasonClusterAPINotInstalled, noCAPI.Error(), noCAPI.retry)
	case errors.As(err, &noKubeconfig):
		// Disabled until the Role is granted; looked at again after the kubeconfig recheck interval.
		return r.disableFor(ctx, mhc, v1alpha1.ReasonKubeconfigNotReadable, noKubeconfig.Error(), noKubeconfig.Retry)
	case errors.As(err, &pending):
		// Nothing is decided from a kind not watched yet; the kind watcher enqueues the check once it is.
		return ctrl.Result{RequeueAfter: requeueAfter(pending.Until, r.clock.Now())}, nil
	case errors.As(err, &unwatchable):
		// Until the kind watcher's next attempt at the kind.
		return r.disableFor(ctx, mhc, v1alpha1.ReasonRemediationKindNotWatchable, unwatchable.Error(), unwatchable.retry)
	case err != nil:
		return r.observeFailed(ctx, mhc, req.NamespacedName, err)
	}
	r.unreachable.Delete(req.NamespacedName)
	safety := trace.StartRegion(ctx, "observe leases")
	err = r.observeSafety(ctx, &in)
	safety.End()
	if err != nil {
		return ctrl.Result{}, err
	}
	deciding := trace.StartRegion(ctx, "decide")
	p, err := planChecks(in)
	deciding.End()
	if spec := (*InvalidSpecError)(nil); errors.As(err, &spec) {
		return r.disableFor(ctx, mhc, spec.reason(), spec.Error(), time.Time{})
	} else if err != nil {
		return ctrl.Result{}, err
	}
	// Before anything is written: the manager's other checks hold their control-plane starts back from now.
	r.cpClaim.Changing(r.nodeCluster(in.Safety.Site).Key, claimKey(mhc), changingKeys(in.Machines))
	execErr := r.execute(ctx, mhc, &p)
	p.Status.RecentRemediations = p.recentRemediations()
	writing := trace.StartRegion(ctx, "status")
	err = r.patchStatus(ctx, mhc, p.Status)
	writing.End()
	recordCheckMetrics(req.NamespacedName, p)
	if apierrors.IsConflict(err) && execErr == nil {
		// The cache showed an older check than the API server has (often the check's own last status
		// write): decide again from a fresh view soon, as a NodeHealthCheck does, not after the growing
		// backoff of an error.
		return ctrl.Result{RequeueAfter: engine.ConflictRetry}, nil
	}
	if err = errors.Join(execErr, err); err != nil {
		return ctrl.Result{}, err
	}
	r.cpClaim.Looked(claimKey(mhc), r.clock.Now())
	return ctrl.Result{RequeueAfter: engine.RequeueAfter(p.NextCheck, r.clock.Now(), r.opts.ResyncPeriod, 0)}, nil
}

// observeFailed reports why the check's inputs could not be read. A workload cluster that does not answer
// is said once per outage (a warning) and looked at again every workloadRetry, not at the controller's
// growing backoff: the check resumes within that bound of the cluster answering again, however long the
// outage was.
func (r *Reconciler) observeFailed(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, key types.NamespacedName, err error) (ctrl.Result, error) {
	var spec *InvalidSpecError
	var wc *workload.Error
	switch {
	case errors.As(err, &spec):
		return r.disableFor(ctx, mhc, spec.reason(), spec.Error(), time.Time{})
	case errors.As(err, &wc):
		if _, told := r.unreachable.LoadOrStore(key, true); !told {
			r.recorder.Eventf(mhc, nil, corev1.EventTypeWarning, EventWorkloadClusterUnreachable, actionCheck, "%s", err.Error())
		}
		if !errors.Is(err, workload.ErrUnsafeKubeconfig) { // only a new Secret cures that one
			return ctrl.Result{RequeueAfter: workloadRetry}, nil
		}
	}
	return ctrl.Result{}, err
}

// workloadRetry is how often a check whose workload cluster does not answer looks at it again.
const workloadRetry = 10 * time.Second

// ServedClusterAPIVersion returns the Cluster API version the controller would read Machines and Clusters
// in ("v1beta2" or "v1beta1"), or "" when Cluster API is not installed. The controller asks again by
// itself (Options.ClusterAPIRecheckInterval); main only logs this at start.
func ServedClusterAPIVersion(d Discovery) (string, error) {
	s := &servedVersion{disco: d, clock: clock.RealClock{}}
	return s.get()
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
