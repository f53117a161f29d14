#!/usr/bin/env bash
# Fetch the Prometheus Operator's CRDs for PrometheusRule and PodMonitor at a pinned version, from the
# Go module github.com/prometheus-operator/prometheus-operator (its example/prometheus-operator-crd/
# directory), into a cache outside the repository (never committed). Only those two CRD files are kept.
# tests/e2e/test_prometheus_operator.py installs them in a local control plane and dry-runs the chart's
# PrometheusRule and PodMonitor against them.
#
#   hack/fetch-prometheus-operator-crds.sh   # prints the CRD directory on the last line of stdout
#
# Environment:
#   PROMETHEUS_OPERATOR_VERSION  module version (default 0.85.0), into prometheus-operator-crds-v<version>
#   GANG_EXTENDER_CACHE          cache root (default ${XDG_CACHE_HOME:-~/.cache}/gang-extender)
#
# Exit code 3: the CRDs are not in the cache and go is not installed (the test then skips with a banner).
set -euo pipefail

PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-0.85.0}
MODULE=github.com/prometheus-operator/prometheus-operator
CRDS=(monitoring.coreos.com_prometheusrules.yaml monitoring.coreos.com_podmonitors.yaml)

log() { printf '[fetch-prometheus-operator-crds] %s\n' "$*" >&2; }

cache=${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}
out="$cache/prometheus-operator-crds-v$PROMETHEUS_OPERATOR_VERSION"
have=yes
for crd in "${CRDS[@]}"; do [ -s "$out/$crd" ] || have=no; done
if [ "$have" = yes ]; then echo "$out"; exit 0; fi
command -v go >/dev/null || { log "go is not installed: cannot fetch the Prometheus Operator CRDs"; exit 3; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # outside any module: "go mod download module@version" needs no go.mod
log "fetching $MODULE v$PROMETHEUS_OPERATOR_VERSION from the Go module proxy"
dir=$(go mod download -json "$MODULE@v$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -n "$dir" ] && [ -d "$dir/example/prometheus-operator-crd" ] || {
  log "no example/prometheus-operator-crd/ in $MODULE v$PROMETHEUS_OPERATOR_VERSION ($dir)"; exit 1; }
mkdir -p "$out.tmp"
for crd in "${CRDS[@]}"; do
  install -m 0644 "$dir/example/prometheus-operator-crd/$crd" "$out.tmp/$crd"
done
rm -rf "$out"
mv "$out.tmp" "$out"
log "kept ${CRDS[*]} in $out"
echo "$out"
