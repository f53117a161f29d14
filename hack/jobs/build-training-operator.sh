#!/usr/bin/env bash
# The Kubeflow training operator (github.com/kubeflow/training-operator) at a pinned version, from its Go
# module, for the real-node tier's job controller tests (tests/realnodes/test_training_operator.py).
#
#   hack/jobs/build-training-operator.sh     # prints the output directory on the last line of stdout
#
# Into ~/.cache/gang-extender/training-operator-v<version>/ (never committed):
#   training-operator       the manager (cmd/training-operator.v1), static, built from a module that requires
#                           the operator's (as hack/jobs/build-jobset.sh does);
#   training-operator.yaml  `kubectl kustomize` of the module's own manifests/overlays/standalone (namespace
#                           kubeflow: CRDs, RBAC, webhooks, the Deployment; the webhook certificate is made by
#                           the operator itself), with the manager's image replaced by ours and
#                           --gang-scheduler-name=gang-scheduler: the operator then makes a scheduler-plugins
#                           PodGroup (scheduling.x-k8s.io/v1alpha1) per job, labels its pods with it and gives
#                           them that schedulerName, the mechanism its documentation gives for scheduler-plugins;
# and the Docker image localhost/training-operator:v<version> (the binary alone, as /manager, user 65532).
#
# Environment: TRAINING_OPERATOR_VERSION (default 1.8.1), K8S_VERSION (kubectl's, default 1.35.4),
# GANG_EXTENDER_CACHE (cache root, default ${XDG_CACHE_HOME:-~/.cache}/gang-extender).
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/image/lib.sh

VERSION=${TRAINING_OPERATOR_VERSION:-1.8.1}
K8S_VERSION=${K8S_VERSION:-1.35.4}
MODULE=github.com/kubeflow/training-operator
IMAGE=localhost/training-operator:v$VERSION
out="$GANG_CACHE/training-operator-v$VERSION"

bin_dir=$(K8S_VERSION=$K8S_VERSION bash hack/build-k8s.sh | tail -n 1)
bash hack/image/docker-up.sh
mkdir -p "$out"
if [ ! -x "$out/training-operator" ] || [ ! -s "$out/training-operator.yaml" ]; then
  command -v go >/dev/null || { log training-operator "go is not installed: cannot build it"; exit 3; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  log training-operator "fetching $MODULE v$VERSION"
  moddir=$(cd "$work" && go mod download -json "$MODULE@v$VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  go_version=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$moddir/go.mod")
  printf 'module gangextender.local/trainingoperatorbuild\n\ngo %s\n\nrequire %s v%s\n' "$go_version" "$MODULE" \
    "$VERSION" > "$work/go.mod"
  if [ ! -x "$out/training-operator" ]; then
    log training-operator "building the manager (several minutes on 2 cores the first time)"
    (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
      -o "$out/training-operator.tmp" "$MODULE/cmd/training-operator.v1") >&2
    mv "$out/training-operator.tmp" "$out/training-operator"
  fi
  # The overlay names the manager's image kubeflow/training-operator:<tag>; its only argument is added here.
  "$bin_dir/kubectl" kustomize "$moddir/manifests/overlays/standalone" \
    | sed -e "s|^\\( *\\)image: kubeflow/training-operator:.*\$|\\1image: $IMAGE|" \
          -e "s|^\\( *\\)- /manager\$|\\1- /manager\\n\\1- --gang-scheduler-name=gang-scheduler|" \
    > "$out/training-operator.yaml.tmp"
  [ "$(grep -c "image: $IMAGE\$" "$out/training-operator.yaml.tmp")" = 1 ] \
    || { log training-operator "manifests: no manager image to replace"; exit 1; }
  [ "$(grep -c -- "- --gang-scheduler-name=gang-scheduler\$" "$out/training-operator.yaml.tmp")" = 1 ] \
    || { log training-operator "manifests: no /manager command to give --gang-scheduler-name"; exit 1; }
  mv "$out/training-operator.yaml.tmp" "$out/training-operator.yaml"
  "$DOCKER" rmi "$IMAGE" >/dev/null 2>&1 || true
fi
if ! image_exists "$IMAGE"; then
  log training-operator "docker build $IMAGE"
  printf 'FROM scratch\nCOPY training-operator /manager\nUSER 65532:65532\nENTRYPOINT ["/manager"]\n' |
    "$DOCKER" build -q -t "$IMAGE" -f - "$out" >/dev/null
fi
echo "$out"
