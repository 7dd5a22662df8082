package powercycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/eventnote"
	"github.com/metalheal/metalheal/internal/workload"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/leases"
)

// RemediationControllerName names the power-cycle remediator (logs, metrics, events).
const RemediationControllerName = "powercycleremediation"

// remediationKind is the kind the remediator's lease holder identities are made of:
// "PowerCycleRemediation-<name>".
const remediationKind = "PowerCycleRemediation"

// Defaults of RemediationReconcilerOptions.
const (
	DefaultRemediationMaxConcurrentReconciles = 50
	DefaultBMCCallTimeout                     = 10 * time.Second
	DefaultPowerPollInterval                  = 5 * time.Second
	DefaultLeaseDuration                      = 10 * time.Minute
)

// DriverSource finds a node's BMC object and a driver for it. *bmcaccess.Access is the production one.
// Its errors carry the kinds of internal/bmcaccess and pkg/bmc (see bmcaccess.Reason).
type DriverSource interface {
	ForHost(ctx context.Context, host bmcaccess.Host) (*v1alpha1.BMC, bmc.Driver, error)
}

// RemediationReconcilerOptions is everything the remediator is built from.
type RemediationReconcilerOptions struct {
	// Client reads PowerCycleRemediations and Nodes (the manager's cached client) and writes them. Status
	// writes carry the resourceVersion they were computed from, so a stale read never acts twice.
	Client client.Client
	// APIReader reads owning Machines straight from the API server (rare reads: no informer over every
	// Machine), node leases after the cache lost a race with one (leases.WithLiveReader), and a host's BMC
	// before its record of remediations is written (the cache may leave the record out:
	// bmcaccess.SlimBMC). Defaults to Client.
	APIReader client.Reader
	// Clock is the only source of time.
	Clock clock.Clock
	// Recorder emits events on the remediations.
	Recorder events.EventRecorder
	// Drivers finds each node's BMC and driver (share the manager's *bmcaccess.Access).
	Drivers DriverSource
	// LeaseClient reads and writes node leases; its Lease cache must be limited to LeaseNamespace (see
	// pkg/leases). Defaults to Client.
	LeaseClient client.Client
	// LeaseNamespace holds the node leases. Defaults to leases.DefaultNamespace.
	LeaseNamespace string
	// LeaseDuration is how long a node lease is taken for; it is renewed when less than half is left.
	// Defaults to DefaultLeaseDuration.
	LeaseDuration time.Duration
	// MaxConcurrentReconciles is how many remediations are worked on at once. Defaults to
	// DefaultRemediationMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// BMCCallTimeout bounds every single BMC call. Defaults to DefaultBMCCallTimeout.
	BMCCallTimeout time.Duration
	// PowerPollInterval is how often a power transition is checked while the BMC has not confirmed it,
	// and the first wait after a BMC error (the waits double from there). Defaults to
	// DefaultPowerPollInterval.
	PowerPollInterval time.Duration
	// ManagerNamespace is the manager's own namespace, where the BMCs and their Secrets live (the
	// DriverSource reads BMCs only there). Requests in it are always acted on: whoever may write there
	// holds the BMC credentials already. Required.
	ManagerNamespace string
	// TrustedNamespaces are the namespaces, besides ManagerNamespace, whose requests the remediator acts
	// on (--remediation-namespaces; Cluster API users list their clusters' namespaces). A request anywhere
	// else is refused before anything is done for it (see refuseUntrusted): creating a request is the
	// power to switch a server off, and a namespace's editors must not hold it. Empty: ManagerNamespace
	// only.
	TrustedNamespaces []string
	// ManagerNodeName is the node the manager runs on, if known ($NODE_NAME from the downward API). When
	// it is the one being powered off, a warning event says so; the power-off is recorded in status
	// before it is sent, like every power-off, so the replacement manager resumes from there.
	ManagerNodeName string
	// WorkloadClusters reach the Cluster API workload clusters that hold the Nodes of Machine-owned
	// requests: share the MachineHealthCheck's. Defaults to connections of the remediator's own, stopped
	// with the manager (SetupWithManager).
	WorkloadClusters *workload.Clusters
}

// RemediationReconciler reconciles PowerCycleRemediations: the bundled external remediation
// controller. See the package documentation and docs/powercycle.md.
type RemediationReconciler struct {
	opts   RemediationReconcilerOptions
	phases map[v1alpha1.PowerCyclePhase]phaseHandler
	// memory is what this process knows of its remediations that its cache may not show yet.
	memory memory
	// trusted are the namespaces whose requests are acted on: ManagerNamespace and TrustedNamespaces.
	trusted map[string]bool
	// claim is the hold on hosts: which requests of a Node act on it, and its node lease.
	claim *hostClaim
	// ownWorkloads: the workload cluster connections were made here, not shared (SetupWithManager adds
	// them to the manager).
	ownWorkloads bool
}

// NewRemediationReconciler checks and defaults opts and returns the remediator.
func NewRemediationReconciler(opts RemediationReconcilerOptions) (*RemediationReconciler, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("the power-cycle remediator needs a client")
	case opts.Clock == nil:
		return nil, errors.New("the power-cycle remediator needs a clock")
	case opts.Recorder == nil:
		return nil, errors.New("the power-cycle remediator needs an event recorder")
	case opts.Drivers == nil:
		return nil, errors.New("the power-cycle remediator needs a BMC driver source")
	case opts.ManagerNamespace == "":
		return nil, errors.New("the power-cycle remediator needs the manager's namespace: requests are trusted only there and in the namespaces listed")
	}
	opts.Recorder = eventnote.Recorder{EventRecorder: opts.Recorder}
	if opts.APIReader == nil {
		opts.APIReader = opts.Client
	}
	if opts.LeaseClient == nil {
		opts.LeaseClient = opts.Client
	}
	if opts.LeaseNamespace == "" {
		opts.LeaseNamespace = leases.DefaultNamespace
	}
	if opts.LeaseDuration < time.Second {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultRemediationMaxConcurrentReconciles
	}
	if opts.BMCCallTimeout <= 0 {
		opts.BMCCallTimeout = DefaultBMCCallTimeout
	}
	if opts.PowerPollInterval <= 0 {
		opts.PowerPollInterval = DefaultPowerPollInterval
	}
	ownWorkloads := opts.WorkloadClusters == nil
	if ownWorkloads {
		opts.WorkloadClusters = workload.New(workload.Options{Clock: opts.Clock, LeaseNamespace: opts.LeaseNamespace})
	}
	r := &RemediationReconciler{opts: opts, trusted: trustedNamespaces(opts.ManagerNamespace, opts.TrustedNamespaces), ownWorkloads: ownWorkloads}
	r.claim = &hostClaim{client: opts.Client, trusted: r.trusted, nodes: r, clock: opts.Clock, recorder: opts.Recorder,
		leaseNamespace: opts.LeaseNamespace, leaseDuration: opts.LeaseDuration, pollInterval: opts.PowerPollInterval}
	r.phases = r.phaseHandlers()
	return r, nil
}

// remediationNodeIndex indexes PowerCycleRemediations by the node they act on, so a Node event finds its
// remediation without a list of all of them.
const remediationNodeIndex = "metalheal.powercycle.node"

// remediationNodeKey is the host a remediation acts on, as bmcaccess.Host spells it (the node's name, for
// a Node of this cluster): the one it resolved, else the Node it names.
func remediationNodeKey(pcr *v1alpha1.PowerCycleRemediation) string {
	if pcr.Status.NodeName != "" {
		return hostOf(pcr).String()
	}
	if n := pcr.Annotations[v1alpha1.AnnotationNodeName]; n != "" {
		return n
	}
	return pcr.Name
}

// SetupWithManager registers the remediator: it watches PowerCycleRemediations, the Nodes they act on
// (a Node turning Ready is noticed at once), the BMCs of those nodes (a fixed BMC is tried at once) and
// the node leases (a request waiting for its health check's lease goes on once it is taken), and the
// other requests of the same node (what a request does with its node depends on them: see hostClaim).
// The node leases are read through the manager's cache: restrict it to the lease namespace.
func (r *RemediationReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := indexRemediationsByNode(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named(RemediationControllerName).
		For(&v1alpha1.PowerCycleRemediation{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.remediationsOfNode),
			builder.WithPredicates(nodeChangePredicate())).
		Watches(&v1alpha1.BMC{}, handler.EnqueueRequestsFromMapFunc(r.remediationsOfBMC),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.claim.remediationsAwaitingLease)).
		Watches(&v1alpha1.PowerCycleRemediation{}, handler.EnqueueRequestsFromMapFunc(r.claim.remediationsBesides),
			builder.WithPredicates(handOverChangePredicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}).
		Build(r)
	if err != nil {
		return fmt.Errorf("building the power-cycle remediator: %w", err)
	}
	r.opts.WorkloadClusters.OnConnect(r.watchWorkloadNodes(c))
	if r.ownWorkloads {
		if err := mgr.Add(r.opts.WorkloadClusters); err != nil {
			return fmt.Errorf("adding the workload cluster connections to the manager: %w", err)
		}
	}
	return nil
}

// indexRemediationsByNode registers remediationNodeIndex.
func indexRemediationsByNode(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1alpha1.PowerCycleRemediation{}, remediationNodeIndex,
		func(o client.Object) []string {
			return []string{remediationNodeKey(o.(*v1alpha1.PowerCycleRemediation))}
		}); err != nil {
		return fmt.Errorf("indexing PowerCycleRemediations by node: %w", err)
	}
	return nil
}

// remediationsOfNode maps a Node to the remediations acting on it.
func (r *RemediationReconciler) remediationsOfNode(ctx context.Context, o client.Object) []reconcile.Request {
	return r.claim.remediationsFor(ctx, o.GetName(), nil)
}

// remediationsOfBMC maps a BMC to the remediations acting on its node.
func (r *RemediationReconciler) remediationsOfBMC(ctx context.Context, o client.Object) []reconcile.Request {
	b, ok := o.(*v1alpha1.BMC)
	if !ok {
		return nil
	}
	return r.claim.remediationsFor(ctx, bmcaccess.HostOf(b).String(), nil)
}

// Remediating reports whether a PowerCycleRemediation is at work on the host (as bmcaccess.Host spells
// it: the node's name for a Node of this cluster): not finished yet, or being cleaned up (which may power
// the host on). It reads the cache's index, without copying.
func (r *RemediationReconciler) Remediating(ctx context.Context, host string) bool {
	return r.claim.remediating(ctx, host)
}

// nodeChangePredicate lets through what a remediation waits for on its Node: creation, deletion, and a
// change of its Ready condition (status or heartbeat). The remediator's own changes (taints) are not
// news to it.
func nodeChangePredicate() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, ok1 := e.ObjectOld.(*corev1.Node)
			newNode, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			return readyCondition(oldNode) != readyCondition(newNode)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
