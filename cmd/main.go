// Command manager runs metalheal's controllers: the health checkers (MachineHealthCheck,
// NodeHealthCheck), the power-cycle remediator and the BMC inventory. Each is enabled by flag.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/clock"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	remediationv1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/controllers/mhc"
	"github.com/metalheal/metalheal/controllers/nhc"
	"github.com/metalheal/metalheal/controllers/powercycle"
	"github.com/metalheal/metalheal/controllers/powercycle/bmcinventory"
	"github.com/metalheal/metalheal/controllers/powercycle/powerwatch"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/internal/logging"
	"github.com/metalheal/metalheal/internal/metrics"
	"github.com/metalheal/metalheal/internal/metricsauth"
	"github.com/metalheal/metalheal/internal/nodecache"
	"github.com/metalheal/metalheal/internal/workload"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// config is everything the flags set.
type config struct {
	controllers         string
	metricsAddr         string
	metricsSecure       bool
	probeAddr           string
	pprofAddr           string
	leaderElect         bool
	leaderElectionID    string
	leaderElection      leaderElectionTiming
	namespace           string
	leaseNamespace      string
	bmcCheckInterval    time.Duration
	maxConcurrentCycles int
	maxConcurrentChecks int
	resyncPeriod        time.Duration
	leaseDuration       time.Duration
	bmcCallTimeout      time.Duration
	powerPollInterval   time.Duration
	nodeName            string
	clientQPS           float64
	clientBurst         int

	// remediationNamespaces lists the namespaces, besides namespace, whose PowerCycleRemediations the
	// remediator acts on (see parseNamespaces).
	remediationNamespaces string
	// clusterNamespaces lists the namespaces where Cluster API Clusters live: the only ones whose
	// <cluster>-kubeconfig Secrets the MachineHealthCheck reads (see parseNamespaces).
	clusterNamespaces string
	// clusterAPIRecheckInterval is how often the served Cluster API version is looked up again.
	clusterAPIRecheckInterval time.Duration
}

// controllerNames are the controllers the manager can run; all are on by default.
var controllerNames = []string{"machinehealthcheck", "nodehealthcheck", "powercycle", "bmc", "powerwatch"}

func main() {
	var cfg config
	flag.StringVar(&cfg.controllers, "controllers", strings.Join(controllerNames, ","),
		"Comma-separated controllers to run: "+strings.Join(controllerNames, ", ")+".")
	flag.StringVar(&cfg.metricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.BoolVar(&cfg.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS to callers the API server authenticates (a bearer token) and authorizes (get on the /metrics URL); false serves plain HTTP to anyone, for local development and benchmarks only.")
	flag.StringVar(&cfg.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	flag.StringVar(&cfg.pprofAddr, "pprof-bind-address", "", "Address of the Go profiler's /debug/pprof endpoints (e.g. 127.0.0.1:6060); empty disables it.")
	flag.BoolVar(&cfg.leaderElect, "leader-elect", false, "Elect a leader so that only one of several replicas acts.")
	flag.StringVar(&cfg.leaderElectionID, "leader-election-id", "metalheal.remediation.metalheal.io", "Name of the leader election Lease.")
	flag.DurationVar(&cfg.leaderElection.leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long standbys wait after the leader's last renewal before taking over when the leader dies without releasing its lease (a crash); a leader stopped gracefully releases it at once.")
	flag.DurationVar(&cfg.leaderElection.renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps trying to renew its lease before it gives up leadership and exits; shorter than --leader-elect-lease-duration.")
	flag.DurationVar(&cfg.leaderElection.retryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often the leader renews its lease and standbys try to take it.")
	flag.DurationVar(&cfg.leaderElection.gracefulShutdown, "graceful-shutdown-timeout", 5*time.Second,
		"How long the manager waits for its controllers to stop on SIGTERM before it releases its leader election lease and exits; keep it below the pod's terminationGracePeriodSeconds, or the kubelet kills the manager before the release and the standby waits out the lease.")
	flag.StringVar(&cfg.namespace, "namespace", os.Getenv("POD_NAMESPACE"),
		"Namespace of the BMC objects and their credential Secrets (the manager reads Secrets only here). Defaults to $POD_NAMESPACE.")
	flag.StringVar(&cfg.leaseNamespace, "lease-namespace", "medik8s-leases", "Namespace of the node maintenance leases (shared with medik8s).")
	flag.DurationVar(&cfg.bmcCheckInterval, "bmc-check-interval", 5*time.Minute, "How often every BMC is checked for reachability and credentials; the checks are spread evenly over the interval.")
	flag.IntVar(&cfg.maxConcurrentCycles, "max-concurrent-remediations", 200, "How many remediations are worked on at once (a worker is busy only during one step's BMC call and writes, never while a host changes state).")
	flag.IntVar(&cfg.maxConcurrentChecks, "max-concurrent-bmc-checks", 50, "How many BMCs are checked at once (slow or unreachable BMCs each hold one until their check times out).")
	flag.DurationVar(&cfg.leaseDuration, "lease-duration", 10*time.Minute, "Duration of the node maintenance leases the remediator and the health checks take (renewed at half-time while they act).")
	flag.DurationVar(&cfg.bmcCallTimeout, "bmc-call-timeout", 10*time.Second, "Bound on one BMC call by the remediator.")
	flag.DurationVar(&cfg.powerPollInterval, "power-poll-interval", 5*time.Second, "How often the remediator reads the power state while waiting for a power transition.")
	flag.StringVar(&cfg.nodeName, "node-name", os.Getenv("NODE_NAME"), "The node the manager runs on (defaults to $NODE_NAME): powering it off is recorded durably first and warned about.")
	flag.StringVar(&cfg.remediationNamespaces, "remediation-namespaces", "",
		"Comma-separated namespaces whose PowerCycleRemediations the remediator acts on, besides the manager's own (--namespace), which is always trusted. "+
			"A request anywhere else is refused (Processing=False, NamespaceNotTrusted) and nothing is done for it. Default: the manager's namespace only; "+
			"Cluster API users list their clusters' namespaces.")
	flag.StringVar(&cfg.clusterNamespaces, "cluster-namespaces", "",
		"Comma-separated namespaces where Cluster API Clusters live: the MachineHealthCheck reads a workload cluster's <cluster>-kubeconfig Secret only there "+
			"(grant it with the kubeconfig-readers component: get on Secrets in exactly these namespaces). A check whose Cluster is elsewhere "+
			"reports Disabled=True, KubeconfigNotReadable, naming the Role it needs. Empty: any namespace, as RBAC allows (a check refused reports the same condition).")
	flag.DurationVar(&cfg.clusterAPIRecheckInterval, "cluster-api-recheck-interval", mhc.DefaultClusterAPIRecheckInterval,
		"How often the MachineHealthCheck asks the API server again which Cluster API version it serves: Cluster API installed or upgraded after the manager started is noticed within it.")
	flag.DurationVar(&cfg.resyncPeriod, "resync-period", 10*time.Hour, "Informer resync period: a safety net only, detection never waits for it.")
	flag.Float64Var(&cfg.clientQPS, "kube-api-qps", -1, "Client-side limit on queries per second to the API server; negative disables it, leaving the server's API Priority and Fairness to pace us.")
	flag.IntVar(&cfg.clientBurst, "kube-api-burst", 100, "Burst of queries to the API server, when --kube-api-qps is positive.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(logging.Lazy(zap.New(zap.UseFlagOptions(&zapOpts))))

	if err := run(cfg); err != nil {
		ctrl.Log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}

func run(cfg config) error {
	log := ctrl.Log.WithName("setup")
	enabled, err := parseControllers(cfg.controllers)
	if err != nil {
		return err
	}
	if pct := setGCPercent(os.Getenv); pct > 0 {
		log.V(1).Info("Garbage collector target set ($GOGC unset)", "gcPercent", pct)
	}
	if limit, err := setMemoryLimit(rootFS(), os.Getenv); err != nil {
		log.Error(err, "Not following the container's memory limit")
	} else if limit > 0 {
		log.Info("Following the container's memory limit", "goMemoryLimitBytes", limit)
	}
	if cfg.namespace == "" {
		return errors.New("--namespace (or $POD_NAMESPACE) is required: it is where BMCs and their Secrets live")
	}
	if err := cfg.leaderElection.validate(); err != nil {
		return err
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(remediationv1alpha1.AddToScheme(scheme))
	utilruntime.Must(clusterv1.AddToScheme(scheme))
	utilruntime.Must(clusterv1beta1.AddToScheme(scheme))

	restCfg := ctrl.GetConfigOrDie()
	restCfg.QPS = float32(cfg.clientQPS)
	restCfg.Burst = cfg.clientBurst
	restCfg.UserAgent = "metalheal-manager"

	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOptions(cfg),
		HealthProbeBindAddress:  cfg.probeAddr,
		PprofBindAddress:        cfg.pprofAddr,
		LeaderElection:          cfg.leaderElect,
		LeaderElectionID:        cfg.leaderElectionID,
		LeaderElectionNamespace: cfg.namespace,
		LeaseDuration:           &cfg.leaderElection.leaseDuration,
		RenewDeadline:           &cfg.leaderElection.renewDeadline,
		RetryPeriod:             &cfg.leaderElection.retryPeriod,
		// A leader stopped on purpose (a rollout, a drain) hands its lease back once its controllers have
		// stopped, so the standby takes over within a retry period instead of waiting out the lease. This
		// is safe because nothing runs after Start returns: main exits at once. A leader that loses its
		// lease (renewal failed) makes Start return an error, and main exits too.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &cfg.leaderElection.gracefulShutdown,
		Cache: cache.Options{
			SyncPeriod: &cfg.resyncPeriod,
			// Nothing reads managedFields: dropping them keeps the cache small at thousands of nodes.
			DefaultTransform: cache.TransformStripManagedFields(),
			// Least privilege and a small cache: Secrets and ConfigMaps (BMC credentials, CA bundles) and BMCs
			// only in our namespace, Leases only in the maintenance lease namespace (a cached Get of one lease would
			// otherwise watch every lease in the cluster, including the kubelets' heartbeats).
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Secret{}:        {Namespaces: map[string]cache.Config{cfg.namespace: {}}},
				&corev1.ConfigMap{}:     {Namespaces: map[string]cache.Config{cfg.namespace: {}}},
				&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{cfg.leaseNamespace: {}}},
				&corev1.Node{}:          {Transform: nodecache.Slim},
				// BMCs only in our namespace, where they are read from; the host's record of its remediations
				// is read live by the remediator, once per remediation.
				&remediationv1alpha1.BMC{}: {Namespaces: map[string]cache.Config{cfg.namespace: {}}, Transform: bmcaccess.SlimBMC},
			},
		},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding ready check: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	// One Access for every controller: one driver, and so one BMC session, per BMC.
	access := bmcaccess.New(mgr.GetClient(), cfg.namespace, newBMCRegistry(bmc.NewMetrics(ctrlmetrics.Registry)), bmcaccess.Options{})
	if err := mgr.Add(access); err != nil { // logs every BMC session out on shutdown
		return fmt.Errorf("adding the BMC access layer: %w", err)
	}
	if err := access.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("indexing BMCs: %w", err)
	}

	// One connection per Cluster API workload cluster, for the MachineHealthCheck and the remediator: its
	// Nodes and the node leases of the lease namespace.
	workloads := workload.New(workload.Options{Clock: clock.RealClock{}, LeaseNamespace: cfg.leaseNamespace,
		QPS: restCfg.QPS, Burst: restCfg.Burst})
	if err := mgr.Add(workloads); err != nil {
		return fmt.Errorf("adding the workload cluster connections: %w", err)
	}

	deps := &dependencies{cfg: cfg, clock: clock.RealClock{}, access: access, workloads: workloads,
		controlPlane: &gates.ControlPlaneClaim{}}
	for _, name := range enabled {
		if err := setups[name](ctx, mgr, deps); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", name, err)
		}
		log.Info("Controller enabled", "controller", name)
	}

	log.Info("Starting manager", "namespace", cfg.namespace, "leaseNamespace", cfg.leaseNamespace, "leaderElection", cfg.leaderElect)
	return mgr.Start(ctx)
}

// leaderElectionTiming is how the replicas elect their leader and how the leader steps down.
type leaderElectionTiming struct {
	leaseDuration, renewDeadline, retryPeriod time.Duration
	gracefulShutdown                          time.Duration
}

// validate refuses timings client-go's leader elector would refuse later (at Start, with a less clear
// message): a leader must renew several times within its lease, or a slow renewal loses it.
func (t leaderElectionTiming) validate() error {
	switch {
	case t.retryPeriod <= 0:
		return fmt.Errorf("--leader-elect-retry-period (%s) must be positive", t.retryPeriod)
	case t.gracefulShutdown < 0:
		return fmt.Errorf("--graceful-shutdown-timeout (%s) must not be negative", t.gracefulShutdown)
	case t.leaseDuration <= t.renewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s)", t.leaseDuration, t.renewDeadline)
	case float64(t.renewDeadline) <= leaderelection.JitterFactor*float64(t.retryPeriod):
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be longer than %.1f × --leader-elect-retry-period (%s)",
			t.renewDeadline, leaderelection.JitterFactor, t.retryPeriod)
	}
	return nil
}

// dependencies are what the controllers are built from. Controllers are set up in the order of
// controllerNames, so the remediator is there when the BMC inventory is set up.
type dependencies struct {
	cfg    config
	clock  clock.Clock
	access *bmcaccess.Access
	// workloads reach Cluster API workload clusters (the MachineHealthCheck's Nodes, the remediator's).
	workloads *workload.Clusters
	// controlPlane is the one claim on starting a control-plane remediation, shared by the health checks
	// of both kinds: one control-plane Node at a time across them, even when two decide at once.
	controlPlane *gates.ControlPlaneClaim
	// remediator is the power-cycle remediator, when it runs: the BMC inventory leaves the BMCs of the
	// hosts it is power-cycling to it.
	remediator *powercycle.RemediationReconciler
}

// setups wires each controller into the manager. A controller whose issue has not landed yet is wired
// as a no-op so that flags and deployment stay stable.
var setups = map[string]func(context.Context, ctrl.Manager, *dependencies) error{
	"machinehealthcheck": setupMHC,
	"nodehealthcheck":    setupNHC,
	"powercycle":         setupPowerCycle,
	"bmc":                setupBMC,
	"powerwatch":         setupPowerWatch,
}

// setupPowerWatch follows the power of the hosts whose BMC asks for it (spec.powerWatch), sharing the
// drivers with the remediator and the BMC inventory, and leaving the hosts the remediator is at work on to
// it.
func setupPowerWatch(ctx context.Context, mgr ctrl.Manager, deps *dependencies) error {
	opts := powerwatch.Options{
		Client:           mgr.GetClient(),
		APIReader:        mgr.GetAPIReader(),
		Access:           deps.access,
		Recorder:         mgr.GetEventRecorder(powerwatch.ControllerName),
		Clock:            deps.clock,
		WorkloadClusters: deps.workloads,
		ReadTimeout:      deps.cfg.bmcCallTimeout,
	}
	if deps.remediator != nil {
		opts.Remediations = deps.remediator
	}
	w, err := powerwatch.New(opts)
	if err != nil {
		return err
	}
	return w.SetupWithManager(ctx, mgr)
}

func setupBMC(ctx context.Context, mgr ctrl.Manager, deps *dependencies) error {
	r := &bmcinventory.Reconciler{
		Client:   mgr.GetClient(),
		Access:   deps.access,
		Recorder: mgr.GetEventRecorder(bmcinventory.ControllerName),
		Clock:    deps.clock,
		Options: bmcinventory.Options{
			Interval:                deps.cfg.bmcCheckInterval,
			MaxConcurrentReconciles: deps.cfg.maxConcurrentChecks,
		},
	}
	if deps.remediator != nil {
		r.Remediations = deps.remediator
	}
	ctrlmetrics.Registry.MustRegister(bmcinventory.NewStateCollector(mgr.GetCache(), deps.cfg.namespace, mgr.Elected()))
	return r.SetupWithManager(ctx, mgr)
}

// parseControllers returns the controllers s names, in the order of controllerNames (the order they are
// set up in).
func parseControllers(s string) ([]string, error) {
	var named []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(controllerNames, name) {
			return nil, fmt.Errorf("unknown controller %q in --controllers; known: %s", name, strings.Join(controllerNames, ", "))
		}
		named = append(named, name)
	}
	var out []string
	for _, name := range controllerNames {
		if slices.Contains(named, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// metricsOptions serves /metrics as current kubebuilder projects do: over HTTPS (a self-signed
// certificate made at start-up), to callers whose bearer token the API server accepts (TokenReview) and
// who may get the /metrics URL (SubjectAccessReview; the metrics-reader ClusterRole grants it), as
// internal/metricsauth checks. The manager needs create on tokenreviews and subjectaccessreviews for
// that (config/rbac/metrics_auth_role.yaml).
func metricsOptions(cfg config) metricsserver.Options {
	if !cfg.metricsSecure {
		return metricsserver.Options{BindAddress: cfg.metricsAddr}
	}
	return metricsserver.Options{
		BindAddress:    cfg.metricsAddr,
		SecureServing:  true,
		FilterProvider: metricsauth.Filter(clock.RealClock{}),
		// HTTP/2 stays off, as in kubebuilder's scaffold: its stream handling has had denial-of-service
		// flaws (CVE-2023-44487, CVE-2023-39325) and a scraper gains nothing from it.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
}

func setupPowerCycle(ctx context.Context, mgr ctrl.Manager, deps *dependencies) error {
	trusted, err := parseNamespaces(deps.cfg.remediationNamespaces)
	if err != nil {
		return fmt.Errorf("--remediation-namespaces: %w", err)
	}
	ctrl.Log.WithName("setup").Info("Remediation requests are acted on only in these namespaces",
		"namespaces", append([]string{deps.cfg.namespace}, slices.DeleteFunc(trusted, func(ns string) bool { return ns == deps.cfg.namespace })...))
	r, err := powercycle.NewRemediationReconciler(powercycle.RemediationReconcilerOptions{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Clock:                   deps.clock,
		Recorder:                mgr.GetEventRecorder(powercycle.RemediationControllerName),
		Drivers:                 deps.access,
		LeaseNamespace:          deps.cfg.leaseNamespace,
		LeaseDuration:           deps.cfg.leaseDuration,
		MaxConcurrentReconciles: deps.cfg.maxConcurrentCycles,
		BMCCallTimeout:          deps.cfg.bmcCallTimeout,
		PowerPollInterval:       deps.cfg.powerPollInterval,
		ManagerNodeName:         deps.cfg.nodeName,
		ManagerNamespace:        deps.cfg.namespace,
		TrustedNamespaces:       trusted,
		WorkloadClusters:        deps.workloads,
	})
	if err != nil {
		return err
	}
	deps.remediator = r
	ctrlmetrics.Registry.MustRegister(powercycle.NewRemediationStateCollector(mgr.GetCache(), deps.clock, mgr.Elected()))
	return r.SetupWithManager(ctx, mgr)
}

// parseNamespaces reads --remediation-namespaces: namespace names separated by commas, blanks around
// them ignored, each a valid namespace name, returned sorted without repeats. Empty is none.
func parseNamespaces(list string) ([]string, error) {
	var names []string
	for _, ns := range strings.Split(list, ",") {
		if ns = strings.TrimSpace(ns); ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		names = append(names, ns)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// setupMHC starts the MachineHealthCheck controller whether Cluster API is installed or not: it watches
// Machines and Clusters only once the API server serves them (v1beta2, else v1beta1), looks again every
// --cluster-api-recheck-interval, and until then says so in each check's status (Disabled=True,
// ClusterAPINotInstalled).
func setupMHC(ctx context.Context, mgr ctrl.Manager, deps *dependencies) error {
	clusterNamespaces, err := parseNamespaces(deps.cfg.clusterNamespaces)
	if err != nil {
		return fmt.Errorf("--cluster-namespaces: %w", err)
	}
	d, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("making a discovery client: %w", err)
	}
	log := ctrl.Log.WithName("setup")
	if version, err := mhc.ServedClusterAPIVersion(d); err != nil {
		log.Error(err, "Looking up the served Cluster API version; the MachineHealthCheck controller looks again by itself")
	} else if version == "" {
		log.Info("Cluster API is not installed yet: MachineHealthChecks report it in their status until it is", "recheckInterval", deps.cfg.clusterAPIRecheckInterval)
	} else {
		log.Info("Cluster API found", "version", version)
	}
	if len(clusterNamespaces) > 0 {
		log.Info("Workload cluster kubeconfigs are read only in these namespaces", "namespaces", clusterNamespaces)
	}
	r, err := mhc.New(mhc.Options{Clock: deps.clock, MaxConcurrentReconciles: 4, Discovery: d,
		ClusterAPIRecheckInterval: deps.cfg.clusterAPIRecheckInterval, ClusterNamespaces: clusterNamespaces,
		LeaseNamespace: deps.cfg.leaseNamespace, LeaseDuration: deps.cfg.leaseDuration, WorkloadClusters: deps.workloads,
		ControlPlaneClaim: deps.controlPlane})
	if err != nil {
		return err
	}
	metrics.AddCheckKind(metrics.CheckerMHC, mgr.GetCache(), deps.clock, mgr.Elected(),
		func(l *remediationv1alpha1.MachineHealthCheckList) []remediationv1alpha1.MachineHealthCheck {
			return l.Items
		}, mhc.CheckState)
	return r.SetupWithManager(ctx, mgr)
}

func setupNHC(ctx context.Context, mgr ctrl.Manager, deps *dependencies) error {
	r, err := nhc.New(nhc.Options{
		Client:            mgr.GetClient(),
		Clock:             deps.clock,
		Recorder:          mgr.GetEventRecorder(nhc.ControllerName),
		LeaseNamespace:    deps.cfg.leaseNamespace,
		LeaseDuration:     deps.cfg.leaseDuration,
		ControlPlaneClaim: deps.controlPlane,
	})
	if err != nil {
		return err
	}
	metrics.AddCheckKind(metrics.CheckerNHC, mgr.GetCache(), deps.clock, mgr.Elected(),
		func(l *remediationv1alpha1.NodeHealthCheckList) []remediationv1alpha1.NodeHealthCheck { return l.Items }, nhc.CheckState)
	return r.SetupWithManager(ctx, mgr)
}
