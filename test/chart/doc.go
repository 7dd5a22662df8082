// Package chart holds the tests that keep the Helm chart (charts/metalheal) in step with kustomize's
// config/default: `helm lint`; `helm template` with default values rendering the objects config/default
// renders, less the differences docs/operations.md lists; each value doing what values.yaml says; the
// chart's copies of generated files (CRDs, the manager's roles) matching config/; and a real API server
// taking two releases side by side. The tests run the helm and kustomize binaries in ./bin (`make tools`
// builds them) and fail, never skip, without them.
package chart
