package main

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
)

// watch feeds the story from the API server: Nodes, the PowerCycleRemediations in namespace and the
// Leases in leaseNamespace. The informers run until ctx is done; watch returns once they have synced.
func watch(ctx context.Context, cfg *rest.Config, st *story, namespace, leaseNamespace string) error {
	c, err := cache.New(cfg, cache.Options{
		Scheme: harness.Scheme(),
		ByObject: map[client.Object]cache.ByObject{
			&v1alpha1.PowerCycleRemediation{}: {Namespaces: map[string]cache.Config{namespace: {}}},
			&coordinationv1.Lease{}:           {Namespaces: map[string]cache.Config{leaseNamespace: {}}},
		},
	})
	if err != nil {
		return fmt.Errorf("making the demo's cache: %w", err)
	}
	handlers := []struct {
		obj     client.Object
		handler toolscache.ResourceEventHandler
	}{
		{&corev1.Node{}, handler(st.observeNode, nil)},
		{&v1alpha1.PowerCycleRemediation{}, handler(st.observeRemediation, st.remediationGone)},
		{&coordinationv1.Lease{}, handler(st.observeLease, st.leaseGone)},
	}
	for _, h := range handlers {
		inf, err := c.GetInformer(ctx, h.obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("watching %T: %w", h.obj, err)
		}
		if _, err := inf.AddEventHandler(h.handler); err != nil {
			return fmt.Errorf("watching %T: %w", h.obj, err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the demo's watches did not sync: %w", context.Cause(ctx))
	}
	return nil
}

// handler calls seen with every added or updated T, and gone with every deleted one (nil: ignore).
func handler[T client.Object](seen, gone func(T)) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				seen(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				seen(o)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(T); ok && gone != nil {
				gone(o)
			}
		},
	}
}
