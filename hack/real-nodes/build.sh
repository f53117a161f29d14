#!/usr/bin/env bash
# Everything the real-node tier (hack/real-nodes/realnodes.py) runs, built or installed here:
#
#   hack/real-nodes/build.sh     # prints the Kubernetes bin directory on the last line of stdout
#
# - Debian packages, with apt when missing: docker.io (its containerd 1.6, ctr and runc run the nodes'
#   containers; hack/image/docker-up.sh also starts dockerd for the image builds), iptables,
#   containernetworking-plugins (bridge, host-local, firewall, loopback in /usr/lib/cni), conntrack
#   (kube-proxy clears stale UDP flows with it) and nftables (the tear-down deletes with `nft` the
#   nf_tables tables iptables-nft made for the tier);
# - kubelet and kube-proxy from the pinned k8s.io/kubernetes module, next to the control plane's
#   binaries (hack/build-k8s.sh with K8S_EXTRA_BINARIES; about 40 s with a warm Go build cache, 4 min cold);
# - the pause program (hack/real-nodes/pause/main.go, static) into ~/.cache/gang-extender/real-nodes/,
#   imported into Docker as PAUSE_IMAGE (default localhost/gang-extender-pause:1; about 1.5 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/image/lib.sh

K8S_VERSION=${K8S_VERSION:-1.35.4}
PAUSE_IMAGE=${PAUSE_IMAGE:-localhost/gang-extender-pause:1}

bash hack/image/docker-up.sh
apt_ensure /usr/sbin/iptables iptables /usr/lib/cni/bridge containernetworking-plugins \
  /usr/sbin/conntrack conntrack /usr/bin/containerd containerd /usr/sbin/nft nftables
bin_dir=$(K8S_VERSION=$K8S_VERSION K8S_EXTRA_BINARIES="kubelet kube-proxy" bash hack/build-k8s.sh | tail -n 1)

out="$GANG_CACHE/real-nodes/pause"
src=hack/real-nodes/pause/main.go
if [ ! -x "$out/pause" ] || [ "$src" -nt "$out/pause" ]; then
  log real-nodes "building the pause program ($src)"
  mkdir -p "$out"
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/pause.tmp" "$src"
  mv "$out/pause.tmp" "$out/pause"
  "$DOCKER" rmi "$PAUSE_IMAGE" >/dev/null 2>&1 || true
fi
if ! image_exists "$PAUSE_IMAGE"; then
  log real-nodes "importing $out/pause as $PAUSE_IMAGE"
  tar -C "$out" --owner=0 --group=0 -c pause |
    "$DOCKER" import --change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535' - "$PAUSE_IMAGE" >/dev/null
fi
echo "$bin_dir"
