#!/usr/bin/env bash
# `make image`: build the gang-extender image from ./Dockerfile and the kube-scheduler image the chart
# runs beside it, offline (no image registry), then check both as a user would (hack/image/check.sh).
#
#   hack/image/build.sh
#
# 1. hack/image/docker-up.sh: Debian's Docker engine (installed with apt if missing; dockerd started as
#    a plain process if none runs);
# 2. hack/image/base.sh: Python 3.11 bases made from Debian bookworm packages (mmdebstrap, docker
#    import), used as PYTHON_IMAGE in place of python:3.11-slim and (with gcc and Python's headers, for
#    mypyc) as BUILDER_IMAGE in place of python:3.11 (the Dockerfile's defaults, for users);
# 3. docker build of ./Dockerfile with Debian's CLI (BuildKit built in), the host network and this
#    machine's CA bundle as the build secret pip-ca (what pip on this machine trusts);
# 4. kube-scheduler v$K8S_VERSION from hack/build-k8s.sh's binary, hack/image/kube-scheduler.Dockerfile;
# 5. hack/image/check.sh.
#
# Environment: IMAGE (default gang-extender:dev), COMPILE (default 1: the hot path compiled by mypyc;
# 0: interpreted), SCHEDULER_IMAGE (default localhost/kube-scheduler:v$K8S_VERSION), K8S_VERSION (default 1.35.4), PIP_CA (default $PIP_CERT,
# $SSL_CERT_FILE, then /etc/ssl/certs/ca-certificates.crt), NO_CHECK=1 to skip step 5.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/image/lib.sh

IMAGE=${IMAGE:-gang-extender:dev}
COMPILE=${COMPILE:-1}
K8S_VERSION=${K8S_VERSION:-1.35.4}
SCHEDULER_IMAGE=${SCHEDULER_IMAGE:-localhost/kube-scheduler:v$K8S_VERSION}
PIP_CA=${PIP_CA:-${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}

base=$(bash hack/image/base.sh | tail -n 1)
builder=$(bash hack/image/base.sh builder | tail -n 1)

secret=()
if [ -s "$PIP_CA" ]; then secret=(--secret "id=pip-ca,src=$PIP_CA"); fi
t0=$(date +%s)
log image "docker build -t $IMAGE --build-arg PYTHON_IMAGE=$base BUILDER_IMAGE=$builder COMPILE=$COMPILE" \
  "(host network${secret:+, CA bundle $PIP_CA})"
"$DOCKER" build --progress=plain --network host "${secret[@]}" --build-arg "PYTHON_IMAGE=$base" \
  --build-arg "BUILDER_IMAGE=$builder" --build-arg "COMPILE=$COMPILE" -t "$IMAGE" . >&2
size=$("$DOCKER" image inspect "$IMAGE" --format '{{.Size}}')
log image "$IMAGE built in $(( $(date +%s) - t0 ))s: $(( size / 1000000 )) MB ($size bytes)"

bin_dir=$(K8S_VERSION=$K8S_VERSION bash hack/build-k8s.sh | tail -n 1)
t0=$(date +%s)
log image "docker build -t $SCHEDULER_IMAGE from $bin_dir/kube-scheduler"
"$DOCKER" build --progress=plain -f hack/image/kube-scheduler.Dockerfile \
  --label "org.opencontainers.image.version=v$K8S_VERSION" -t "$SCHEDULER_IMAGE" "$bin_dir" >&2
size=$("$DOCKER" image inspect "$SCHEDULER_IMAGE" --format '{{.Size}}')
log image "$SCHEDULER_IMAGE built in $(( $(date +%s) - t0 ))s: $(( size / 1000000 )) MB"

if [ "${NO_CHECK:-0}" != 1 ]; then
  IMAGE=$IMAGE COMPILE=$COMPILE SCHEDULER_IMAGE=$SCHEDULER_IMAGE K8S_VERSION=$K8S_VERSION bash hack/image/check.sh
fi
