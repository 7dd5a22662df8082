package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalheal/metalheal/internal/testenv"
)

// Defaults of Options.
const (
	// DefaultNodeMonitorGracePeriod is how long a node may go without a heartbeat (lease renewal or status
	// update) before the node lifecycle controller marks it Ready=Unknown. Kubernetes' own default is 50s;
	// ours is short but still twice nodesim's default lease renewal interval (10s, the kubelet's).
	DefaultNodeMonitorGracePeriod = 20 * time.Second
	// DefaultNodeMonitorPeriod is how often the node lifecycle controller looks at every node.
	DefaultNodeMonitorPeriod = time.Second
	// DefaultStartTimeout bounds the start of each component.
	DefaultStartTimeout = 90 * time.Second
	// DefaultControllerManagerQPS and DefaultControllerManagerBurst are the controller-manager's client
	// rate limits (Kubernetes' defaults are 20 and 30: too few to mark thousands of nodes Unknown quickly).
	DefaultControllerManagerQPS   = 100
	DefaultControllerManagerBurst = 200
	// DefaultWatchTerminationGracePeriod is how long kube-apiserver, stopping, waits for the watches still
	// open to drain (--shutdown-watch-termination-grace-period). Kubernetes' default, 0, does not end
	// them, and the API server then waits for its clients: a world whose API server another process
	// watches (a manager reading a workload cluster) would take envtest's whole stop timeout to stop.
	DefaultWatchTerminationGracePeriod = time.Second
	// KeepEnv, when set to a non-empty value in the environment, keeps every world's directory (logs,
	// kubeconfigs) after Stop, as Options.KeepDir does.
	KeepEnv = "METALHEAL_KEEP_WORLD"
)

// DefaultControllers are the controller-manager's controllers a world runs unless Options.Controllers
// says otherwise.
var DefaultControllers = []string{
	"garbage-collector-controller",       // ownerReferences: EMRs owned by Nodes, Leases owned by Nodes, ...
	"node-lifecycle-controller",          // Ready=Unknown after the grace period; unreachable/not-ready taints
	"taint-eviction-controller",          // deletes pods that do not tolerate a NoExecute taint (out-of-service)
	"pod-garbage-collector-controller",   // force-deletes terminating pods on out-of-service, not-Ready nodes
	"namespace-controller",               // namespaces a test deletes really go away
	"serviceaccount-controller",          // the default ServiceAccount in every namespace
	"clusterrole-aggregation-controller", // fills aggregated ClusterRoles (ext-remediation, admin/edit/view)
}

// Options configure a world. The zero value is a good world for tests.
type Options struct {
	// Name tells worlds apart when a test runs several (a management cluster and its workload clusters):
	// it is in the world's directory name (metalheal-world-NAME-*) and the controller-manager's
	// --cluster-name. Default: none, and cluster name "metalheal-world".
	Name string
	// BinDir holds etcd, kube-apiserver and kube-controller-manager. Default: $KUBEBUILDER_ASSETS, else
	// the repository's ./bin.
	BinDir string
	// Dir is where the world's temporary directory is made. Default: os.TempDir().
	Dir string
	// KeepDir keeps the world's directory (logs, kubeconfigs) after Stop. Setting METALHEAL_KEEP_WORLD=1
	// in the environment does the same.
	KeepDir bool
	// SkipCRDs starts without metalheal's CRDs.
	SkipCRDs bool
	// ExtraCRDPaths are more files or directories of CRDs to install (e.g. testenv.ClusterAPICRDs()).
	ExtraCRDPaths []string

	// NodeMonitorGracePeriod: see DefaultNodeMonitorGracePeriod. Keep the node simulator's lease renewal
	// interval well below it (a third or less).
	NodeMonitorGracePeriod time.Duration
	// NodeMonitorPeriod: see DefaultNodeMonitorPeriod.
	NodeMonitorPeriod time.Duration
	// NodeStartupGracePeriod is the grace period of a node that has never posted a Ready condition.
	// Default: three times NodeMonitorGracePeriod.
	NodeStartupGracePeriod time.Duration
	// Controllers replaces DefaultControllers.
	Controllers []string
	// ControllerManagerQPS and ControllerManagerBurst: see DefaultControllerManagerQPS.
	ControllerManagerQPS   int
	ControllerManagerBurst int
	// ControllerManagerArgs are more kube-controller-manager flags ("--name=value"), after ours: a flag
	// given here wins.
	ControllerManagerArgs []string
	// APIServerArgs set kube-apiserver flags (name without dashes → values), replacing envtest's.
	APIServerArgs map[string][]string

	// StartTimeout bounds the start of each component: see DefaultStartTimeout.
	StartTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.NodeMonitorGracePeriod <= 0 {
		o.NodeMonitorGracePeriod = DefaultNodeMonitorGracePeriod
	}
	if o.NodeMonitorPeriod <= 0 {
		o.NodeMonitorPeriod = DefaultNodeMonitorPeriod
	}
	if o.NodeStartupGracePeriod <= 0 {
		o.NodeStartupGracePeriod = 3 * o.NodeMonitorGracePeriod
	}
	if len(o.Controllers) == 0 {
		o.Controllers = DefaultControllers
	}
	if o.ControllerManagerQPS <= 0 {
		o.ControllerManagerQPS = DefaultControllerManagerQPS
	}
	if o.ControllerManagerBurst <= 0 {
		o.ControllerManagerBurst = DefaultControllerManagerBurst
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if os.Getenv(KeepEnv) != "" {
		o.KeepDir = true
	}
	return o
}

// ErrMissingBinary is returned by Start when a control-plane binary is not in the bin directory.
var ErrMissingBinary = errors.New("control-plane binary not found (run `make envtest-bins`)")

// World is a running local control plane. Its methods may be called from any goroutine.
type World struct {
	opts       Options
	dir        string
	binDir     string
	env        *envtest.Environment
	cfg        *rest.Config
	kubeconfig string
	logFiles   []*os.File
	apiLog     *os.File
	// The controller-manager's kubeconfig and log, made once: StartAPIServer starts a new one.
	kcmKubeconfig string
	kcmLog        *os.File

	mu    sync.Mutex
	users int

	// apiMu orders the API server's stops and starts (StopAPIServer, StartAPIServer, Stop), and guards
	// what they change.
	apiMu      sync.Mutex
	kcm        *controllerManager
	apiStopped bool // by StopAPIServer
	stopped    bool // by Stop

	stopOnce sync.Once
	stopErr  error
}

// Start starts etcd, kube-apiserver (with the CRDs installed) and kube-controller-manager, and returns
// when all three are serving. ctx bounds the start only: the world runs until Stop. On error nothing is
// left running.
func Start(ctx context.Context, opts Options) (_ *World, err error) {
	opts = opts.withDefaults()
	binDir, err := findBinaries(opts.BinDir)
	if err != nil {
		return nil, err
	}
	prefix := "metalheal-world-"
	if opts.Name != "" {
		prefix += opts.Name + "-"
	}
	dir, err := os.MkdirTemp(opts.Dir, prefix)
	if err != nil {
		return nil, fmt.Errorf("making the world's directory: %w", err)
	}
	w := &World{opts: opts, dir: dir, binDir: binDir}
	defer func() {
		if err != nil {
			_ = w.Stop()
		}
	}()
	if err := os.Mkdir(w.LogDir(), 0o755); err != nil {
		return nil, fmt.Errorf("making the log directory: %w", err)
	}
	if err := w.startAPIServer(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	kcm, err := w.startControllerManager(ctx, 0)
	if err != nil {
		return nil, err
	}
	w.apiMu.Lock()
	w.kcm = kcm
	w.apiMu.Unlock()
	return w, nil
}

// findBinaries returns the directory holding all three binaries.
func findBinaries(dir string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = testenv.Assets(); err != nil {
			return "", fmt.Errorf("%w: %w", ErrMissingBinary, err)
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("bin directory: %w", err)
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s in %s: %w: %w", b, dir, ErrMissingBinary, err)
		}
	}
	return dir, nil
}

// startAPIServer starts etcd and kube-apiserver through envtest, installs the CRDs and writes the admin
// kubeconfig.
func (w *World) startAPIServer() error {
	var crds []string
	if !w.opts.SkipCRDs {
		crds = append(crds, filepath.Join(testenv.RepoRoot(), "config", "crd", "bases"))
	}
	crds = append(crds, w.opts.ExtraCRDPaths...)

	etcdLog, err := w.logFile("etcd.log")
	if err != nil {
		return err
	}
	apiLog, err := w.logFile("kube-apiserver.log")
	if err != nil {
		return err
	}
	w.apiLog = apiLog
	// The API server's certificates and keys live in the world's directory, not in a directory envtest
	// makes and removes when the API server stops: StartAPIServer serves the same ones again.
	certDir := filepath.Join(w.dir, "kube-apiserver")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		return fmt.Errorf("making the API server's certificate directory: %w", err)
	}
	w.env = &envtest.Environment{
		BinaryAssetsDirectory:    w.binDir,
		CRDDirectoryPaths:        crds,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: w.opts.StartTimeout,
		ControlPlaneStopTimeout:  processStopTimeout,
		UseExistingCluster:       ptr.To(false), // never a cluster from $USE_EXISTING_CLUSTER
	}
	w.env.ControlPlane.Etcd = &envtest.Etcd{Out: etcdLog, Err: etcdLog}
	api := w.env.ControlPlane.GetAPIServer()
	api.Out, api.Err = apiLog, apiLog
	api.CertDir = certDir
	// envtest's binary lookup prefers $KUBEBUILDER_ASSETS over BinaryAssetsDirectory: name them outright.
	api.Path = filepath.Join(w.binDir, "kube-apiserver")
	w.env.ControlPlane.Etcd.Path = filepath.Join(w.binDir, "etcd")
	api.Configure().Set("shutdown-watch-termination-grace-period", DefaultWatchTerminationGracePeriod.String())
	for name, values := range w.opts.APIServerArgs {
		api.Configure().Set(name, values...)
	}
	cfg, err := w.env.Start()
	if err != nil {
		return fmt.Errorf("starting etcd and kube-apiserver (logs in %s): %w", w.LogDir(), err)
	}
	w.cfg = cfg
	w.kubeconfig = filepath.Join(w.dir, "admin.kubeconfig")
	if err := os.WriteFile(w.kubeconfig, w.env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	return nil
}

// logFile creates a log file in the log directory; Stop closes it.
func (w *World) logFile(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(w.LogDir(), name))
	if err != nil {
		return nil, fmt.Errorf("creating a log file: %w", err)
	}
	w.logFiles = append(w.logFiles, f)
	return f, nil
}

// Kubeconfig is the path of a kubeconfig file for the administrator (group system:masters).
func (w *World) Kubeconfig() string { return w.kubeconfig }

// RESTConfig returns a copy of the administrator's REST config (QPS 1000, burst 2000).
func (w *World) RESTConfig() *rest.Config { return rest.CopyConfig(w.cfg) }

// Dir is the world's temporary directory (kubeconfigs, logs). Stop removes it unless KeepDir.
func (w *World) Dir() string { return w.dir }

// LogDir holds etcd.log, kube-apiserver.log and kube-controller-manager.log.
func (w *World) LogDir() string { return filepath.Join(w.dir, "logs") }

// NodeMonitorGracePeriod is how long a node may go without heartbeats before it turns Ready=Unknown.
func (w *World) NodeMonitorGracePeriod() time.Duration { return w.opts.NodeMonitorGracePeriod }

// NodeMonitorPeriod is how often the node lifecycle controller looks at the nodes: a node turns
// Ready=Unknown at most this long after its grace period has passed.
func (w *World) NodeMonitorPeriod() time.Duration { return w.opts.NodeMonitorPeriod }

// ControllerManagerURL is the base URL of the controller-manager's HTTPS endpoint (self-signed
// certificate; /healthz and /metrics need no credentials).
func (w *World) ControllerManagerURL() string {
	w.apiMu.Lock()
	defer w.apiMu.Unlock()
	return w.kcm.url
}

// User is a user of the world's API server, authenticated by a client certificate.
type User struct {
	// Kubeconfig is the path of the user's kubeconfig file.
	Kubeconfig string
	// Config is the user's REST config.
	Config *rest.Config
}

// AddUser provisions a user (authenticated by a client certificate) with the given groups: the manager
// under test, say, with the RBAC of config/rbac rather than system:masters. base supplies QPS, user agent
// and the like (nil for defaults).
func (w *World) AddUser(name string, groups []string, base *rest.Config) (User, error) {
	u, err := w.env.AddUser(envtest.User{Name: name, Groups: groups}, base)
	if err != nil {
		return User{}, fmt.Errorf("adding user %q: %w", name, err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		return User{}, fmt.Errorf("kubeconfig of user %q: %w", name, err)
	}
	w.mu.Lock()
	w.users++
	path := filepath.Join(w.dir, fmt.Sprintf("user-%d.kubeconfig", w.users))
	w.mu.Unlock()
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return User{}, fmt.Errorf("writing the kubeconfig of user %q: %w", name, err)
	}
	return User{Kubeconfig: path, Config: rest.CopyConfig(u.Config())}, nil
}

// Stop stops the controller-manager, kube-apiserver and etcd, and removes the world's directory unless
// it is to be kept. It may be called more than once.
func (w *World) Stop() error {
	w.stopOnce.Do(func() {
		var errs []error
		w.apiMu.Lock()
		w.stopped = true
		if w.kcm != nil {
			errs = append(errs, w.kcm.stop())
		}
		if w.env != nil {
			if err := w.env.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
			}
		}
		w.apiMu.Unlock()
		for _, f := range slices.Backward(w.logFiles) {
			_ = f.Close()
		}
		if !w.opts.KeepDir && w.dir != "" {
			if err := os.RemoveAll(w.dir); err != nil {
				errs = append(errs, fmt.Errorf("removing the world's directory: %w", err))
			}
		}
		w.stopErr = errors.Join(errs...)
	})
	return w.stopErr
}

// EtcdURL is etcd's client address (plain HTTP on localhost); its /metrics is served there too.
func (w *World) EtcdURL() string { return w.env.ControlPlane.Etcd.URL.String() }
