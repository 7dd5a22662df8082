package testenv

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// TB is what the kit needs of a test: *testing.T, or GinkgoT() in a Ginkgo spec (where Cleanup is
// DeferCleanup).
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// EnvOptions say what a package's API server holds besides metalheal's CRDs.
type EnvOptions struct {
	Options
	// ClusterAPI installs Cluster API's core CRDs (the release go.mod requires) and adds its Go types,
	// v1beta2 and v1beta1, to the scheme.
	ClusterAPI bool
	// AddToScheme adds more types to the scheme (client-go's and metalheal's are always there).
	AddToScheme []func(*runtime.Scheme) error
	// Namespaces are created once the API server is up: the ones every test of the package shares (the
	// lease namespace, a template namespace).
	Namespaces []string
	// QPS and Burst of Config and Client; client-go's defaults when zero.
	QPS   float32
	Burst int
}

// Env is one package's API server, started once and shared by every test of the package: envtest's
// kube-apiserver and etcd with the CRDs, the scheme, a direct client and the shared namespaces. Tests
// keep out of each other's way with a World each.
type Env struct {
	Environment *envtest.Environment
	// Config reaches the API server as its administrator.
	Config *rest.Config
	Scheme *runtime.Scheme
	// Client reads and writes the API server directly (no cache): what a test reads is what the API
	// server holds.
	Client    client.Client
	Discovery discovery.DiscoveryInterface
}

// Up starts an Env. Stop it when the package's tests are done (AfterSuite, or TestMain).
func Up(opts EnvOptions) (*Env, error) {
	scheme := runtime.NewScheme()
	adds := []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme}
	if opts.ClusterAPI {
		adds = append(adds, clusterv1.AddToScheme, clusterv1beta1.AddToScheme)
		crds, err := ClusterAPICRDs()
		if err != nil {
			return nil, err
		}
		opts.ExtraCRDPaths = append(opts.ExtraCRDPaths, crds)
	}
	for _, add := range append(adds, opts.AddToScheme...) {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("building the scheme: %w", err)
		}
	}
	environment, cfg, err := Start(opts.Options)
	if err != nil {
		return nil, err
	}
	e := &Env{Environment: environment, Config: cfg, Scheme: scheme}
	if err := e.connect(opts); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	return e, nil
}

func (e *Env) connect(opts EnvOptions) error {
	if opts.QPS != 0 {
		e.Config.QPS, e.Config.Burst = opts.QPS, opts.Burst
	}
	var err error
	if e.Client, err = client.New(e.Config, client.Options{Scheme: e.Scheme}); err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	if e.Discovery, err = discovery.NewDiscoveryClientForConfig(e.Config); err != nil {
		return fmt.Errorf("creating a discovery client: %w", err)
	}
	for _, ns := range opts.Namespaces {
		if err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	return nil
}

// KubeConfig is an administrator's kubeconfig of the API server, credentials inline.
func (e *Env) KubeConfig() []byte { return e.Environment.KubeConfig }

// Stop stops the API server and etcd.
func (e *Env) Stop() error {
	if e == nil || e.Environment == nil {
		return nil
	}
	return e.Environment.Stop()
}
