package engine

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConflictRetry is how soon a check whose status write met a newer copy of the check looks again (its
// cache showed an older one: often the check's own last write). Not an error: the controller's backoff
// would grow with each, while a check in a busy minute meets one every few passes.
const ConflictRetry = 50 * time.Millisecond

// StatusWrites writes the checks' statuses, each an update guarded by the resourceVersion of the copy its
// pass decided from, and remembers the resourceVersion each write left. A pass whose status is the one its
// copy of the check shows has nothing to write, unless that copy is not the one the check's last write
// left: then the cache had not caught up with that write, the status now stored is a later pass's, and the
// "unchanged" status is in fact a change back. Such a pass writes all the same: the update is refused (a
// conflict: the pass looks again from a fresher copy) or, the copy being newer after all (someone else's
// write), stores nothing new. Without this the status stayed wrong until the next event or resync.
//
// What it remembers is keyed by the check's name, so that a reconcile finding the check gone (NotFound, the
// usual end of a check without finalizers) forgets it too; a check of the same name made again is another
// object (its UID), never behind the one before it.
type StatusWrites struct {
	mu   sync.Mutex
	last map[types.NamespacedName]written
}

// written is the copy of a check its last status write left.
type written struct {
	uid types.UID
	rv  string
}

// Write updates obj's status when changed, or when obj is not the copy the check's last write left. obj
// carries the new status and, in its resourceVersion, the copy the pass decided from; on success it holds
// what the API server stored.
func (s *StatusWrites) Write(ctx context.Context, c client.Client, obj client.Object, changed bool) error {
	if !changed && !s.behind(obj) {
		return nil
	}
	if err := c.Status().Update(ctx, obj); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[types.NamespacedName]written{}
	}
	s.last[client.ObjectKeyFromObject(obj)] = written{uid: obj.GetUID(), rv: obj.GetResourceVersion()}
	return nil
}

// behind reports whether obj is another copy than the one the check's last status write left (a check
// not written since the manager started is not).
func (s *StatusWrites) behind(obj client.Object) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.last[client.ObjectKeyFromObject(obj)]
	return ok && w.uid == obj.GetUID() && w.rv != obj.GetResourceVersion()
}

// Remembers reports whether a status write of the check of key is remembered.
func (s *StatusWrites) Remembers(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.last[key]
	return ok
}

// Forget drops what is remembered of a check that is gone or going.
func (s *StatusWrites) Forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, key)
}
