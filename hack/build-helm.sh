#!/usr/bin/env bash
# Build helm (helm.sh/helm/v3) at a pinned version from its Go module, into a cache outside the
# repository (never committed). The e2e tier lints and renders charts/gang-extender with it and installs
# the chart into a local control plane (tests/e2e/test_helm_*.py).
#
#   hack/build-helm.sh           # prints the bin directory on the last line of stdout
#
# Environment:
#   HELM_VERSION          helm release to build (default 3.22.0), into its own cache directory helm-v<version>
#   GANG_EXTENDER_CACHE   cache root (default ${XDG_CACHE_HOME:-~/.cache}/gang-extender)
#
# Exit code 3: helm is not built and go is not installed (the e2e fixtures then skip the helm tests).
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-3.22.0}
MODULE=helm.sh/helm/v3

log() { printf '[build-helm] %s\n' "$*" >&2; }

cache=${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}
out="$cache/helm-v$HELM_VERSION"
if [ -x "$out/helm" ]; then echo "$out"; exit 0; fi
command -v go >/dev/null || { log "go is not installed: cannot build helm"; exit 3; }

mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
step() { log "[$(( $(date +%s) - start ))s] $*"; }

cd "$work"  # outside any module, so "go install module@version" uses helm's own go.mod and go.sum
step "fetching $MODULE v$HELM_VERSION module metadata"
modfile=$(go mod download -json "$MODULE@v$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
# A release whose go.mod needs a newer Go than the one installed is built with the Go toolchain the
# module proxy serves (the only other Go reachable here), as hack/build-k8s.sh does.
need_go=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$modfile")
have_go=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -n1)" != "$need_go" ]; then
  export GOTOOLCHAIN=${GANG_EXTENDER_GOTOOLCHAIN:-go1.27.3}
  step "$MODULE v$HELM_VERSION needs go $need_go, this machine has go $have_go: using GOTOOLCHAIN=$GOTOOLCHAIN"
fi
# What helm's Makefile stamps in: its version, and the Kubernetes version of its client-go (1.<minor>)
# as the default .Capabilities.KubeVersion of `helm template` and `helm lint` (otherwise v1.20.0).
client_go=$(sed -n 's/^\s*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$modfile")
[ -n "$client_go" ] || { log "no k8s.io/client-go in $modfile"; exit 1; }
pkg=$MODULE
ldflags="-s -w -X $pkg/internal/version.version=v$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
for p in pkg/lint/rules pkg/chartutil; do
  ldflags="$ldflags -X $pkg/$p.k8sVersionMajor=1 -X $pkg/$p.k8sVersionMinor=$client_go"
done

step "building helm (a few minutes on 2 cores; the first run downloads its modules)"
mkdir -p "$work/bin"
GOBIN="$work/bin" CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" "$MODULE/cmd/helm@v$HELM_VERSION" >&2
mv "$work/bin/helm" "$out/helm.tmp"
mv "$out/helm.tmp" "$out/helm"
step "done"
echo "$out"
