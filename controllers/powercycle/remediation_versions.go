package powercycle

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// maxReplacedVersions bounds how many replaced versions are remembered per remediation: a handful of
// writes happen between two looks at the cache, never more.
const maxReplacedVersions = 16

// writtenVersions remembers, for each remediation, the resourceVersions this process has written over
// since the cache last caught up, and the object its last write left. Our own writes reach the
// informer's cache only when their watch event does, and under load that takes seconds (in a wave of
// hundreds of power cycles the API server closes the manager's watches every few seconds, as it does
// with watchers that fall behind), while the next step of a remediation is due already. A cached copy at
// a version we replaced is known to be stale; the object our last write left is newer, and as new as
// anything this process knows. The reconcile goes on from it rather than waiting for the cache.
//
// That is as safe as reading the cache: every write is guarded by the resourceVersion it was computed
// from, so a copy someone else has written over since (a deletion, a spec change) ends in a conflict,
// and every power request is recorded before it is sent. After a conflict the copy is dropped, and the
// reconcile waits for the cache to catch up, as it does in a new process, which remembers nothing.
type writtenVersions struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName][]string
	last     map[types.NamespacedName]*v1alpha1.PowerCycleRemediation
}

// wrote records a successful write that replaced version old and left obj, as the API server returned
// it. obj is kept as it is (the caller does not modify it afterwards), without its managed fields, which
// the cache does not keep either.
func (v *writtenVersions) wrote(key types.NamespacedName, old string, obj *v1alpha1.PowerCycleRemediation) {
	if old == "" {
		return
	}
	obj.ManagedFields = nil
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.replaced == nil {
		v.replaced = map[types.NamespacedName][]string{}
		v.last = map[types.NamespacedName]*v1alpha1.PowerCycleRemediation{}
	}
	seen := append(v.replaced[key], old)
	if len(seen) > maxReplacedVersions {
		seen = seen[len(seen)-maxReplacedVersions:]
	}
	v.replaced[key] = seen
	v.last[key] = obj
}

// newer says whether version (as read from the cache) is one we have written over, and if so returns a
// copy of the object our last write left, or nil when there is none to go on from (a conflict dropped
// it). A version that is not one we replaced means the cache has caught up with our writes: they are
// forgotten.
func (v *writtenVersions) newer(key types.NamespacedName, version string) (obj *v1alpha1.PowerCycleRemediation, stale bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, old := range v.replaced[key] {
		if old == version {
			if last := v.last[key]; last != nil {
				return last.DeepCopy(), true
			}
			return nil, true
		}
	}
	delete(v.replaced, key)
	delete(v.last, key)
	return nil, false
}

// conflicted drops the object our last write left: someone else has written since, and only the cache
// will tell what.
func (v *writtenVersions) conflicted(key types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.last, key)
}

// forget drops what is remembered of a remediation that is gone.
func (v *writtenVersions) forget(key types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.replaced, key)
	delete(v.last, key)
}
