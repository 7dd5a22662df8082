package world

import (
	"errors"
	"fmt"
	"time"
)

// A workload cluster's API server that stops answering mid-remediation is a fault metalheal must ride
// out: StopAPIServer and StartAPIServer make it, on the world's real kube-apiserver process, while etcd
// (and what it stores) and the controller-manager run on.

var (
	// ErrAPIServerRunning is returned by StartAPIServer while the API server runs.
	ErrAPIServerRunning = errors.New("kube-apiserver is running")
	// ErrWorldStopped is returned by StopAPIServer and StartAPIServer once the world is stopped.
	ErrWorldStopped = errors.New("the world is stopped")
)

// processStopTimeout bounds the stop of etcd or kube-apiserver: SIGTERM, then SIGKILL.
const processStopTimeout = 30 * time.Second

// StopAPIServer stops the world's kube-apiserver as an orderly shutdown does (SIGTERM: the watches still
// open end within DefaultWatchTerminationGracePeriod) and returns once the process has exited: from then
// on a call to the API server fails with a connection error (connection refused). etcd and the
// controller-manager run on, the controller-manager failing its calls until StartAPIServer. The stop
// takes a second or two, at most 30s (then the process is killed and an error says so). Stopping a
// stopped API server does nothing.
func (w *World) StopAPIServer() error {
	w.apiMu.Lock()
	defer w.apiMu.Unlock()
	switch {
	case w.stopped:
		return ErrWorldStopped
	case w.apiStopped:
		return nil
	}
	w.logMark("stopping kube-apiserver (StopAPIServer)")
	err := w.env.ControlPlane.APIServer.Stop()
	w.apiStopped = true // even on error: envtest killed it
	if err != nil {
		return fmt.Errorf("stopping kube-apiserver (log %s): %w", w.apiLog.Name(), err)
	}
	return nil
}

// StartAPIServer starts the kube-apiserver StopAPIServer stopped, on the same address, with the same
// serving certificates, client CA and service-account keys, over the same etcd: the kubeconfigs and REST
// configs handed out before (Kubeconfig, RESTConfig, AddUser's) work again, clients reconnect to the
// endpoint they know, and what was stored before is there. It returns when /healthz answers, at most
// Options.StartTimeout later; on error the API server is left stopped, the error says why and where its
// log is. Its output goes on in the same log file.
func (w *World) StartAPIServer() error {
	w.apiMu.Lock()
	defer w.apiMu.Unlock()
	switch {
	case w.stopped:
		return ErrWorldStopped
	case !w.apiStopped:
		return ErrAPIServerRunning
	}
	w.logMark("starting kube-apiserver again (StartAPIServer)")
	api := w.env.ControlPlane.APIServer
	if err := api.Start(); err != nil {
		_ = api.Stop()
		return fmt.Errorf("starting kube-apiserver again: %w; the end of %s:\n%s", err, w.apiLog.Name(), tail(w.apiLog.Name(), 3000))
	}
	w.apiStopped = false
	return nil
}

// logMark writes a line of the world's own in kube-apiserver's log, so that a reader sees where one run
// of the process ends and the next begins.
func (w *World) logMark(what string) {
	_, _ = fmt.Fprintf(w.apiLog, "----- test/world %s: %s -----\n", time.Now().Format(time.RFC3339Nano), what)
}
