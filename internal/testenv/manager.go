package testenv

import (
	"context"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ManagerOptions shape a test's controller-runtime manager.
type ManagerOptions struct {
	// Namespaces limit the cache of namespaced objects to these namespaces; every namespace when empty.
	Namespaces []string
	// LeaseNamespace, if set, limits the cache of Leases to it, as cmd/manager does.
	LeaseNamespace string
	// ByObject adds per-object cache options.
	ByObject map[client.Object]cache.ByObject
	// User, if set, is impersonated by every request of the manager (the rights a test grants it).
	User string
	// WrapTransport, if set, sees every request of the manager (a RequestLog's Wrap, say).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Logger, if set, is the manager's logger (controller-runtime's global one otherwise).
	Logger logr.Logger
}

// NewManager builds a manager on e's API server for one test: no metrics or health endpoints, and
// controller names that may repeat (every test builds its own controllers in one process).
func (e *Env) NewManager(opts ManagerOptions) (manager.Manager, error) {
	cfg := rest.CopyConfig(e.Config)
	if opts.User != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: opts.User}
	}
	if opts.WrapTransport != nil {
		cfg.WrapTransport = opts.WrapTransport
	}
	byObject := map[client.Object]cache.ByObject{}
	for o, by := range opts.ByObject {
		byObject[o] = by
	}
	if opts.LeaseNamespace != "" {
		byObject[&coordinationv1.Lease{}] = cache.ByObject{Namespaces: map[string]cache.Config{opts.LeaseNamespace: {}}}
	}
	cacheOpts := cache.Options{ByObject: byObject}
	if len(opts.Namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range opts.Namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 e.Scheme,
		Logger:                 opts.Logger,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cacheOpts,
	})
}

// ManagerStopTimeout bounds how long a test's end waits for its manager to stop.
const ManagerStopTimeout = time.Minute

// RunManager starts mgr until ctx ends or the test does, whichever comes first; t's cleanup stops it, waits for it and fails t if it
// returns an error or does not stop within ManagerStopTimeout.
func RunManager(ctx context.Context, t TB, mgr manager.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the manager stopped with an error: %v", err)
			}
		case <-time.After(ManagerStopTimeout):
			t.Errorf("the manager did not stop within %s", ManagerStopTimeout)
		}
	})
}
