#!/usr/bin/env bash
# Make Debian's Docker engine ready for image builds on this machine.
#
#   hack/image/docker-up.sh
#
# Installs docker.io (Debian's Docker 20.10 with containerd and runc) with apt if /usr/bin/docker or
# /usr/sbin/dockerd is missing, and mmdebstrap (hack/image/base.sh makes the bases with it). If no
# Docker daemon answers on /var/run/docker.sock, starts dockerd as a plain background process (there
# is no systemd here), its log in ~/.cache/gang-extender/images/dockerd.log, and waits until it
# answers. An already running daemon is used as it is; a daemon started here is left running
# (stop it with `kill $(cat /var/run/docker.pid)`).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

apt_ensure /usr/bin/docker docker.io /usr/sbin/dockerd docker.io /usr/bin/mmdebstrap mmdebstrap
# The Debian CLI's BuildKit needs no buildx; say which CLI builds so a wrong one is easy to spot.
if "$DOCKER" info >/dev/null 2>&1; then
  log docker-up "Docker daemon already running ($("$DOCKER" version --format '{{.Server.Version}}'))"
  exit 0
fi
mkdir -p "$IMAGE_CACHE"
log docker-up "starting dockerd (log: $IMAGE_CACHE/dockerd.log)"
setsid /usr/sbin/dockerd >>"$IMAGE_CACHE/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 1 300); do
  if "$DOCKER" info >/dev/null 2>&1; then
    log docker-up "dockerd $("$DOCKER" version --format '{{.Server.Version}}') is up"
    exit 0
  fi
  kill -0 $! 2>/dev/null || { tail -n 20 "$IMAGE_CACHE/dockerd.log" >&2; log docker-up "dockerd exited"; exit 1; }
  sleep 0.2
done
tail -n 20 "$IMAGE_CACHE/dockerd.log" >&2
log docker-up "dockerd did not answer within 60 s"
exit 1
