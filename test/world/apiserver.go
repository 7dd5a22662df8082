package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// A workload cluster's API server that stops answering mid-remediation is a fault metalheal must ride
// out: StopAPIServer and StartAPIServer make it, on the world's real kube-apiserver process, while etcd
// (and what it stores) runs on.
//
// The controller-manager goes and comes back with the API server, as a real one does: it exits when it
// cannot renew its leader lease (--leader-elect-renew-deadline, 10s) and its kubelet starts it again; the
// new one leads, and starts its controllers afresh, once the API server answers. One that ran on through
// the outage (the world's runs without leader election) would count it against every Node: its node
// lifecycle controller, its lease informer slow to catch up, marked a Node that heartbeat throughout
// Unknown for seconds after a 17s outage with an 8s grace period, and a MachineHealthCheck remediated it.

var (
	// ErrAPIServerRunning is returned by StartAPIServer while the API server runs.
	ErrAPIServerRunning = errors.New("kube-apiserver is running")
	// ErrWorldStopped is returned by StopAPIServer and StartAPIServer once the world is stopped.
	ErrWorldStopped = errors.New("the world is stopped")
)

// processStopTimeout bounds the stop of etcd or kube-apiserver: SIGTERM, then SIGKILL.
const processStopTimeout = 30 * time.Second

// StopAPIServer stops the world's kube-apiserver as an orderly shutdown does (SIGTERM: the watches still
// open end within DefaultWatchTerminationGracePeriod), and the controller-manager with it, and returns
// once both processes have exited: from then on a call to the API server fails with a connection error
// (connection refused). etcd runs on and keeps what it stores. It takes a second or two: at most 30s for
// the API server and 10s for the controller-manager, which are then killed (an error says so for the
// API server). Stopping a stopped API server does nothing.
func (w *World) StopAPIServer() error {
	w.apiMu.Lock()
	defer w.apiMu.Unlock()
	switch {
	case w.stopped:
		return ErrWorldStopped
	case w.apiStopped:
		return nil
	}
	logMark(w.apiLog, "stopping kube-apiserver (StopAPIServer)")
	err := w.env.ControlPlane.APIServer.Stop()
	w.apiStopped = true // even on error: envtest killed it
	if err != nil {
		err = fmt.Errorf("stopping kube-apiserver (log %s): %w", w.apiLog.Name(), err)
	}
	logMark(w.kcmLog, "stopping kube-controller-manager with kube-apiserver (StopAPIServer)")
	return errors.Join(err, w.kcm.stop())
}

// StartAPIServer starts the kube-apiserver StopAPIServer stopped, on the same address, with the same
// serving certificates, client CA and service-account keys, over the same etcd: the kubeconfigs and REST
// configs handed out before (Kubeconfig, RESTConfig, AddUser's) work again, clients reconnect to the
// endpoint they know, and what was stored before is there. Then it starts a new controller-manager (on
// the same port when it is free), and returns when both are healthy. The API server's start is bounded by
// Options.StartTimeout (on error it is left stopped), the controller-manager's by ctx and
// Options.StartTimeout; an error says why and where the log is. Both logs go on in the same files.
func (w *World) StartAPIServer(ctx context.Context) error {
	w.apiMu.Lock()
	defer w.apiMu.Unlock()
	switch {
	case w.stopped:
		return ErrWorldStopped
	case !w.apiStopped:
		return ErrAPIServerRunning
	}
	logMark(w.apiLog, "starting kube-apiserver again (StartAPIServer)")
	api := w.env.ControlPlane.APIServer
	if err := api.Start(); err != nil {
		_ = api.Stop()
		return fmt.Errorf("starting kube-apiserver again: %w; the end of %s:\n%s", err, w.apiLog.Name(), tail(w.apiLog.Name(), 3000))
	}
	w.apiStopped = false
	logMark(w.kcmLog, "starting kube-controller-manager again (StartAPIServer)")
	kcm, err := w.startControllerManager(ctx, w.kcm.port)
	if err != nil {
		return fmt.Errorf("starting kube-controller-manager again (the API server runs): %w", err)
	}
	w.kcm = kcm
	return nil
}

// logMark writes a line of the world's own in a process's log, so that a reader sees where one run of
// the process ends and the next begins.
func logMark(log *os.File, what string) {
	_, _ = fmt.Fprintf(log, "----- test/world %s: %s -----\n", time.Now().Format(time.RFC3339Nano), what)
}
