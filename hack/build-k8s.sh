#!/usr/bin/env bash
# Build the real Kubernetes control-plane binaries the e2e tests and the demo need, from their Go
# modules at pinned versions, into a cache outside the repository (never committed).
#
#   hack/build-k8s.sh            # prints the bin directory on the last line of stdout
#
# Environment:
#   K8S_VERSION           Kubernetes release to build (default 1.35.4; the e2e suite also uses 1.37.2),
#                         each into its own cache directory k8s-v<version>
#   KUBEBUILDER_ASSETS    a directory that already holds etcd, kube-apiserver, ... : used as is
#   K8S_EXTRA_BINARIES    more commands of k8s.io/kubernetes/cmd to build into the same directory, e.g.
#                         "kubelet kube-proxy" (hack/real-nodes/build.sh: the real-node tier)
#   GANG_EXTENDER_CACHE   cache root (default ${XDG_CACHE_HOME:-~/.cache}/gang-extender)
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.35.4}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
read -r -a EXTRA <<< "${K8S_EXTRA_BINARIES:-}"
NEEDED=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl "${EXTRA[@]}")

log() { printf '[build-k8s] %s\n' "$*" >&2; }

have_all() {
  local dir=$1 b
  for b in "${NEEDED[@]}"; do [ -x "$dir/$b" ] || return 1; done
}

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  if have_all "$KUBEBUILDER_ASSETS"; then echo "$KUBEBUILDER_ASSETS"; exit 0; fi
  log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks one of: ${NEEDED[*]}"; exit 1
fi

cache=${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}
out="$cache/k8s-v$K8S_VERSION/bin"
if have_all "$out"; then echo "$out"; exit 0; fi
command -v go >/dev/null || { log "go is not installed: cannot build Kubernetes binaries"; exit 3; }

mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
step() { log "[$(( $(date +%s) - start ))s] $*"; }

# --- kube-apiserver, kube-controller-manager, kube-scheduler, kubectl ----------------------------
step "fetching k8s.io/kubernetes v$K8S_VERSION module metadata"
mkdir -p "$work/k8s" && cd "$work/k8s"
modfile=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
staging_version="v0.${K8S_VERSION#1.}"
# A release whose go.mod needs a newer Go than the one installed is built with the Go toolchain the
# module proxy serves (the only other Go reachable here). 1.35.x and 1.37.x need go1.25/go1.26.
need_go=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$modfile")
have_go=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -n1)" != "$need_go" ]; then
  export GOTOOLCHAIN=${GANG_EXTENDER_GOTOOLCHAIN:-go1.27.3}
  step "k8s.io/kubernetes v$K8S_VERSION needs go $need_go, this machine has go $have_go: using GOTOOLCHAIN=$GOTOOLCHAIN"
fi
{
  echo "module gangextender.local/k8sbuild"
  echo
  sed -n 's/^go \(.*\)/go \1/p' "$modfile"
  echo
  echo "require k8s.io/kubernetes v$K8S_VERSION"
  echo
  echo "replace ("
  # Every staging module k8s.io/kubernetes replaces with ./staging/... is published at v0.<minor>.<patch>.
  sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 '"$staging_version"'#p' "$modfile"
  echo ")"
} > go.mod
echo 'package main' > tools.go  # keeps "go mod tidy" from complaining about an empty module
step "resolving dependencies (first run downloads a few hundred MB of modules)"
GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION" >&2
missing=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl "${EXTRA[@]}"; do
  if [ -x "$out/$b" ]; then step "$b already built"; else missing+=("$b"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  # One go build for all of them: the packages they share compile once and the links run in parallel
  # (one build per binary linked them one after another).
  step "building ${missing[*]} (several minutes on 2 cores)"
  mkdir -p "$work/bin"
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
    -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}" \
    -o "$work/bin/" "${missing[@]/#/k8s.io/kubernetes/cmd/}" >&2
  for b in "${missing[@]}"; do mv "$work/bin/$b" "$out/$b"; done
fi

# --- etcd -----------------------------------------------------------------------------------------
# Every release uses the same etcd: built once into its own cache directory, copied into each release's.
etcd_dir="$cache/etcd-v$ETCD_VERSION"
if [ ! -x "$out/etcd" ]; then
  if [ ! -x "$etcd_dir/etcd" ]; then
    step "building etcd v$ETCD_VERSION"
    mkdir -p "$work/etcd" "$etcd_dir" && cd "$work/etcd"
    printf 'module gangextender.local/etcdbuild\n\ngo 1.24\n' > go.mod
    echo 'package main' > tools.go
    GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >&2
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$etcd_dir/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
    mv "$etcd_dir/etcd.tmp" "$etcd_dir/etcd"
  fi
  cp "$etcd_dir/etcd" "$out/etcd.tmp" && mv "$out/etcd.tmp" "$out/etcd"
fi
step "done"
echo "$out"
