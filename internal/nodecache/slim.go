package nodecache

import (
	corev1 "k8s.io/api/core/v1"
)

// Slim is the cache transform of Nodes: it drops what no controller here reads and what makes up most of
// a real Node's size: managed fields, the container images the kubelet lists (up to 50 names and sizes
// per Node), the volumes attached and in use, and the kubelet's config source. At thousands of Nodes that
// is tens of megabytes of cache. The remediator writes a Node's taints with updates of a copy of the
// cached Node: the API server ignores the status in an update and keeps the stored managed fields when an
// update leaves them out, so nothing dropped here is lost.
func Slim(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a tombstone: the informer removes it as it is
	}
	n.ManagedFields = nil
	n.Status.Images = nil
	n.Status.VolumesAttached = nil
	n.Status.VolumesInUse = nil
	n.Status.Config = nil
	return n, nil
}
