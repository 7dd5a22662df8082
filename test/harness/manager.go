package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/metalheal/metalheal/internal/testenv"
)

// BuildManager builds the manager binary into ./bin/manager (go's build cache makes a rebuild cheap)
// and returns its path.
func BuildManager(ctx context.Context) (string, error) {
	root := testenv.RepoRoot()
	out := filepath.Join(root, "bin", "manager")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the manager: %w\n%s", err, b)
	}
	return out, nil
}

// Manager is one manager process.
type Manager struct {
	// Name tells managers apart in logs ("manager-1", ...).
	Name string
	// LogPath is the file with the process's output.
	LogPath string
	// MetricsURL serves the manager's Prometheus metrics: over HTTPS to a caller with a bearer token bound
	// to the metrics-reader ClusterRole (Metrics reads it as MetricsScraper), or over plain HTTP to anyone
	// when the manager was started with --metrics-secure=false.
	MetricsURL string

	metricsToken string

	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
	once    sync.Once
}

// StartManager builds (if needed) and starts a manager process as ManagerUser with leader election on,
// the BMC namespace, and extra flags; it returns once the process answers its health probe and its
// metrics endpoint (which starts later: it makes its certificate and its authentication first).
func (h *Harness) StartManager(ctx context.Context, extraArgs ...string) (*Manager, error) {
	bin, err := BuildManager(ctx)
	if err != nil {
		return nil, err
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	probePort, err := freePort()
	if err != nil {
		return nil, err
	}
	m := &Manager{Name: fmt.Sprintf("manager-%d", len(h.managers)+1), exited: make(chan struct{}), metricsToken: h.MetricsToken}
	m.LogPath = filepath.Join(h.World.LogDir(), m.Name+".log")
	m.MetricsURL = metricsURL(metricsPort, extraArgs)
	logFile, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--namespace=" + Namespace,
		"--leader-elect",
		"--leader-election-id=metalheal-harness",
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probePort),
		"--zap-devel=false",
	}, extraArgs...)
	m.cmd = exec.Command(bin, args...)
	m.cmd.Env = append(os.Environ(), "KUBECONFIG="+h.ManagerKubeconfig, "POD_NAMESPACE="+Namespace)
	m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", m.Name, err)
	}
	go func() {
		m.exitErr = m.cmd.Wait()
		logFile.Close()
		close(m.exited)
	}()
	h.managers = append(h.managers, m)

	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", probePort)
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-m.exited:
			return nil, fmt.Errorf("%s exited at start-up (%v); see %s", m.Name, m.exitErr, m.LogPath)
		case <-deadline.C:
			m.Kill()
			return nil, fmt.Errorf("%s did not become healthy within 60s; see %s", m.Name, m.LogPath)
		case <-ctx.Done():
			m.Kill()
			return nil, ctx.Err()
		case <-tick.C:
			if resp, err := http.Get(healthz); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && m.metricsAnswer(ctx) {
					return m, nil
				}
			}
		}
	}
}

// metricsAnswer reports whether the metrics endpoint answers at all (any status: without a token it
// refuses), or is turned off.
func (m *Manager) metricsAnswer(ctx context.Context) bool {
	if slices.Contains(m.cmd.Args, "--metrics-bind-address=0") {
		return true
	}
	_, _, err := m.GetMetrics(ctx, "")
	return err == nil
}

// PID is the process ID.
func (m *Manager) PID() int { return m.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (m *Manager) Exited() <-chan struct{} { return m.exited }

// Kill sends SIGKILL (no chance to clean up: what a crash or an OOM kill does) and waits for the exit.
func (m *Manager) Kill() {
	m.once.Do(func() {
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	})
	<-m.exited
}

// Stop sends SIGTERM and waits up to 30s for a graceful exit, then kills.
func (m *Manager) Stop() error {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		m.Kill()
		return errors.New(m.Name + " did not stop within 30s of SIGTERM")
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
