#!/usr/bin/env bash
# Builds a real local control plane into ./bin from the Go module proxy: etcd, kube-apiserver and
# kube-controller-manager. Prebuilt envtest binaries cannot be downloaded here, so we compile them.
# Each binary is built once and cached: a binary already in ./bin with a matching version stamp is kept.
#
#   hack/build-control-plane.sh [BIN_DIR]
#
# Versions are pinned below; change them together with go.mod's k8s.io/* versions.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"   # k8s.io/kubernetes
STAGING_VERSION="${STAGING_VERSION:-v0.36.3}" # its staging modules (k8s.io/api, client-go, ...)
ETCD_VERSION="${ETCD_VERSION:-v3.6.8}"

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$(mkdir -p "${1:-$root/bin}" && cd "${1:-$root/bin}" && pwd)"
work="${CONTROL_PLANE_WORKDIR:-$bin/.control-plane-src}"
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0

stamp_ok() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" >"$bin/.$1.version"; }

build_etcd() {
  if stamp_ok etcd "$ETCD_VERSION"; then echo "etcd $ETCD_VERSION: cached"; return; fi
  echo "building etcd $ETCD_VERSION (about a minute)"
  local d="$work/etcd"
  rm -rf "$d" && mkdir -p "$d"
  cat >"$d/main.go" <<'GO'
// Command etcd is etcd's server built from its module, for the local test control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$d" && go mod init localetcd >/dev/null 2>&1 && go mod edit -go=1.26 \
    && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 \
    && go mod tidy >/dev/null && go build -trimpath -o "$bin/etcd" .)
  stamp etcd "$ETCD_VERSION"
}

kube_module() {
  local d="$work/kube"
  if [ -f "$d/.ready-$KUBE_VERSION" ]; then return; fi
  rm -rf "$d" && mkdir -p "$d"
  local modfile
  modfile="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  (
    cd "$d"
    go mod init localkube >/dev/null 2>&1
    go mod edit -go=1.26 -require="k8s.io/kubernetes@$KUBE_VERSION"
    # k8s.io/kubernetes points its staging modules at ./staging; pin each to its published version.
    for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile"); do
      go mod edit -replace="$m=$m@$STAGING_VERSION"
    done
    cat >tools.go <<'GO'
//go:build tools

package localkube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
GO
    go mod tidy >/dev/null
  )
  touch "$d/.ready-$KUBE_VERSION"
}

build_kube() {
  local name="$1"
  if stamp_ok "$name" "$KUBE_VERSION"; then echo "$name $KUBE_VERSION: cached"; return; fi
  kube_module
  echo "building $name $KUBE_VERSION (a few minutes)"
  local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  local pkg=k8s.io/component-base/version
  (cd "$work/kube" && go build -trimpath -ldflags "-s -w \
      -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
      -X $pkg.gitTreeState=clean" -o "$bin/$name" "k8s.io/kubernetes/cmd/$name")
  stamp "$name" "$KUBE_VERSION"
}

targets=("${@:2}")
[ ${#targets[@]} -gt 0 ] || targets=(etcd kube-apiserver kube-controller-manager)
for t in "${targets[@]}"; do
  case "$t" in
    etcd) build_etcd ;;
    kube-apiserver|kube-controller-manager) build_kube "$t" ;;
    *) echo "unknown component $t" >&2; exit 2 ;;
  esac
done
