#!/usr/bin/env bash
# Build promtool (github.com/prometheus/prometheus/cmd/promtool) at a pinned version from its Go
# module, into a cache outside the repository (never committed). The tests run it on the alert rules
# (`promtool check rules`, `promtool test rules`: tests/unit/test_alert_rules.py,
# tests/e2e/test_monitoring.py, docs/runbook.md).
#
#   hack/build-promtool.sh           # prints the bin directory on the last line of stdout
#
# Environment:
#   PROMETHEUS_VERSION    Go module version of github.com/prometheus/prometheus (default 0.316.0),
#                         built into its own cache directory promtool-v<version>
#   GANG_EXTENDER_CACHE   cache root (default ${XDG_CACHE_HOME:-~/.cache}/gang-extender)
#
# Exit code 3: promtool is not built and go is not installed (the tests then skip with a banner).
set -euo pipefail

PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-0.316.0}
MODULE=github.com/prometheus/prometheus

log() { printf '[build-promtool] %s\n' "$*" >&2; }

cache=${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}
out="$cache/promtool-v$PROMETHEUS_VERSION"
if [ -x "$out/promtool" ]; then echo "$out"; exit 0; fi
command -v go >/dev/null || { log "go is not installed: cannot build promtool"; exit 3; }

mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
step() { log "[$(( $(date +%s) - start ))s] $*"; }

cd "$work"  # outside any module, so "go install module@version" uses Prometheus' own go.mod and go.sum
step "fetching $MODULE v$PROMETHEUS_VERSION module metadata"
modfile=$(go mod download -json "$MODULE@v$PROMETHEUS_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
# A release whose go.mod needs a newer Go than the one installed is built with the Go toolchain the
# module proxy serves, as hack/build-k8s.sh does.
need_go=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$modfile")
have_go=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -n1)" != "$need_go" ]; then
  export GOTOOLCHAIN=${GANG_EXTENDER_GOTOOLCHAIN:-go1.27.3}
  step "$MODULE v$PROMETHEUS_VERSION needs go $need_go, this machine has go $have_go: using GOTOOLCHAIN=$GOTOOLCHAIN"
fi

step "building promtool only (a few minutes on 2 cores; the first run downloads its modules)"
mkdir -p "$work/bin"
# remove_all_sd: without Prometheus' service-discovery plugins (cloud SDKs) promtool builds in half the
# time (2 min 29 s against 5 min 04 s with the modules downloaded and an empty build cache); rule checks
# and rule tests, all the project runs, do not use them.
GOWORK=off GOBIN="$work/bin" CGO_ENABLED=0 go install -trimpath -tags remove_all_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION" \
  "$MODULE/cmd/promtool@v$PROMETHEUS_VERSION" >&2
mv "$work/bin/promtool" "$out/promtool.tmp"
mv "$out/promtool.tmp" "$out/promtool"
step "done"
echo "$out"
