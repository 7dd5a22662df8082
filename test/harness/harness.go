package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
	"github.com/metalheal/metalheal/test/world"
)

const (
	// Namespace is where the manager runs and the BMCs and their Secrets live, as config/default deploys.
	Namespace = "metalheal-system"
	// ManagerUser is the identity the manager processes run as, bound to config/default's RBAC.
	ManagerUser = "system:serviceaccount:metalheal-system:metalheal-manager"
	// BMCUsername and BMCPassword are every simulated BMC's credentials.
	BMCUsername = "admin"
	BMCPassword = "harness-bmc-secret"
	// WorkerPrefix names the worker nodes worker-1..N; their systems in the mock have IDs 1..N.
	WorkerPrefix = "worker"
)

// Options shape the world. Zero values give a small, fast world suitable for the demo.
type Options struct {
	// Workers is the number of worker nodes (and BMC systems). Default 3.
	Workers int
	// World configures the control plane; NodeMonitorGracePeriod defaults to 10s here.
	World world.Options
	// LeaseInterval is how often simulated kubelets renew their lease. Default 2s.
	LeaseInterval time.Duration
	// BootDelay is how long a host takes from power-on to Ready. Default 3s.
	BootDelay time.Duration
	// PowerDelay is how long a BMC takes to change power state. Default 1s.
	PowerDelay time.Duration
	// NodeLabels are added to every worker (node-role.kubernetes.io/worker is always set).
	NodeLabels map[string]string
	// SkipBMCs creates no BMC objects (a test that makes its own).
	SkipBMCs bool
	// RedfishRequestLimit is how many requests the Redfish mock's record keeps (0: the mock's default).
	RedfishRequestLimit int
	// KubeletPorts gives every simulated kubelet a real TCP port of 127.0.0.1, closed while its host has no
	// power (see nodesim.Options.KubeletPorts): what the manager's power watch probes.
	KubeletPorts bool
	// OnBoot, if set, hears every simulated host that has booted (see nodesim.Options.OnBoot).
	OnBoot func(node string, at time.Time)
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Kustomization is the directory whose rendered RBAC the manager runs under. Default config/default;
	// config/cluster-api adds the kubeconfig-readers component.
	Kustomization string
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = 3
	}
	if o.World.NodeMonitorGracePeriod <= 0 {
		o.World.NodeMonitorGracePeriod = 10 * time.Second
	}
	if o.LeaseInterval <= 0 {
		o.LeaseInterval = 2 * time.Second
	}
	if o.BootDelay <= 0 {
		o.BootDelay = 3 * time.Second
	}
	if o.PowerDelay <= 0 {
		o.PowerDelay = time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Kustomization == "" {
		o.Kustomization = filepath.Join("config", "default")
	}
	return o
}

// Harness is a running local world with simulated hosts and their BMCs.
type Harness struct {
	World  *world.World
	Mock   *redfishmock.Mock
	Sim    *nodesim.Simulator
	Client client.Client
	// ManagerKubeconfig is the kubeconfig of ManagerUser.
	ManagerKubeconfig string
	// MetricsToken is a bearer token of the MetricsScraper service account (bound to metalheal-metrics-reader),
	// and MetricsTokenFile a file holding it: what reads a manager's /metrics (Manager.Metrics).
	MetricsToken     string
	MetricsTokenFile string

	opts     Options
	cancel   context.CancelFunc
	managers []*Manager

	mu        sync.Mutex
	workloads []*WorkloadCluster // see StartWorkloadClusters
}

// Scheme knows metalheal's kinds, Cluster API's (v1beta2) and Kubernetes' built-ins.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	_ = clusterv1.AddToScheme(s)
	return s
}

// Start builds the world. On error nothing is left running.
func Start(ctx context.Context, opts Options) (_ *Harness, err error) {
	opts = opts.withDefaults()
	h := &Harness{opts: opts}
	defer func() {
		if err != nil {
			h.Stop()
		}
	}()
	h.logf("starting etcd, kube-apiserver and kube-controller-manager")
	if h.World, err = world.Start(ctx, opts.World); err != nil {
		return nil, err
	}
	if h.Client, err = client.New(h.World.RESTConfig(), client.Options{Scheme: Scheme()}); err != nil {
		return nil, err
	}
	if err := h.installRBAC(ctx); err != nil {
		return nil, fmt.Errorf("installing metalheal's RBAC: %w", err)
	}
	user, err := h.World.AddUser(ManagerUser, []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace}, nil)
	if err != nil {
		return nil, err
	}
	h.ManagerKubeconfig = user.Kubeconfig
	if err := h.setUpMetricsScraper(ctx); err != nil {
		return nil, err
	}

	h.logf("starting the Redfish BMC simulator with %d systems", opts.Workers)
	mock := redfishmock.New().WithSystems(opts.Workers).WithCredentials(BMCUsername, BMCPassword).
		WithPowerDelay(opts.PowerDelay).WithControlEndpoint()
	if opts.RedfishRequestLimit > 0 {
		mock = mock.WithRequestLimit(opts.RedfishRequestLimit)
	}
	h.Mock, err = mock.Start()
	if err != nil {
		return nil, err
	}
	power, err := nodesim.RedfishPowerByID(h.Mock, func(id string) string { return WorkerPrefix + "-" + id })
	if err != nil {
		return nil, err
	}
	cs, err := nodesim.NewClient(h.World.RESTConfig(), "nodesim")
	if err != nil {
		return nil, err
	}
	simCtx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.Sim = nodesim.New(cs, nodesim.Options{Power: power, LeaseInterval: opts.LeaseInterval, BootDelay: opts.BootDelay,
		Workers: simulatorWorkers(opts.Workers), OnBoot: opts.OnBoot, KubeletPorts: opts.KubeletPorts})
	if err := h.Sim.Start(simCtx); err != nil {
		return nil, err
	}
	labels := map[string]string{"node-role.kubernetes.io/worker": ""}
	for k, v := range opts.NodeLabels {
		labels[k] = v
	}
	h.logf("registering %d simulated nodes", opts.Workers)
	if err := h.Sim.AddNodes(ctx, nodesim.Nodes(WorkerPrefix, opts.Workers, labels)...); err != nil {
		return nil, err
	}
	if !opts.SkipBMCs {
		if err := h.createBMCs(ctx); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (h *Harness) logf(format string, args ...any) {
	fmt.Fprintf(h.opts.Log, format+"\n", args...)
}

// NodeName is the name of worker i (1-based).
func NodeName(i int) string { return WorkerPrefix + "-" + strconv.Itoa(i) }

// SystemID is the Redfish system ID of a worker node.
func SystemID(node string) string { return strings.TrimPrefix(node, WorkerPrefix+"-") }

// createBMCs makes one Secret and one BMC per worker, pointing at its system in the mock.
func (h *Harness) createBMCs(ctx context.Context) error {
	if err := h.ensureBMCCredentials(ctx); err != nil {
		return err
	}
	for i := 1; i <= h.opts.Workers; i++ {
		node := NodeName(i)
		b := &v1alpha1.BMC{
			ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: Namespace},
			Spec: v1alpha1.BMCSpec{
				NodeName:             node,
				Address:              h.bmcAddress(SystemID(node)),
				CredentialsSecretRef: v1alpha1.SecretReference{Name: bmcCredentials},
			},
		}
		if err := h.Client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// bmcCredentials is the Secret, in Namespace, holding every simulated BMC's credentials.
const bmcCredentials = "bmc-credentials"

// ensureBMCCredentials creates the Secret bmcCredentials unless it exists.
func (h *Harness) ensureBMCCredentials(ctx context.Context) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bmcCredentials, Namespace: Namespace},
		StringData: map[string]string{"username": BMCUsername, "password": BMCPassword},
	}
	if err := h.Client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// bmcAddress is the BMC address of a system of the mock.
func (h *Harness) bmcAddress(systemID string) string {
	base := strings.Replace(h.Mock.URL(), "http://", "redfish+http://", 1)
	base = strings.Replace(base, "https://", "redfish+https://", 1)
	return base + h.Mock.SystemPath(systemID)
}

// installRBAC applies what `kustomize build config/default` (or Options.Kustomization) renders, except the
// Deployment (the manager runs as a local process) and the CRDs, and binds the manager's roles to
// ManagerUser: the manager runs with exactly the permissions a deployment gives it.
func (h *Harness) installRBAC(ctx context.Context) error {
	objs, err := render(ctx, h.opts.Kustomization)
	if err != nil {
		return err
	}
	return h.apply(ctx, objs)
}

// render returns what `kustomize build dir` (relative to the repository) renders, except the Deployment
// and the CRDs.
func render(ctx context.Context, dir string) ([]*unstructured.Unstructured, error) {
	root := testenv.RepoRoot()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kustomize"), "build", filepath.Join(root, dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s (run `make tools`): %w: %s", dir, err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(u.Object) == 0 || u.GetKind() == "Deployment" || u.GetKind() == "CustomResourceDefinition" {
			continue
		}
		objs = append(objs, u)
	}
}

// apply server-side applies objects as the harness.
func (h *Harness) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if err := h.Client.Patch(ctx, u, client.Apply, client.FieldOwner("harness"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// Stop stops every manager, the workload clusters, the simulator, the mock and the world.
func (h *Harness) Stop() {
	for _, m := range h.managers {
		m.Kill()
	}
	h.mu.Lock()
	workloads := h.workloads
	h.mu.Unlock()
	for _, c := range workloads {
		_ = c.stopProcesses()
	}
	if h.cancel != nil {
		h.cancel()
		if h.Sim != nil {
			<-h.Sim.Done()
		}
	}
	if h.Mock != nil {
		h.Mock.Close()
	}
	if h.World != nil {
		_ = h.World.Stop()
	}
}

// simulatorWorkers is how many API calls the node simulator makes at once for n nodes' heartbeats (and
// as many for boots, which never wait behind heartbeats). Real kubelets do not wait for each other: with
// the simulator's default 16 calls at once, 5,000 nodes' lease renewals (500 a second) fall behind as
// soon as the API server answers in more than 30 ms, as it does in a wave of power cycles. One call at
// once per 16 nodes, at most 256, keeps up while the API server answers within half a second.
func simulatorWorkers(n int) int {
	return min(max(n/16, nodesim.DefaultWorkers), 256)
}
