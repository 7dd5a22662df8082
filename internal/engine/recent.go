package engine

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// RecentWriteTTL bounds how long a write is remembered without the cache showing it.
const RecentWriteTTL = time.Minute

// RecentWrites remembers the requests a check's process has just created or deleted, until its cache
// shows the creation (or for RecentWriteTTL), the same for both kinds: a pass working from a cache that
// lags behind the check's own writes must neither take a request it has just created for one that
// vanished (and create it again), nor delete again, and say so again, one it has just deleted that the
// cache still shows as it was. The Executor records every write it makes (Executor.Recent); a kind's
// observe reads its requests through it (Seen, AddCreated). The zero value is ready; a nil one
// remembers nothing.
type RecentWrites struct {
	mu   sync.Mutex
	objs map[Ref]recentWrite
	// purged is when the writes older than RecentWriteTTL were last dropped: a deletion the cache never
	// shows again is not otherwise looked at.
	purged time.Time
}

type recentWrite struct {
	check  types.UID
	target string
	obj    Request // Deleting set for a deletion
	at     time.Time
}

// Created remembers q, which check created for target at at.
func (rw *RecentWrites) Created(check types.UID, target string, q Request, at time.Time) {
	rw.put(recentWrite{check: check, target: target, obj: q, at: at})
}

// Deleted remembers that check deleted ref, target's, at at.
func (rw *RecentWrites) Deleted(check types.UID, target string, ref Ref, at time.Time) {
	rw.put(recentWrite{check: check, target: target, obj: Request{Ref: ref, Deleting: true}, at: at})
}

func (rw *RecentWrites) put(w recentWrite) {
	if rw == nil {
		return
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.objs == nil {
		rw.objs = map[Ref]recentWrite{}
	}
	if w.at.Sub(rw.purged) > RecentWriteTTL {
		for ref, old := range rw.objs {
			if w.at.Sub(old.at) > RecentWriteTTL {
				delete(rw.objs, ref)
			}
		}
		rw.purged = w.at
	}
	rw.objs[w.obj.Ref] = w
}

// Seen is told of each request the cache shows: it forgets a creation (the cache shows it now) and
// reports whether the process deleted the request a moment ago (the cache does not show that yet).
func (rw *RecentWrites) Seen(ref Ref, now time.Time) (deleted bool) {
	if rw == nil {
		return false
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	w, ok := rw.objs[ref]
	if ok && w.obj.Deleting && now.Sub(w.at) <= RecentWriteTTL {
		return true
	}
	delete(rw.objs, ref)
	return false
}

// AddCreated adds to byTarget the requests check created a moment ago that the cache does not show yet
// (Seen was told of every request of check's it shows), under their targets'.
func (rw *RecentWrites) AddCreated(check types.UID, byTarget map[string][]Request, now time.Time) {
	if rw == nil {
		return
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	for ref, w := range rw.objs {
		switch {
		case now.Sub(w.at) > RecentWriteTTL:
			delete(rw.objs, ref)
		case w.check == check && !w.obj.Deleting:
			byTarget[w.target] = append(byTarget[w.target], w.obj)
		}
	}
}

// forgetCreated drops the creation of ref, if that is what is remembered of it: a deletion of the check's
// own is kept until it runs out (RecentWriteTTL), harmless once the cache no longer shows the request.
func (rw *RecentWrites) forgetCreated(ref Ref) {
	if rw == nil {
		return
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if w, ok := rw.objs[ref]; ok && !w.obj.Deleting {
		delete(rw.objs, ref)
	}
}

// ForgetDeleted is h, a request kind gvk's event handler, that first forgets the creation rw remembers of
// a request whose deletion the cache has seen: one deleted by someone else a moment after the check made
// it is gone, not a creation the cache has yet to show, and is made again.
func ForgetDeleted(h handler.EventHandler, rw *RecentWrites, gvk schema.GroupVersionKind) handler.EventHandler {
	return forgetDeleted{EventHandler: h, recent: rw, gvk: gvk}
}

type forgetDeleted struct {
	handler.EventHandler
	recent *RecentWrites
	gvk    schema.GroupVersionKind
}

func (h forgetDeleted) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if e.Object != nil {
		h.recent.forgetCreated(RefIn(h.gvk, e.Object))
	}
	h.EventHandler.Delete(ctx, e, q)
}
