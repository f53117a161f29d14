#!/usr/bin/env bash
# Build kwok (sigs.k8s.io/kwok, "Kubernetes WithOut Kubelet") at a pinned version from its Go module,
# into a cache outside the repository (never committed). The e2e tier runs it as a stand-in for
# kubelets: it marks pods on its nodes Running, completes their graceful deletion and keeps its nodes
# Ready (hack/kwok_harness.py, hack/kwok-stages.yaml, docs/e2e.md).
#
#   hack/build-kwok.sh           # prints the bin directory on the last line of stdout
#
# Environment:
#   KWOK_VERSION          kwok release to build (default 0.8.0), into its own cache directory kwok-v<version>
#   GANG_EXTENDER_CACHE   cache root (default ${XDG_CACHE_HOME:-~/.cache}/gang-extender)
#
# Exit code 3: kwok is not built and go is not installed (the e2e fixtures then skip the kwok tests).
set -euo pipefail

KWOK_VERSION=${KWOK_VERSION:-0.8.0}
MODULE=sigs.k8s.io/kwok

log() { printf '[build-kwok] %s\n' "$*" >&2; }

cache=${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}
out="$cache/kwok-v$KWOK_VERSION"
if [ -x "$out/kwok" ]; then echo "$out"; exit 0; fi
command -v go >/dev/null || { log "go is not installed: cannot build kwok"; exit 3; }

mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
step() { log "[$(( $(date +%s) - start ))s] $*"; }

cd "$work"  # outside any module, so "go install module@version" uses kwok's own go.mod and go.sum
step "fetching $MODULE v$KWOK_VERSION module metadata"
modfile=$(go mod download -json "$MODULE@v$KWOK_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
# A release whose go.mod needs a newer Go than the one installed is built with the Go toolchain the
# module proxy serves (the only other Go reachable here), as hack/build-k8s.sh does.
need_go=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$modfile")
have_go=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -n1)" != "$need_go" ]; then
  export GOTOOLCHAIN=${GANG_EXTENDER_GOTOOLCHAIN:-go1.27.3}
  step "$MODULE v$KWOK_VERSION needs go $need_go, this machine has go $have_go: using GOTOOLCHAIN=$GOTOOLCHAIN"
fi

step "building kwok (a few minutes on 2 cores; the first run downloads its modules)"
mkdir -p "$work/bin"
GOBIN="$work/bin" CGO_ENABLED=0 go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" \
  "$MODULE/cmd/kwok@v$KWOK_VERSION" >&2
mv "$work/bin/kwok" "$out/kwok.tmp"
mv "$out/kwok.tmp" "$out/kwok"
step "done"
echo "$out"
