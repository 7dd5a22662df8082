#!/usr/bin/env bash
# An example peer for `bench --controller-cmd`: metalheal's own NodeHealthCheck controller, set up the way
# any other health checker would be, through the BENCH_* variables the bench exports. It checks the bench
# itself in peer mode (the numbers should match a normal run's detection), and it is the shape to copy
# for another checker (medik8s' NodeHealthCheck, say): create your objects with $KUBECONFIG, then exec
# your controller in the foreground.
#
#   go build -o bin/manager ./cmd
#   go run ./test/bench --controller-cmd=test/bench/peer-metalheal.sh --nodes=500
#
# Variables from the bench: KUBECONFIG (a user in system:masters), BENCH_NAMESPACE, BENCH_NODE_SELECTOR,
# BENCH_UNHEALTHY_DURATION, BENCH_NODES, BENCH_REMEDIATION_KIND, BENCH_ADMIN_KUBECONFIG.
set -euo pipefail
cd "$(dirname "$0")/../.."

kubectl apply -f - <<EOF
apiVersion: remediation.metalheal.io/v1alpha1
kind: PowerCycleRemediationTemplate
metadata:
  name: peer
  namespace: ${BENCH_NAMESPACE}
spec:
  template:
    spec:
      strategy: reboot
---
apiVersion: remediation.metalheal.io/v1alpha1
kind: NodeHealthCheck
metadata:
  name: peer
spec:
  selector:
    matchExpressions:
    - key: ${BENCH_NODE_SELECTOR}
      operator: Exists
  unhealthyConditions:
  - {type: Ready, status: "False", duration: ${BENCH_UNHEALTHY_DURATION}}
  - {type: Ready, status: Unknown, duration: ${BENCH_UNHEALTHY_DURATION}}
  remediationTemplate:
    apiVersion: remediation.metalheal.io/v1alpha1
    kind: PowerCycleRemediationTemplate
    name: peer
    namespace: ${BENCH_NAMESPACE}
EOF

# Only the health checker: in peer mode the bench heals the nodes itself once it sees their requests.
exec bin/manager --controllers=nodehealthcheck --namespace="${BENCH_NAMESPACE}" \
  --metrics-bind-address=0 --health-probe-bind-address=0 --zap-devel=false
