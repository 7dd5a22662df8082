package powerwatch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/workload"
)

// ControllerName names the power watch (logs, metrics, events).
const ControllerName = "powerwatch"

// Defaults of Options.
const (
	DefaultReadTimeout  = 10 * time.Second
	DefaultProbeTimeout = time.Second
	// DefaultStreamBackoff and DefaultStreamBackoffMax bound the reopening of an event stream that failed or
	// dropped: 1s, doubling, at most 2 minutes; the poll covers the host meanwhile.
	DefaultStreamBackoff    = time.Second
	DefaultStreamBackoffMax = 2 * time.Minute
)

// NodeRemediations tells whether a remediation is at work on a host (bmcaccess.Host's spelling). The
// power-cycle remediator (*powercycle.RemediationReconciler) is one.
type NodeRemediations interface {
	Remediating(ctx context.Context, host string) bool
}

// Options build a Watcher.
type Options struct {
	// Client reads BMCs and Nodes (from the cache) and patches the Nodes' status.
	Client client.Client
	// APIReader reads what must be live (a workload cluster's kubeconfig Secret).
	APIReader client.Reader
	// Access builds the drivers, shared with the remediator and the BMC inventory.
	Access *bmcaccess.Access
	// Recorder emits events on the BMCs.
	Recorder events.EventRecorder
	// Clock times the polls and the stream's backoff, and stamps the conditions.
	Clock clock.Clock
	// Remediations tells which hosts a metalheal remediation is at work on; nil: none is (no remediator
	// runs in this manager).
	Remediations NodeRemediations
	// WorkloadClusters reach the Nodes of BMCs that name a Cluster API cluster (spec.cluster); nil: every
	// Node is looked for in the manager's own cluster.
	WorkloadClusters *workload.Clusters
	// ReadTimeout bounds one power reading. Zero means DefaultReadTimeout.
	ReadTimeout time.Duration
	// ProbeTimeout bounds the probe of a kubelet. Zero means DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// Probe connects to a kubelet (host:port) and reports whether it answered (nil). Nil means a TCP
	// connection (dialKubelet).
	Probe func(ctx context.Context, endpoint string) error
	// StreamBackoff and StreamBackoffMax bound the reopening of an event stream; zero means the defaults.
	StreamBackoff, StreamBackoffMax time.Duration
}

// Watcher follows the power of every host whose BMC asks for it (spec.powerWatch). It is a controller of
// BMCs, which says which watches should run, and a manager Runnable, which runs them: one goroutine per
// BMC (two while its event stream is open), all ended when the manager stops or loses its leadership.
type Watcher struct {
	opts Options

	// commands carries the reconciles' wishes to Start, which owns the watches.
	commands chan command

	mu      sync.Mutex
	running map[types.NamespacedName]*running

	// goroutines counts the goroutines of the watches (tests check none is left behind).
	goroutines atomic.Int64
}

// running is one watch: what it was started from, and how to end it.
type running struct {
	uid        types.UID
	generation int64
	cancel     context.CancelFunc
	done       chan struct{}
}

// command asks Start to make the watch of key follow want (nil: stop it).
type command struct {
	key  types.NamespacedName
	want *wanted
	done chan struct{}
}

// wanted is a watch as a BMC asks for it.
type wanted struct {
	uid        types.UID
	generation int64
	spec       v1alpha1.PowerWatch
}

// New returns a Watcher.
func New(opts Options) (*Watcher, error) {
	if opts.Client == nil || opts.Access == nil || opts.Recorder == nil || opts.Clock == nil {
		return nil, errors.New("the power watch needs a Client, an Access, a Recorder and a Clock")
	}
	if opts.APIReader == nil {
		opts.APIReader = opts.Client
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.Probe == nil {
		opts.Probe = dialKubelet
	}
	if opts.StreamBackoff <= 0 {
		opts.StreamBackoff = DefaultStreamBackoff
	}
	if opts.StreamBackoffMax <= 0 {
		opts.StreamBackoffMax = DefaultStreamBackoffMax
	}
	return &Watcher{opts: opts, commands: make(chan command), running: map[types.NamespacedName]*running{}}, nil
}

// SetupWithManager registers the BMC field indexes (through the Access), the controller of BMCs (those of
// the Access's namespace; a status write is no news) and the Runnable that runs the watches.
func (w *Watcher) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := w.opts.Access.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := mgr.Add(w); err != nil {
		return err
	}
	ns := w.opts.Access.Namespace()
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.BMC{}, builder.WithPredicates(
			predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns }),
			predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(w)
}

// Reconcile makes the watch of one BMC follow its spec: started when it asks for one, restarted when its
// spec changes (a new generation: another address, another interval), stopped when it asks for none or
// is gone. It never waits on a BMC.
func (w *Watcher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &v1alpha1.BMC{}
	if err := w.opts.Client.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, w.set(ctx, req.NamespacedName, nil)
		}
		return ctrl.Result{}, err
	}
	var want *wanted
	if b.Namespace == w.opts.Access.Namespace() && b.Spec.PowerWatch != nil && b.DeletionTimestamp == nil {
		want = &wanted{uid: b.UID, generation: b.Generation, spec: *b.Spec.PowerWatch}
	}
	return ctrl.Result{}, w.set(ctx, req.NamespacedName, want)
}

// set hands a wish to Start and waits until it is applied.
func (w *Watcher) set(ctx context.Context, key types.NamespacedName, want *wanted) error {
	c := command{key: key, want: want, done: make(chan struct{})}
	select {
	case w.commands <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Start runs the watches until ctx ends, then ends every one of them and waits for them. It implements
// manager.Runnable; like the controller, it runs only in the elected leader.
func (w *Watcher) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			all := w.running
			w.running = map[types.NamespacedName]*running{}
			w.mu.Unlock()
			for _, r := range all {
				r.cancel()
			}
			for _, r := range all {
				<-r.done
			}
			Watches.Set(0)
			return nil
		case c := <-w.commands:
			w.apply(ctx, c)
			close(c.done)
		}
	}
}

// apply starts, restarts or stops the watch of c.key. A watch being replaced is ended before the next
// starts: never two watches of one host.
func (w *Watcher) apply(ctx context.Context, c command) {
	w.mu.Lock()
	cur := w.running[c.key]
	if cur != nil && c.want != nil && cur.uid == c.want.uid && cur.generation >= c.want.generation {
		w.mu.Unlock()
		return // already following this spec (or a newer one a stale cache does not show yet)
	}
	delete(w.running, c.key)
	w.mu.Unlock()
	log := ctrl.LoggerFrom(ctx).WithValues("BMC", klog.KRef(c.key.Namespace, c.key.Name))
	if cur != nil {
		cur.cancel()
		<-cur.done
		Watches.Dec()
		if c.want == nil {
			log.Info("Stopped watching the host's power")
		}
	}
	if c.want == nil {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	r := &running{uid: c.want.uid, generation: c.want.generation, cancel: cancel, done: make(chan struct{})}
	w.mu.Lock()
	w.running[c.key] = r
	w.mu.Unlock()
	Watches.Inc()
	log.Info("Watching the host's power", "eventStream", c.want.spec.StreamEnabled(), "pollInterval", c.want.spec.PollInterval())
	w.goroutines.Add(1)
	go func() {
		defer close(r.done)
		defer w.goroutines.Add(-1)
		newWatch(w, c.key, c.want.spec).run(ctrl.LoggerInto(wctx, log))
	}()
}

// watching reports how many hosts are watched (tests).
func (w *Watcher) watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}
