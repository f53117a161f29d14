#!/usr/bin/env bash
# JobSet (sigs.k8s.io/jobset) at a pinned version, from its Go module, for the real-node tier's job
# controller tests (tests/realnodes/test_jobset.py): the controller binary, its image, and its manifests.
#
#   hack/jobs/build-jobset.sh     # prints the output directory on the last line of stdout
#
# Into ~/.cache/gang-extender/jobset-v<version>/ (never committed):
#   jobset       the manager, static (CGO_ENABLED=0), built from a module that requires sigs.k8s.io/jobset
#                (`go install module@version` is refused here: the module proxy serves this module's
#                versions but not its version list, which go install reads for deprecations);
#   jobset.yaml  `kubectl kustomize` of the module's own config/default (CRDs, RBAC, the manager Deployment,
#                its webhooks and their self-signed certificate rotation), with the manager's image (the
#                release's, in a registry) replaced by ours;
# and the Docker image localhost/jobset:v<version> (the binary alone, as /manager, user 65532) that
# jobset.yaml names (pods find it in the nodes' containerd: imagePullPolicy IfNotPresent).
#
# Environment: JOBSET_VERSION (default 0.10.1), K8S_VERSION (kubectl's, default 1.35.4),
# GANG_EXTENDER_CACHE (cache root, default ${XDG_CACHE_HOME:-~/.cache}/gang-extender).
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/image/lib.sh

JOBSET_VERSION=${JOBSET_VERSION:-0.10.1}
K8S_VERSION=${K8S_VERSION:-1.35.4}
MODULE=sigs.k8s.io/jobset
IMAGE=localhost/jobset:v$JOBSET_VERSION
out="$GANG_CACHE/jobset-v$JOBSET_VERSION"

bin_dir=$(K8S_VERSION=$K8S_VERSION bash hack/build-k8s.sh | tail -n 1)
bash hack/image/docker-up.sh
mkdir -p "$out"
if [ ! -x "$out/jobset" ] || [ ! -s "$out/jobset.yaml" ]; then
  command -v go >/dev/null || { log jobset "go is not installed: cannot build JobSet"; exit 3; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  log jobset "fetching $MODULE v$JOBSET_VERSION"
  moddir=$(cd "$work" && go mod download -json "$MODULE@v$JOBSET_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  go_version=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$moddir/go.mod")
  printf 'module gangextender.local/jobsetbuild\n\ngo %s\n\nrequire %s v%s\n' "$go_version" "$MODULE" \
    "$JOBSET_VERSION" > "$work/go.mod"
  log jobset "building the manager (a few minutes on 2 cores the first time)"
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/jobset.tmp" "$MODULE") >&2
  mv "$out/jobset.tmp" "$out/jobset"
  # config/default names the release's image in a registry (its manager kustomization's `images:`).
  "$bin_dir/kubectl" kustomize "$moddir/config/default" \
    | sed "s|^\( *\)image: [^ ]*/jobset:v$JOBSET_VERSION\$|\1image: $IMAGE|" > "$out/jobset.yaml.tmp"
  [ "$(grep -c "image: $IMAGE\$" "$out/jobset.yaml.tmp")" = 1 ] || { log jobset "config/default: no manager image to replace"; exit 1; }
  mv "$out/jobset.yaml.tmp" "$out/jobset.yaml"
  "$DOCKER" rmi "$IMAGE" >/dev/null 2>&1 || true
fi
if ! image_exists "$IMAGE"; then
  log jobset "docker build $IMAGE"
  printf 'FROM scratch\nCOPY jobset /manager\nUSER 65532:65532\nENTRYPOINT ["/manager"]\n' |
    "$DOCKER" build -q -t "$IMAGE" -f - "$out" >/dev/null
fi
echo "$out"
