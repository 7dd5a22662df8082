package main

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// slimNode is the cache transform of Nodes: it drops what no controller here reads and what makes up
// most of a real Node's size: managed fields, the container images the kubelet lists (up to 50 names and
// sizes per Node), the volumes attached and in use, and the kubelet's config source. At thousands of
// Nodes that is tens of megabytes of cache. The remediator writes a Node's taints with updates of a copy
// of the cached Node: the API server ignores the status in an update and keeps the stored managed fields
// when an update leaves them out, so nothing dropped here is lost.
func slimNode(obj any) (any, error) {
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

// cacheHTTPClient is the HTTP client of the manager's informers: a connection of their own to the API
// server, apart from the one that carries the controllers' reads and writes. On one shared HTTP/2
// connection a busy API server delivered our watches seconds late while a remediation wave's writes
// crowded the connection, and the remediator waited on its cache for its own writes. (A Proxy function
// makes client-go's transport cache hand out a transport of its own; it is the default's.)
func cacheHTTPClient(cfg *rest.Config) (*http.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Proxy = http.ProxyFromEnvironment
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the cache's HTTP client: %w", err)
	}
	return c, nil
}
