// Package chart holds the tests that keep the Helm chart (charts/metalheal) in step with kustomize's
// config/default and config/cluster-api: `helm lint`; `helm template` rendering the objects each variant
// renders (default values for config/default, clusterAPI.enabled for config/cluster-api), less the
// differences docs/operations.md lists; each value doing what values.yaml says; the chart's copies of
// generated files (CRDs, the manager's roles) matching config/; and the real `helm install`, `helm upgrade`
// and `helm uninstall` of both variants against a real API server (envtest), which must then hold what the
// variant deploys, and two releases side by side. The tests run the helm and kustomize binaries in ./bin
// and etcd and kube-apiserver from $KUBEBUILDER_ASSETS or ./bin (`make test` installs them all) and fail,
// never skip, without them.
package chart
