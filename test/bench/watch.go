package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/metalheal/metalheal/internal/template"
)

// sighting is one remediation request as the bench's watch saw it, with the local time of each event.
type sighting struct {
	Namespace, Name, Node string
	// Seen is when the ADDED event arrived.
	Seen time.Time
	// Created is the request's creationTimestamp (whole seconds).
	Created time.Time
	// Phase is the last status.phase seen (PowerCycleRemediation); Terminal when it first was Succeeded or
	// Failed.
	Phase    string
	Terminal time.Time
	// Gone is when the DELETED event arrived.
	Gone time.Time
}

// watcher records the remediation requests of one kind, in every namespace.
type watcher struct {
	mu     sync.Mutex
	byUID  map[types.UID]*sighting
	onSeen func(s sighting) // called for each new request, outside the lock
}

// watchRemediations starts an informer on gvr and returns once it has synced. Requests that exist before
// it starts are recorded with a zero Seen.
func watchRemediations(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, onSeen func(sighting)) (*watcher, error) {
	w := &watcher{byUID: map[types.UID]*sighting{}, onSeen: onSeen}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := factory.ForResource(gvr).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			now := time.Now()
			if initial {
				now = time.Time{}
			}
			w.observe(obj, now, true)
		},
		UpdateFunc: func(_, obj any) { w.observe(obj, time.Now(), false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return
			}
			w.mu.Lock()
			if s, ok := w.byUID[u.GetUID()]; ok && s.Gone.IsZero() {
				s.Gone = time.Now()
			}
			w.mu.Unlock()
		},
	}); err != nil {
		return nil, fmt.Errorf("watching %s: %w", gvr, err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("watching %s: %w", gvr, context.Cause(ctx))
	}
	return w, nil
}

func (w *watcher) observe(obj any, now time.Time, added bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	w.mu.Lock()
	s, known := w.byUID[u.GetUID()]
	if !known {
		node := u.GetAnnotations()[template.AnnotationNodeName]
		if node == "" {
			node = u.GetName()
		}
		s = &sighting{Namespace: u.GetNamespace(), Name: u.GetName(), Node: node, Seen: now, Created: u.GetCreationTimestamp().Time}
		w.byUID[u.GetUID()] = s
	}
	s.Phase = phase
	if (phase == "Succeeded" || phase == "Failed") && s.Terminal.IsZero() {
		s.Terminal = now
	}
	copied := *s
	w.mu.Unlock()
	if !known && added && w.onSeen != nil && !now.IsZero() {
		w.onSeen(copied)
	}
}

// since returns, per node, the first request seen at or after t.
func (w *watcher) since(t time.Time) map[string]sighting {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]sighting{}
	for _, s := range w.byUID {
		if s.Seen.Before(t) {
			continue
		}
		if prev, ok := out[s.Node]; !ok || s.Seen.Before(prev.Seen) {
			out[s.Node] = *s
		}
	}
	return out
}

// present reports the nodes that have a request that exists now.
func (w *watcher) present() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for _, s := range w.byUID {
		if s.Gone.IsZero() {
			out[s.Node] = true
		}
	}
	return out
}
