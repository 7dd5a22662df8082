package world

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ErrControllerManagerExited is returned when kube-controller-manager exits while the world starts.
var ErrControllerManagerExited = errors.New("kube-controller-manager exited")

// controllerManagerUser is who the controller-manager is to the API server (all its controllers share
// it: --use-service-account-credentials=false).
const controllerManagerUser = "system:kube-controller-manager"

// startAttempts is how often the controller-manager is started before giving up: the free port it is
// given can be taken by someone else before it binds it.
const startAttempts = 3

// controllerManager is a running kube-controller-manager process.
type controllerManager struct {
	cmd     *exec.Cmd
	port    int
	url     string
	logPath string
	done    chan struct{} // closed when the process has exited
	exitErr error         // how it exited, once done is closed
}

// startControllerManager starts the controller-manager, retrying when it cannot bind its port: port, when
// not 0, is tried first (one started again keeps its URL). Its user, kubeconfig and log file are made by
// the first call; the next ones reuse them, the log going on.
func (w *World) startControllerManager(ctx context.Context, port int) (*controllerManager, error) {
	if w.kcmLog == nil {
		if err := w.prepareControllerManager(); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		kcm, err := w.launchControllerManager(w.kcmKubeconfig, port, w.kcmLog)
		if err != nil {
			return nil, err
		}
		err = kcm.waitHealthy(ctx, w.opts.StartTimeout)
		if err == nil {
			return kcm, nil
		}
		_ = kcm.stop()
		if !errors.Is(err, ErrControllerManagerExited) || attempt == startAttempts {
			return nil, err
		}
		port = 0
	}
}

// prepareControllerManager provisions the controller-manager's user and writes its kubeconfig, and
// creates its log file.
func (w *World) prepareControllerManager() error {
	u, err := w.env.AddUser(envtest.User{Name: controllerManagerUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("provisioning the controller-manager's user: %w", err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		return fmt.Errorf("the controller-manager's kubeconfig: %w", err)
	}
	path := filepath.Join(w.dir, "kube-controller-manager.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("writing the controller-manager's kubeconfig: %w", err)
	}
	log, err := w.logFile("kube-controller-manager.log")
	if err != nil {
		return err
	}
	w.kcmKubeconfig, w.kcmLog = path, log
	return nil
}

// controllerManagerArgs are the controller-manager's flags.
func (w *World) controllerManagerArgs(kubeconfig string, port int) []string {
	o := w.opts
	args := []string{
		"--kubeconfig=" + kubeconfig,
		// No --authentication-kubeconfig: envtest's apiserver has no request-header CA for it to find, and
		// health and metrics need no credentials (the bench scrapes /metrics).
		"--authorization-kubeconfig=" + kubeconfig,
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(w.dir, "kube-controller-manager"),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--controllers=" + strings.Join(o.Controllers, ","),
		"--node-monitor-grace-period=" + o.NodeMonitorGracePeriod.String(),
		"--node-monitor-period=" + o.NodeMonitorPeriod.String(),
		"--node-startup-grace-period=" + o.NodeStartupGracePeriod.String(),
		"--kube-api-qps=" + strconv.Itoa(o.ControllerManagerQPS),
		"--kube-api-burst=" + strconv.Itoa(o.ControllerManagerBurst),
		"--cluster-name=" + w.clusterName(),
		"--v=2",
	}
	return append(args, o.ControllerManagerArgs...)
}

// clusterName is the controller-manager's --cluster-name: the world's name, or "metalheal-world".
func (w *World) clusterName() string {
	if w.opts.Name != "" {
		return w.opts.Name
	}
	return "metalheal-world"
}

// launchControllerManager starts the process.
func (w *World) launchControllerManager(kubeconfig string, port int, log *os.File) (*controllerManager, error) {
	cmd := exec.Command(filepath.Join(w.binDir, "kube-controller-manager"), w.controllerManagerArgs(kubeconfig, port)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	kcm := &controllerManager{
		cmd:     cmd,
		port:    port,
		url:     "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		logPath: log.Name(),
		done:    make(chan struct{}),
	}
	go func() {
		kcm.exitErr = cmd.Wait()
		close(kcm.done)
	}()
	return kcm, nil
}

// waitHealthy waits until /healthz answers 200, the process exits, ctx ends or timeout passes.
func (kcm *controllerManager) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{
		Timeout: 2 * time.Second,
		// The controller-manager serves a self-signed certificate made at start.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback, self-signed
	}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		select {
		case <-kcm.done:
			return fmt.Errorf("%w (%v); the end of %s:\n%s", ErrControllerManagerExited, kcm.exitErr, kcm.logPath, tail(kcm.logPath, 3000))
		case <-ctx.Done():
			return fmt.Errorf("waiting for kube-controller-manager's /healthz (last: %v; log %s): %w", last, kcm.logPath, ctx.Err())
		case <-tick.C:
		}
		last = probe(ctx, client, kcm.url+"/healthz")
		if last == nil {
			return nil
		}
	}
}

// probe GETs url and wants 200.
func probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return nil
}

// running reports whether the process has not exited.
func (kcm *controllerManager) running() bool {
	select {
	case <-kcm.done:
		return false
	default:
		return true
	}
}

// stop terminates the process: SIGTERM, then SIGKILL if it has not exited within 10s.
func (kcm *controllerManager) stop() error {
	select {
	case <-kcm.done:
		return nil
	default:
	}
	_ = kcm.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-kcm.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	if err := kcm.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing kube-controller-manager: %w", err)
	}
	<-kcm.done
	return nil
}

// freePort asks the kernel for a free loopback TCP port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns at most the last n bytes of a file.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
