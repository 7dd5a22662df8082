#!/usr/bin/env bash
# Enforces the package boundaries of STYLE.md on non-test code:
#   api/**           imports only the standard library, k8s.io/api and k8s.io/apimachinery
#   pkg/bmc, pkg/leases   import neither api/ nor controllers/
#   controllers/X    never imports controllers/Y
#   production code  never imports test/
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
fail=0
deps() { go list -f '{{join .Imports "\n"}}' "$1" 2>/dev/null | sort -u; }
complain() { echo "import boundary: $1"; fail=1; }

for p in $(go list ./api/...); do
  for i in $(deps "$p"); do
    case "$i" in
      k8s.io/api/*|k8s.io/apimachinery/*) ;;
      *.*/*) complain "$p imports $i (api packages may import only the standard library, k8s.io/api and k8s.io/apimachinery)" ;;
    esac
  done
done
for p in $(go list ./pkg/...); do
  for i in $(deps "$p"); do
    case "$i" in
      "$mod"/api/*|"$mod"/controllers/*|"$mod"/internal/*) complain "$p imports $i (pkg/ libraries must not import api/, controllers/ or internal/)" ;;
    esac
  done
done
for p in $(go list ./controllers/...); do
  own=${p#"$mod"/controllers/}; own=${own%%/*}
  for i in $(deps "$p"); do
    case "$i" in
      "$mod"/controllers/*)
        other=${i#"$mod"/controllers/}; other=${other%%/*}
        [ "$other" = "$own" ] || complain "$p imports $i (controllers never import each other; share through internal/)" ;;
    esac
  done
done
for p in $(go list ./cmd/... ./controllers/... ./pkg/... ./internal/... | grep -v '/internal/testenv'); do
  for i in $(deps "$p"); do
    case "$i" in "$mod"/test/*|"$mod"/internal/testenv) complain "$p imports $i (production code never imports test helpers)" ;; esac
  done
done
exit $fail
