package mhc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/nodecache"
)

// The Cluster API convention for reaching a workload cluster: a Secret <clusterName>-kubeconfig in the
// Cluster's namespace whose key "value" holds a kubeconfig.
const (
	kubeconfigSecretSuffix = "-kubeconfig"
	kubeconfigSecretKey    = "value"
)

// remoteClusters keeps one Node cache per workload cluster, built from the cluster's kubeconfig Secret
// and dropped when the Cluster goes away (or its connection breaks, so that a rotated kubeconfig is
// picked up). Only Nodes are cached there.
type remoteClusters struct {
	clock clock.Clock
	// syncTimeout bounds the wait for a new cache's first list of Nodes.
	syncTimeout time.Duration
	// recheck is how long a missing Secret is remembered before it is looked up again.
	recheck time.Duration
	// onConnect, when set, is called with each new cache (the controller watches its Nodes).
	onConnect func(key types.NamespacedName, c cache.Cache) error

	mu       sync.Mutex
	clusters map[types.NamespacedName]*remoteCluster
	noSecret map[types.NamespacedName]time.Time
}

// remoteCluster is one workload cluster's Node cache.
type remoteCluster struct {
	cache  cache.Cache
	cancel context.CancelFunc
	// broken is set when a watch fails for a reason other than the routine expiry of a watch.
	broken atomic.Bool
}

func newRemoteClusters(clk clock.Clock, syncTimeout, recheck time.Duration) *remoteClusters {
	return &remoteClusters{
		clock: clk, syncTimeout: syncTimeout, recheck: recheck,
		clusters: map[types.NamespacedName]*remoteCluster{},
		noSecret: map[types.NamespacedName]time.Time{},
	}
}

// nodeReader returns a reader of the workload cluster's Nodes when the cluster follows the kubeconfig
// Secret convention, and remote=false when it does not (the Secret or its "value" key is absent): the
// Nodes are then read from the management cluster. The Secret is read with apiReader (uncached), only
// when there is no cache yet; a missing Secret is remembered for r.recheck.
func (r *remoteClusters) nodeReader(ctx context.Context, apiReader client.Reader, cluster types.NamespacedName) (reader client.Reader, remote bool, err error) {
	r.mu.Lock()
	if rc := r.clusters[cluster]; rc != nil {
		if !rc.broken.Load() {
			r.mu.Unlock()
			return rc.cache, true, nil
		}
		delete(r.clusters, cluster)
		rc.cancel()
	}
	if until, ok := r.noSecret[cluster]; ok && r.clock.Now().Before(until) {
		r.mu.Unlock()
		return nil, false, nil
	}
	r.mu.Unlock()

	secretName := cluster.Name + kubeconfigSecretSuffix
	secret := &corev1.Secret{}
	if err := apiReader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: secretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			r.rememberNoSecret(cluster)
			return nil, false, nil
		}
		if apierrors.IsForbidden(err) {
			return nil, false, &kubeconfigForbiddenError{cluster: cluster, retry: r.clock.Now().Add(r.recheck)}
		}
		return nil, false, &WorkloadClusterError{Cluster: cluster, Err: fmt.Errorf("reading Secret %s: %w", secretName, err)}
	}
	data := secret.Data[kubeconfigSecretKey]
	if len(data) == 0 {
		r.rememberNoSecret(cluster)
		return nil, false, nil
	}
	cfg, err := restConfigFromKubeconfig(data)
	if err != nil {
		return nil, false, &WorkloadClusterError{Cluster: cluster, Err: fmt.Errorf("secret %s: %w", secretName, err)}
	}
	rc, err := r.connect(ctx, cluster, cfg)
	if err != nil {
		return nil, false, &WorkloadClusterError{Cluster: cluster, Err: err}
	}

	r.mu.Lock()
	if other := r.clusters[cluster]; other != nil && !other.broken.Load() {
		// Another worker connected meanwhile: keep one.
		r.mu.Unlock()
		rc.cancel()
		return other.cache, true, nil
	}
	r.clusters[cluster] = rc
	delete(r.noSecret, cluster)
	r.mu.Unlock()
	if r.onConnect != nil {
		if err := r.onConnect(cluster, rc.cache); err != nil {
			return nil, false, &WorkloadClusterError{Cluster: cluster, Err: fmt.Errorf("watching Nodes: %w", err)}
		}
	}
	ctrl.LoggerFrom(ctx).Info("Connected to workload cluster", "cluster", cluster)
	return rc.cache, true, nil
}

func (r *remoteClusters) rememberNoSecret(cluster types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noSecret[cluster] = r.clock.Now().Add(r.recheck)
}

// connect starts a Node cache for the workload cluster and waits (at most r.syncTimeout) for its first
// list. The cache runs until forget or stopAll cancels it: its context is detached from ctx, which only
// lives as long as one reconcile.
func (r *remoteClusters) connect(ctx context.Context, cluster types.NamespacedName, cfg *rest.Config) (*remoteCluster, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", cluster)
	rc := &remoteCluster{}
	c, err := cache.New(cfg, cache.Options{
		Scheme: remoteScheme,
		// The same transform as the manager's own Node cache: a workload cluster's admin controls its
		// Nodes' size, and the manager is shared by every workload cluster.
		ByObject: map[client.Object]cache.ByObject{&corev1.Node{}: {Transform: nodecache.Slim}},
		DefaultWatchErrorHandler: func(_ context.Context, _ *toolscache.Reflector, err error) {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return // a watch ending or expiring is routine
			}
			if !rc.broken.Swap(true) {
				log.Info("Lost the workload cluster's Node watch; reconnecting at the next check", "error", err.Error())
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating a Node cache: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rc.cache, rc.cancel = c, cancel
	go func() {
		if err := c.Start(runCtx); err != nil {
			log.Error(err, "Workload cluster Node cache stopped")
		}
	}()
	waitCtx, cancelWait := context.WithTimeout(ctx, r.syncTimeout)
	defer cancelWait()
	if _, err := c.GetInformer(waitCtx, &corev1.Node{}); err != nil {
		cancel()
		return nil, fmt.Errorf("nodes not listed within %s: %w", r.syncTimeout, err)
	}
	if !c.WaitForCacheSync(waitCtx) {
		cancel()
		return nil, fmt.Errorf("nodes not listed within %s", r.syncTimeout)
	}
	return rc, nil
}

// forget drops the workload cluster's cache, if any: the Cluster went away.
func (r *remoteClusters) forget(cluster types.NamespacedName) {
	r.mu.Lock()
	rc := r.clusters[cluster]
	delete(r.clusters, cluster)
	delete(r.noSecret, cluster)
	r.mu.Unlock()
	if rc != nil {
		rc.cancel()
	}
}

// connected reports whether a cache for the workload cluster is held (for tests and metrics).
func (r *remoteClusters) connected(cluster types.NamespacedName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clusters[cluster] != nil
}

// stopAll stops every cache.
func (r *remoteClusters) stopAll() {
	r.mu.Lock()
	all := r.clusters
	r.clusters = map[types.NamespacedName]*remoteCluster{}
	r.mu.Unlock()
	for _, rc := range all {
		rc.cancel()
	}
}

// Start implements manager.Runnable: the caches are stopped when the manager stops.
func (r *remoteClusters) Start(ctx context.Context) error {
	<-ctx.Done()
	r.stopAll()
	return nil
}

// remoteScheme knows the only kind read from workload clusters.
var remoteScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// ErrUnsafeKubeconfig is returned for a kubeconfig that would make the manager run a command or read a
// local file (its own service account token, for one): a Secret writer must not gain that.
var ErrUnsafeKubeconfig = errors.New("kubeconfig refers to local files or credential plugins; only inline credentials are accepted")

// restConfigFromKubeconfig parses a kubeconfig from a Secret. It never includes the kubeconfig's content
// in an error.
func restConfigFromKubeconfig(data []byte) (*rest.Config, error) {
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
	rc.UserAgent = "metalheal-machinehealthcheck"
	return rc, nil
}

// kubeconfigForbiddenError says that the manager may not read a Cluster's kubeconfig Secret: its
// namespace is not among those the manager was given (--cluster-namespaces and the kubeconfig-readers
// component). The message names the Role that would let it.
type kubeconfigForbiddenError struct {
	cluster types.NamespacedName
	// notListed: the namespace is not in --cluster-namespaces (nothing was asked of the API server).
	notListed bool
	retry     time.Time
}

func (e *kubeconfigForbiddenError) Error() string {
	why := "may not read"
	if e.notListed {
		why = "does not read (its namespace is not in --cluster-namespaces)"
	}
	return fmt.Sprintf("the manager %s Secret %s/%s%s (the Cluster's kubeconfig): it needs a Role in namespace %s "+
		"granting get on secrets (apiGroups [\"\"], resources [secrets], verbs [get]) bound to its ServiceAccount; "+
		"add %s to --cluster-namespaces and to the kubeconfig-readers component (config/components/kubeconfig-readers)",
		why, e.cluster.Namespace, e.cluster.Name, kubeconfigSecretSuffix, e.cluster.Namespace, e.cluster.Namespace)
}

// kubeconfigForbidden records on a check that its Cluster's kubeconfig cannot be read: Disabled=True with
// reason KubeconfigNotReadable and the Role needed; looked at again after the kubeconfig recheck interval.
func (r *Reconciler) kubeconfigForbidden(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, cause *kubeconfigForbiddenError) (ctrl.Result, error) {
	return r.disableFor(ctx, mhc, v1alpha1.ReasonKubeconfigNotReadable, cause.Error(), cause.retry)
}
