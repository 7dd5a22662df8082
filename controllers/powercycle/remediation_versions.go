package powercycle

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// maxReplacedVersions bounds how many replaced versions are remembered per remediation: a handful of
// writes happen between two looks at the cache, never more.
const maxReplacedVersions = 16

// writtenVersions remembers, for each remediation, the resourceVersions this process has written over
// since the cache last caught up. Our own writes reach the informer's cache only when their watch event
// does, and under load that takes seconds, while the write's own events (and requeues) already ask for
// the next reconcile. A cached copy at a version we replaced is known to be stale: acting on it would
// only end in a conflict, after a wasted BMC call. So the reconcile waits for the cache instead.
//
// It only ever avoids work: the writes themselves are still guarded by their resourceVersion, and a new
// process starts with nothing remembered.
type writtenVersions struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName][]string
}

// wrote records a successful write that replaced version old.
func (v *writtenVersions) wrote(key types.NamespacedName, old string) {
	if old == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.replaced == nil {
		v.replaced = map[types.NamespacedName][]string{}
	}
	seen := append(v.replaced[key], old)
	if len(seen) > maxReplacedVersions {
		seen = seen[len(seen)-maxReplacedVersions:]
	}
	v.replaced[key] = seen
}

// stale reports whether version (as read from the cache) is one we have written over. A version that is
// not means the cache has caught up with our writes: they are forgotten.
func (v *writtenVersions) stale(key types.NamespacedName, version string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, old := range v.replaced[key] {
		if old == version {
			return true
		}
	}
	delete(v.replaced, key)
	return false
}

// forget drops what is remembered of a remediation that is gone.
func (v *writtenVersions) forget(key types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.replaced, key)
}
