#!/usr/bin/env bash
# Check the images of `make image` as a user runs them (hack/image/build.sh runs this last).
#
#   hack/image/check.sh
#
# gang-extender ($IMAGE):
#   - its configured user is 65532:65532 and a container runs as uid 65532, gid 65532;
#   - `serve --help` exits 0 with a read-only root filesystem and /tmp mounted;
#   - `gang-extender --version` says the hot path is compiled (every module of extender/native.py loads
#     as a C extension), or interpreted when COMPILE=0 built it, and /metrics' gang_extender_build_info
#     says the same;
#   - a real `serve --cluster-snapshot examples/snapshot.yaml` (read-only root, /tmp a tmpfs, the
#     snapshot mounted read-only, listening on 0.0.0.0:8888 published on a loopback port) answers
#     GET /readyz and GET /healthz with 200, /metrics with Prometheus text, and the chart's exec probe
#     (python urllib against 127.0.0.1:8888 inside the container) succeeds; nothing was written outside
#     /tmp (`docker diff` shows only the snapshot's mount point); SIGTERM (`docker stop`) ends it with exit code 0.
# kube-scheduler ($SCHEDULER_IMAGE): runs as 65532, `kube-scheduler --version` says v$K8S_VERSION with a
# read-only root filesystem.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/image/lib.sh

IMAGE=${IMAGE:-gang-extender:dev}
COMPILE=${COMPILE:-1}
K8S_VERSION=${K8S_VERSION:-1.35.4}
SCHEDULER_IMAGE=${SCHEDULER_IMAGE:-localhost/kube-scheduler:v$K8S_VERSION}
name="gang-extender-check-$$"

fail() { log check "FAIL: $*"; exit 1; }
cleanup() { "$DOCKER" rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT

user=$("$DOCKER" image inspect "$IMAGE" --format '{{.Config.User}}')
[ "$user" = "65532:65532" ] || fail "$IMAGE's user is '$user', not 65532:65532"
ids=$("$DOCKER" run --rm --read-only --entrypoint id "$IMAGE" -u)-$("$DOCKER" run --rm --read-only --entrypoint id "$IMAGE" -g)
[ "$ids" = "65532-65532" ] || fail "a container of $IMAGE runs as uid-gid $ids"
log check "$IMAGE runs as 65532:65532"

t0=$(date +%s%N)
help=$("$DOCKER" run --rm --read-only --tmpfs /tmp "$IMAGE" --help)
grep -q -- '--cluster-snapshot' <<<"$help" || fail "serve --help does not list --cluster-snapshot"
log check "serve --help with a read-only root: ok ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"

hot_path=$([ "$COMPILE" = 1 ] && echo compiled || echo interpreted)
version=$("$DOCKER" run --rm --read-only --tmpfs /tmp --entrypoint gang-extender "$IMAGE" --version)
grep -q "hot path: $hot_path " <<<"$version" || fail "COMPILE=$COMPILE: expected the hot path $hot_path: $version"
log check "$version"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
t0=$(date +%s%N)
"$DOCKER" run -d --name "$name" --read-only --tmpfs /tmp:rw,size=32m \
  -v "$PWD/examples/snapshot.yaml:/etc/gang-extender/snapshot.yaml:ro" -p "127.0.0.1:$port:8888" \
  "$IMAGE" --cluster-snapshot /etc/gang-extender/snapshot.yaml --host 0.0.0.0 --port 8888 >/dev/null
status() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port$1" || true; }
deadline=$(( $(date +%s) + 60 ))
until [ "$(status /readyz)" = 200 ]; do
  [ "$("$DOCKER" inspect -f '{{.State.Running}}' "$name")" = true ] || { "$DOCKER" logs "$name" >&2; fail "serve exited"; }
  [ "$(date +%s)" -lt "$deadline" ] || { "$DOCKER" logs "$name" >&2; fail "/readyz not 200 within 60 s"; }
  sleep 0.2
done
log check "serve --cluster-snapshot: /readyz 200 after $(( ($(date +%s%N) - t0) / 1000000 )) ms (docker run to first 200)"
[ "$(status /healthz)" = 200 ] || fail "/healthz is not 200"
# Read whole before grep: `curl | grep -q` fails under pipefail when grep stops reading first (SIGPIPE).
metrics=$(curl -sf "http://127.0.0.1:$port/metrics") || fail "GET /metrics failed"
grep -q '^# TYPE ' <<<"$metrics" || fail "/metrics is not Prometheus text"
grep -q "^gang_extender_build_info{.*hot_path=\"$hot_path\"" <<<"$metrics" \
  || fail "/metrics: no gang_extender_build_info with hot_path=\"$hot_path\""
"$DOCKER" exec "$name" python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8888/readyz', timeout=3)" \
  || fail "the chart's exec probe failed"
[ "$("$DOCKER" exec "$name" id -u)" = 65532 ] || fail "serve does not run as 65532"
# The snapshot's mount point (and its parents) are made by Docker, not by the extender.
changed=$("$DOCKER" diff "$name" | grep -v -x -e 'C /etc' -e 'A /etc/gang-extender' \
  -e 'A /etc/gang-extender/snapshot.yaml' || true)
[ -z "$changed" ] || fail "the container changed its root filesystem: $changed"
"$DOCKER" stop -t 20 "$name" >/dev/null
code=$("$DOCKER" inspect -f '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || { "$DOCKER" logs "$name" >&2; fail "serve exited $code on SIGTERM"; }
log check "serve: /healthz, /metrics, the exec probe, uid 65532, nothing written outside /tmp, exit 0 on SIGTERM: ok"

user=$("$DOCKER" image inspect "$SCHEDULER_IMAGE" --format '{{.Config.User}}')
[ "$user" = "65532:65532" ] || fail "$SCHEDULER_IMAGE's user is '$user'"
version=$("$DOCKER" run --rm --read-only "$SCHEDULER_IMAGE" --version)
[ "$version" = "Kubernetes v$K8S_VERSION" ] || fail "$SCHEDULER_IMAGE --version says '$version'"
log check "$SCHEDULER_IMAGE: $version, user 65532:65532, read-only root: ok"
for img in "$IMAGE" "$SCHEDULER_IMAGE"; do
  log check "$img: $(( $("$DOCKER" image inspect "$img" --format '{{.Size}}') / 1000000 )) MB"
done
