package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/internal/nodecache"
	"github.com/metalheal/metalheal/pkg/leases"
)

// The Cluster API convention for reaching a workload cluster: a Secret <clusterName>-kubeconfig in the
// Cluster's namespace whose key "value" holds a kubeconfig.
const (
	KubeconfigSecretSuffix = "-kubeconfig"
	KubeconfigSecretKey    = "value"
)

// Defaults of Options.
const (
	DefaultSyncTimeout = 10 * time.Second
	DefaultRecheck     = time.Minute
	DefaultCallTimeout = 10 * time.Second
)

// Options tune Clusters.
type Options struct {
	// Clock stamps how long a missing Secret is remembered.
	Clock clock.Clock
	// SyncTimeout bounds the wait for a new connection's first list of Nodes. Default DefaultSyncTimeout.
	SyncTimeout time.Duration
	// Recheck is how long a missing Secret is remembered before it is looked up again. Default
	// DefaultRecheck.
	Recheck time.Duration
	// LeaseNamespace is where the node leases live in every workload cluster (the manager's
	// --lease-namespace): the only namespace whose Leases the connection caches. Default
	// leases.DefaultNamespace.
	LeaseNamespace string
	// CallTimeout bounds each call of a connection's Client: a workload cluster that accepts connections
	// but does not answer fails the call, and drops the connection, within it. Default DefaultCallTimeout.
	CallTimeout time.Duration
	// QPS and Burst pace a connection's requests on the client's side, as the manager's --kube-api-qps and
	// --kube-api-burst pace its own: QPS negative, no client-side limit (the workload API server's
	// Priority and Fairness paces the manager); zero, client-go's default of 5 a second in bursts of 10,
	// which held a burst of 50 failing Machines' lease and request writes for up to 18 s.
	QPS   float32
	Burst int
}

// Clusters keeps one connection per workload cluster. It is safe for concurrent use; share one between
// every controller of a manager. It is a manager.Runnable: the connections stop with the manager.
type Clusters struct {
	opts Options

	mu        sync.Mutex
	clusters  map[types.NamespacedName]*Cluster
	noSecret  map[types.NamespacedName]time.Time
	onConnect []func(types.NamespacedName, *Cluster) error
}

// Cluster is one workload cluster's connection.
type Cluster struct {
	key            types.NamespacedName
	leaseNamespace string
	callTimeout    time.Duration
	cache          cache.Cache
	client         client.Client
	cancel         context.CancelFunc
	// broken is set, and brokenCh closed, when a watch fails for a reason other than the routine expiry of
	// a watch, or a call goes unanswered (markBroken).
	broken   atomic.Bool
	brokenCh chan struct{}
	// done is closed when the connection is stopped.
	done <-chan struct{}
	// watchErr is the last error a watch failed with, for the error of a connection that never synced.
	watchErr atomic.Pointer[error]
}

// Nodes reads the workload cluster's Nodes from the cache (slimmed: no images, volumes, managed fields).
func (c *Cluster) Nodes() client.Reader { return c.cache }

// Leases reads the workload cluster's node leases from the cache: only those of the lease namespace
// (LeaseNamespace), slimmed (slimLease). A read of a Lease of another namespace fails.
func (c *Cluster) Leases() client.Reader { return c.cache }

// LeaseNamespace is the namespace whose Leases the cache holds.
func (c *Cluster) LeaseNamespace() string { return c.leaseNamespace }

// Cache is the cache of the Nodes and the node leases, for a controller to watch them.
func (c *Cluster) Cache() cache.Cache { return c.cache }

// Client reads and writes the workload cluster straight through its API server (Nodes, Leases): for
// writes, and for the reads that must not come from a cache. A call the API server does not answer
// within Options.CallTimeout (no API status: it is down, unreachable or hung) fails with an *Error and
// drops the connection, so that the next Get connects again rather than reading a cache that no longer
// follows the cluster.
func (c *Cluster) Client() client.Client { return c.client }

// Broken is closed when the connection is found broken: a watch failed, or a call went unanswered. The
// next Get connects again; a controller brings the cluster's checks then, which would otherwise hear of the
// outage only at their next event or resync.
func (c *Cluster) Broken() <-chan struct{} { return c.brokenCh }

// Done is closed when the connection is stopped (Forget, StopAll, or a Get that replaced it).
func (c *Cluster) Done() <-chan struct{} { return c.done }

// markBroken marks the connection broken and reports whether that is news.
func (c *Cluster) markBroken() bool {
	if c.broken.Swap(true) {
		return false
	}
	close(c.brokenCh)
	return true
}

// guard turns a call's error that the API server did not answer into an *Error, and marks the
// connection broken. A call its caller gave up on (ctx ended) says nothing of the cluster.
func (c *Cluster) guard(ctx context.Context, err error) error {
	var status apierrors.APIStatus
	if err == nil || errors.As(err, &status) || ctx.Err() != nil {
		return err
	}
	c.markBroken()
	return &Error{Cluster: c.key, Err: err}
}

// guarded wraps a client's calls in guard, each bounded by the call timeout.
func (c *Cluster) guarded(direct client.WithWatch) client.Client {
	bounded := func(ctx context.Context, call func(context.Context) error) error {
		callCtx, cancel := context.WithTimeout(ctx, c.callTimeout)
		defer cancel()
		return c.guard(ctx, call(callCtx))
	}
	return interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, w client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return bounded(ctx, func(ctx context.Context) error { return w.Get(ctx, key, obj, opts...) })
		},
		List: func(ctx context.Context, w client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return bounded(ctx, func(ctx context.Context) error { return w.List(ctx, list, opts...) })
		},
		Create: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return bounded(ctx, func(ctx context.Context) error { return w.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return bounded(ctx, func(ctx context.Context) error { return w.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, w client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return bounded(ctx, func(ctx context.Context) error { return w.Patch(ctx, obj, patch, opts...) })
		},
		Delete: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return bounded(ctx, func(ctx context.Context) error { return w.Delete(ctx, obj, opts...) })
		},
	})
}

// New returns an empty set of connections.
func New(opts Options) *Clusters {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	if opts.Recheck <= 0 {
		opts.Recheck = DefaultRecheck
	}
	if opts.LeaseNamespace == "" {
		opts.LeaseNamespace = leases.DefaultNamespace
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	return &Clusters{opts: opts, clusters: map[types.NamespacedName]*Cluster{}, noSecret: map[types.NamespacedName]time.Time{}}
}

// LeaseNamespace is the namespace whose node leases the connections cache (Options.LeaseNamespace).
func (r *Clusters) LeaseNamespace() string { return r.opts.LeaseNamespace }

// OnConnect registers fn, called with each new connection (a controller watches its Nodes). Register
// before the first Get.
func (r *Clusters) OnConnect(fn func(key types.NamespacedName, c *Cluster) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onConnect = append(r.onConnect, fn)
}

// Get returns the workload cluster's connection when the Cluster follows the kubeconfig Secret
// convention, and remote=false when it does not (the Secret or its "value" key is absent): its Nodes are
// then the management cluster's. The Secret is read with apiReader (uncached), only when there is no
// connection yet; a missing Secret is remembered for Options.Recheck. A Secret the manager may not read
// is a *ForbiddenError, a cluster that cannot be reached an *Error.
func (r *Clusters) Get(ctx context.Context, apiReader client.Reader, key types.NamespacedName) (_ *Cluster, remote bool, _ error) {
	r.mu.Lock()
	if c := r.clusters[key]; c != nil {
		if !c.broken.Load() {
			r.mu.Unlock()
			return c, true, nil
		}
		delete(r.clusters, key)
		c.cancel()
	}
	if until, ok := r.noSecret[key]; ok && r.opts.Clock.Now().Before(until) {
		r.mu.Unlock()
		return nil, false, nil
	}
	r.mu.Unlock()

	secretName := key.Name + KubeconfigSecretSuffix
	secret := &corev1.Secret{}
	if err := apiReader.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: secretName}, secret); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			r.rememberNoSecret(key)
			return nil, false, nil
		case apierrors.IsForbidden(err):
			return nil, false, &ForbiddenError{Cluster: key, Retry: r.opts.Clock.Now().Add(r.opts.Recheck)}
		}
		return nil, false, &Error{Cluster: key, Err: fmt.Errorf("reading Secret %s: %w", secretName, err)}
	}
	data := secret.Data[KubeconfigSecretKey]
	if len(data) == 0 {
		r.rememberNoSecret(key)
		return nil, false, nil
	}
	cfg, err := restConfig(data)
	if err != nil {
		return nil, false, &Error{Cluster: key, Err: fmt.Errorf("secret %s: %w", secretName, err)}
	}
	cfg.QPS, cfg.Burst = r.opts.QPS, r.opts.Burst
	c, err := r.connect(ctx, key, cfg)
	if err != nil {
		return nil, false, &Error{Cluster: key, Err: err}
	}

	r.mu.Lock()
	if other := r.clusters[key]; other != nil && !other.broken.Load() {
		// Another worker connected meanwhile: keep one.
		r.mu.Unlock()
		c.cancel()
		return other, true, nil
	}
	r.clusters[key] = c
	delete(r.noSecret, key)
	subscribers := r.onConnect
	r.mu.Unlock()
	for _, fn := range subscribers {
		if err := fn(key, c); err != nil {
			return nil, false, &Error{Cluster: key, Err: fmt.Errorf("watching its Nodes and node leases: %w", err)}
		}
	}
	ctrl.LoggerFrom(ctx).Info("Connected to workload cluster", "cluster", key)
	return c, true, nil
}

func (r *Clusters) rememberNoSecret(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noSecret[key] = r.opts.Clock.Now().Add(r.opts.Recheck)
}

// connect starts the cache of the workload cluster's Nodes and node leases and waits (at most
// Options.SyncTimeout) for their first lists. The cache runs until Forget or StopAll cancels it: its
// context is detached from ctx, which only lives as long as one reconcile.
func (r *Clusters) connect(ctx context.Context, key types.NamespacedName, cfg *rest.Config) (*Cluster, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", key)
	c := &Cluster{key: key, leaseNamespace: r.opts.LeaseNamespace, callTimeout: r.opts.CallTimeout, brokenCh: make(chan struct{})}
	objects, err := cache.New(cfg, cache.Options{
		Scheme: scheme,
		Mapper: restMapper,
		ByObject: map[client.Object]cache.ByObject{
			// The same transform as the manager's own Node cache: a workload cluster's admin controls its
			// Nodes' size, and the manager is shared by every workload cluster.
			&corev1.Node{}: {Transform: nodecache.Slim},
			// Only the lease namespace, as the manager's own cache: not the kubelets' heartbeats in
			// kube-node-lease.
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{r.opts.LeaseNamespace: {}}, Transform: slimLease},
		},
		DefaultWatchErrorHandler: func(_ context.Context, _ *toolscache.Reflector, err error) {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return // a watch ending or expiring is routine
			}
			c.watchErr.Store(&err)
			if c.markBroken() {
				log.Info("Lost a watch of the workload cluster; reconnecting at the next use", "error", err.Error())
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating a cache: %w", err)
	}
	direct, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme, Mapper: restMapper})
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cache, c.client, c.cancel, c.done = objects, c.guarded(direct), cancel, runCtx.Done()
	go func() {
		if err := objects.Start(runCtx); err != nil {
			log.Error(err, "Workload cluster cache stopped")
		}
	}()
	waitCtx, cancelWait := context.WithTimeout(ctx, r.opts.SyncTimeout)
	defer cancelWait()
	notListed := func(err error) error {
		cancel()
		if last := c.watchErr.Load(); last != nil {
			err = *last // the reason the lists fail (forbidden, unreachable) says more than the timeout
		}
		if err != nil {
			return fmt.Errorf("nodes and node leases (namespace %s) not listed within %s: %w", r.opts.LeaseNamespace, r.opts.SyncTimeout, err)
		}
		return fmt.Errorf("nodes and node leases (namespace %s) not listed within %s", r.opts.LeaseNamespace, r.opts.SyncTimeout)
	}
	for _, obj := range []client.Object{&corev1.Node{}, &coordinationv1.Lease{}} {
		if _, err := objects.GetInformer(waitCtx, obj); err != nil {
			return nil, notListed(err)
		}
	}
	if !objects.WaitForCacheSync(waitCtx) {
		return nil, notListed(nil)
	}
	return c, nil
}

// slimLease is the cache transform of node leases: a lease is read for its holder and its times only,
// so whoever may write Leases in a workload cluster's lease namespace cannot grow the shared manager with
// labels, annotations (but the holder's namespace, leases.AnnotationHolderNamespace) or managed fields.
func slimLease(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil // a tombstone: the informer removes it as it is
	}
	l.ManagedFields, l.Labels = nil, nil
	if ns, ok := l.Annotations[leases.AnnotationHolderNamespace]; ok {
		l.Annotations = map[string]string{leases.AnnotationHolderNamespace: ns}
	} else {
		l.Annotations = nil
	}
	return l, nil
}

// Forget drops the workload cluster's connection, if any: the Cluster went away.
func (r *Clusters) Forget(key types.NamespacedName) {
	r.mu.Lock()
	c := r.clusters[key]
	delete(r.clusters, key)
	delete(r.noSecret, key)
	r.mu.Unlock()
	if c != nil {
		c.cancel()
	}
}

// Connected reports whether a connection to the workload cluster is held.
func (r *Clusters) Connected(key types.NamespacedName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clusters[key] != nil
}

// StopAll stops every connection.
func (r *Clusters) StopAll() {
	r.mu.Lock()
	all := r.clusters
	r.clusters = map[types.NamespacedName]*Cluster{}
	r.mu.Unlock()
	for _, c := range all {
		c.cancel()
	}
}

// Start implements manager.Runnable: the connections are stopped when the manager stops.
func (r *Clusters) Start(ctx context.Context) error {
	<-ctx.Done()
	r.StopAll()
	return nil
}

// NeedLeaderElection: the connections serve whichever controllers run, leader or not.
func (r *Clusters) NeedLeaderElection() bool { return false }

// scheme knows the kinds read and written in workload clusters: Nodes and node leases.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := coordinationv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// restMapper maps the only kinds a connection reads and writes (Nodes, node leases and the lease
// namespace) without asking the workload cluster: a discovery request cannot be bounded by a caller's
// context, so a cluster that stops answering would hold the first call of a kind for ever.
var restMapper = func() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, k := range []struct {
		gvk   schema.GroupVersionKind
		scope meta.RESTScope
	}{
		{corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot},
		{corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot},
		{coordinationv1.SchemeGroupVersion.WithKind("Lease"), meta.RESTScopeNamespace},
	} {
		m.Add(k.gvk, k.scope)
		m.Add(k.gvk.GroupVersion().WithKind(k.gvk.Kind+"List"), k.scope)
	}
	return m
}()

// ErrUnsafeKubeconfig is returned for a kubeconfig that would make the manager run a command or read a
// local file (its own service account token, for one): a Secret writer must not gain that.
var ErrUnsafeKubeconfig = errors.New("kubeconfig refers to local files or credential plugins; only inline credentials are accepted")

// restConfig parses a kubeconfig from a Secret. It never includes the kubeconfig's content in an error.
func restConfig(data []byte) (*rest.Config, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, errors.New("value is not a valid kubeconfig")
	}
	for _, a := range cfg.AuthInfos {
		if a.Exec != nil || a.AuthProvider != nil || a.ClientCertificate != "" || a.ClientKey != "" || a.TokenFile != "" {
			return nil, ErrUnsafeKubeconfig
		}
	}
	for _, c := range cfg.Clusters {
		if c.CertificateAuthority != "" {
			return nil, ErrUnsafeKubeconfig
		}
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, errors.New("value is not a usable kubeconfig (no current context, cluster or user)")
	}
	rc.UserAgent = "metalheal"
	return rc, nil
}

// Error reports that a workload cluster could not be reached through its kubeconfig Secret. It never
// includes the kubeconfig.
type Error struct {
	// Cluster is the Cluster's namespace and name.
	Cluster types.NamespacedName
	// Err is the cause.
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("workload cluster %s: %v", e.Cluster, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

// ForbiddenError says that the manager may not read a Cluster's kubeconfig Secret: its namespace is not
// among those the manager was given (--cluster-namespaces and the kubeconfig-readers component). The
// message names the Role that would let it.
type ForbiddenError struct {
	Cluster types.NamespacedName
	// NotListed: the namespace is not in --cluster-namespaces (nothing was asked of the API server).
	NotListed bool
	// Retry is when to look again.
	Retry time.Time
}

func (e *ForbiddenError) Error() string {
	why := "may not read"
	if e.NotListed {
		why = "does not read (its namespace is not in --cluster-namespaces)"
	}
	return fmt.Sprintf("the manager %s Secret %s/%s%s (the Cluster's kubeconfig): it needs a Role in namespace %s "+
		"granting get on secrets (apiGroups [\"\"], resources [secrets], verbs [get]) bound to its ServiceAccount; "+
		"add %s to --cluster-namespaces and to the kubeconfig-readers component (config/components/kubeconfig-readers), "+
		"or to the Helm chart's clusterAPI.clusterNamespaces",
		why, e.Cluster.Namespace, e.Cluster.Name, KubeconfigSecretSuffix, e.Cluster.Namespace, e.Cluster.Namespace)
}
