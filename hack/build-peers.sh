#!/usr/bin/env bash
# Builds the peers metalheal must interoperate with, from the Go module proxy at pinned versions, into ./bin:
#   bin/capi-manager  Cluster API's core manager (sigs.k8s.io/cluster-api, package ./core)
#   bin/nhc-manager   medik8s node-healthcheck-operator's manager (package ./cmd)
# and renders, with bin/kustomize, each peer's own config/default from its module source into
# bin/peers/<peer>/default.yaml (CRDs, namespace, service account, RBAC, webhooks, Deployment), exactly as
# the peer ships it: test/e2e-interop installs its RBAC unchanged (never a widened role).
# Each binary is built once and cached: a binary with a matching version stamp is kept (like
# hack/build-control-plane.sh).
#
#   hack/build-peers.sh [BIN_DIR] [capi|nhc ...]
set -euo pipefail

CAPI_VERSION="${CAPI_VERSION:-v1.14.2}"
NHC_VERSION="${NHC_VERSION:-v0.12.0}"
# node-healthcheck-operator v0.12.0 requires k8s.io/kube-aggregator v0.34.7 (indirectly), which the module
# proxy does not serve; v0.34.3 is API-identical for what the operator uses.
NHC_KUBE_AGGREGATOR="${NHC_KUBE_AGGREGATOR:-v0.34.3}"

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$(mkdir -p "${1:-$root/bin}" && cd "${1:-$root/bin}" && pwd)"
work="${PEERS_WORKDIR:-$bin/.peers-src}"
kustomize="${KUSTOMIZE:-$bin/kustomize}"
export CGO_ENABLED=0

stamp_ok() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$2" ] \
  && [ -s "$bin/peers/$3/default.yaml" ]; }
stamp() { echo "$2" >"$bin/.$1.version"; }

# module_copy PATH VERSION DIR: a writable copy of the module's source (the module cache is read-only).
module_copy() {
  local src
  src="$(go mod download -json "$1@$2" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  rm -rf "$3" && mkdir -p "$(dirname "$3")" && cp -r "$src" "$3" && chmod -R u+w "$3"
}

# render_peer PEER SRC_CONFIG_DIR: what the peer's config/default renders.
render_peer() {
  local out="$bin/peers/$1"
  rm -rf "$out" && mkdir -p "$out"
  "$kustomize" build "$2/default" >"$out/default.yaml" 2> >(grep -v "commonLabels' is deprecated" >&2)
}

build_capi() {
  if stamp_ok capi-manager "$CAPI_VERSION" capi; then echo "capi-manager $CAPI_VERSION: cached"; return; fi
  echo "building Cluster API core manager $CAPI_VERSION (several minutes)"
  local d="$work/cluster-api"
  module_copy sigs.k8s.io/cluster-api "$CAPI_VERSION" "$d"
  (
    cd "$d"
    # Its ./api is a nested module (replaced by a path that the published zip leaves out): use the
    # published sigs.k8s.io/cluster-api/api at the same version.
    go mod edit -dropreplace=sigs.k8s.io/cluster-api/api -require="sigs.k8s.io/cluster-api/api@$CAPI_VERSION"
    GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin/capi-manager" ./core
  )
  render_peer capi "$d/core/config"
  stamp capi-manager "$CAPI_VERSION"
}

build_nhc() {
  if stamp_ok nhc-manager "$NHC_VERSION" nhc; then echo "nhc-manager $NHC_VERSION: cached"; return; fi
  echo "building medik8s node-healthcheck-operator $NHC_VERSION (several minutes)"
  local d="$work/node-healthcheck-operator"
  module_copy github.com/medik8s/node-healthcheck-operator "$NHC_VERSION" "$d"
  (
    cd "$d"
    go mod edit -replace="k8s.io/kube-aggregator=k8s.io/kube-aggregator@$NHC_KUBE_AGGREGATOR"
    GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin/nhc-manager" ./cmd
  )
  render_peer nhc "$d/config"
  stamp nhc-manager "$NHC_VERSION"
}

targets=("${@:2}")
[ ${#targets[@]} -gt 0 ] || targets=(capi nhc)
for t in "${targets[@]}"; do
  case "$t" in
    capi) build_capi ;;
    nhc) build_nhc ;;
    *) echo "unknown peer $t" >&2; exit 2 ;;
  esac
done
