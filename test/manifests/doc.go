// Package manifests tests the deployable manifests: `kustomize build config/default` must render and
// every object it renders must be accepted by a real API server.
package manifests
