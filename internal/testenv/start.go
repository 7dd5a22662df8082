package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RepoRoot returns the repository's root directory (where go.mod is).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Assets returns the directory with etcd and kube-apiserver: $KUBEBUILDER_ASSETS, else ./bin.
func Assets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make envtest-bins` (hack/build-control-plane.sh) first: %w", b, dir, err)
		}
	}
	return dir, nil
}

// Options add CRDs to the test apiserver beyond metalheal's own.
type Options struct {
	// ExtraCRDPaths are files or directories of CRD YAML to install as well.
	ExtraCRDPaths []string
	// SkipCRDs starts a bare apiserver without metalheal's CRDs.
	SkipCRDs bool
}

// Start starts an apiserver with metalheal's CRDs (config/crd/bases) installed. Call Stop on the returned
// environment when done.
func Start(opts Options) (*envtest.Environment, *rest.Config, error) {
	assets, err := Assets()
	if err != nil {
		return nil, nil, err
	}
	crds := opts.ExtraCRDPaths
	if !opts.SkipCRDs {
		crds = append([]string{filepath.Join(RepoRoot(), "config", "crd", "bases")}, crds...)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     crds,
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting envtest: %w", err)
	}
	return env, cfg, nil
}
