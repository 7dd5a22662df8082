package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// clusterAPIAPIModule is the module metalheal imports Cluster API's Go types from; the CRDs come from the
// main module of the same release.
const (
	clusterAPIAPIModule  = "sigs.k8s.io/cluster-api/api"
	clusterAPIMainModule = "sigs.k8s.io/cluster-api"
	clusterAPICRDSubdir  = "core/config/crd/bases"
)

// ClusterAPIV1Beta1Version is the last Cluster API release line that serves only v1beta1 (v1.11 added
// v1beta2): clusters still run it, so the MachineHealthCheck is tested against its CRDs too. Its CRDs sit
// in config/crd/bases (the core/ directory came with v1.11).
const (
	ClusterAPIV1Beta1Version   = "v1.10.10"
	clusterAPIV1Beta1CRDSubdir = "config/crd/bases"
)

// ClusterAPIV1Beta1CRDs returns the directory holding the core CRDs of Cluster API ClusterAPIV1Beta1Version
// (served version v1beta1 only), read from the Go module cache like ClusterAPICRDs.
func ClusterAPIV1Beta1CRDs() (string, error) {
	return clusterAPICRDsOf(ClusterAPIV1Beta1Version, clusterAPIV1Beta1CRDSubdir)
}

// ClusterAPICRDs returns the directory holding Cluster API's core CRDs (Cluster, Machine, MachineSet, ...)
// of the release whose Go types go.mod requires. They are read from the Go module cache (downloaded
// there if needed with `go mod download`), so nothing is copied into the repository. Pass the result in
// Options.ExtraCRDPaths.
func ClusterAPICRDs() (string, error) {
	version, err := goCommand("list", "-m", "-f", "{{.Version}}", clusterAPIAPIModule)
	if err != nil {
		return "", fmt.Errorf("finding the version of %s in go.mod: %w", clusterAPIAPIModule, err)
	}
	return clusterAPICRDsOf(strings.TrimSpace(version), clusterAPICRDSubdir)
}

// clusterAPICRDsOf downloads Cluster API's main module at version into the module cache and returns its
// CRD directory subdir.
func clusterAPICRDsOf(version, subdir string) (string, error) {
	out, err := goCommand("mod", "download", "-json", clusterAPIMainModule+"@"+version)
	if err != nil {
		return "", fmt.Errorf("downloading %s@%s: %w", clusterAPIMainModule, version, err)
	}
	var mod struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal([]byte(out), &mod); err != nil {
		return "", fmt.Errorf("reading `go mod download -json` output for %s@%s: %w", clusterAPIMainModule, version, err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("downloading %s@%s: %s", clusterAPIMainModule, version, mod.Error)
	}
	dir := filepath.Join(mod.Dir, subdir)
	if _, err := os.Stat(filepath.Join(dir, "cluster.x-k8s.io_machines.yaml")); err != nil {
		return "", fmt.Errorf("cluster API CRDs not found in %s: %w", dir, err)
	}
	return dir, nil
}

// goCommand runs the go tool in the repository root and returns its standard output.
func goCommand(args ...string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go tool is needed to locate Cluster API's CRDs: %w", err)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = RepoRoot()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
