package kindwatch

import (
	"context"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// eventHandler feeds an informer's events through predicates to a controller-runtime handler, as
// source.Kind does; source.Kind itself cannot be used because it cannot be stopped.
type eventHandler struct {
	ctx        context.Context
	queue      workqueue.TypedRateLimitingInterface[reconcile.Request]
	handler    handler.EventHandler
	predicates []predicate.Predicate
}

var _ toolscache.ResourceEventHandler = eventHandler{}

func (h eventHandler) OnAdd(obj any, _ bool) {
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	e := event.CreateEvent{Object: o}
	for _, p := range h.predicates {
		if !p.Create(e) {
			return
		}
	}
	h.handler.Create(h.ctx, e, h.queue)
}

func (h eventHandler) OnUpdate(oldObj, newObj any) {
	o, okO := oldObj.(client.Object)
	n, okN := newObj.(client.Object)
	if !okO || !okN {
		return
	}
	e := event.UpdateEvent{ObjectOld: o, ObjectNew: n}
	for _, p := range h.predicates {
		if !p.Update(e) {
			return
		}
	}
	h.handler.Update(h.ctx, e, h.queue)
}

func (h eventHandler) OnDelete(obj any) {
	e := event.DeleteEvent{}
	if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, e.DeleteStateUnknown = tombstone.Obj, true
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	e.Object = o
	for _, p := range h.predicates {
		if !p.Delete(e) {
			return
		}
	}
	h.handler.Delete(h.ctx, e, h.queue)
}
