// Package peers runs the health checkers metalheal is measured and tested against, as their projects ship
// them: Cluster API's core manager and medik8s' node-healthcheck-operator, built by hack/build-peers.sh into
// ./bin with what `kustomize build config/default` renders of each one's repository beside it
// (bin/peers/<peer>/default.yaml).
//
// A peer runs as a local process under its own service account and RBAC, exactly as rendered (never a
// widened role). Load splits the rendering into the CRDs (installed with the world), what is applied as it
// is (namespace, service account, roles, bindings, webhook configurations) and the Deployment (where the
// peer runs, as whom, with which flags); every webhook it declares, admission and CRD conversion, is
// pointed at the local process with a CA of our own (WebhookPKI). ClusterAPIArgs and Medik8sArgs say the
// few flags that differ from a pod's. test/e2e-interop and test/bench both run the peers through it.
package peers
