#!/bin/sh
# Writes the kubeconfig of the gang-extender static pod: the token of the ServiceAccount
# gang-scheduler/gang-extender and the cluster CA, both read from the Secret gang-extender-token
# (manifests/rbac), and the API server URL given. Run it on each control-plane node (as root, with an
# administrator's kubeconfig) after `kubectl apply -k manifests/default-scheduler`:
#
#   sudo KUBECONFIG=/etc/kubernetes/admin.conf manifests/default-scheduler/extender-kubeconfig.sh \
#       "$(sudo kubectl config view --kubeconfig /etc/kubernetes/scheduler.conf -o jsonpath='{.clusters[0].cluster.server}')"
#
# Usage: extender-kubeconfig.sh SERVER [OUTPUT]   (OUTPUT: /etc/kubernetes/gang-extender.conf)
# Environment: KUBECTL (default kubectl); OWNER (default 65532:65532, the static pod's user; applied
# when run as root). The file is written with mode 0400 and replaced atomically; the token never
# appears on a command line.
set -eu

die() { echo "extender-kubeconfig.sh: $*" >&2; exit 1; }

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    die "usage: $0 SERVER [OUTPUT]"
fi
server=$1
output=${2:-/etc/kubernetes/gang-extender.conf}
kubectl=${KUBECTL:-kubectl}
owner=${OWNER:-65532:65532}
case $server in
    https://*) ;;
    *) die "SERVER must be an https:// URL, got '$server'" ;;
esac

secret() {
    "$kubectl" --namespace gang-scheduler get secret gang-extender-token -o "jsonpath={.data.$1}"
}
token=$(secret token | base64 -d) || die "cannot read the Secret gang-scheduler/gang-extender-token"
ca=$(secret 'ca\.crt') || die "cannot read the Secret gang-scheduler/gang-extender-token"
if [ -z "$token" ] || [ -z "$ca" ]; then
    die "the Secret gang-scheduler/gang-extender-token has no token yet (is kube-controller-manager running?)"
fi

umask 077
tmp=$(mktemp "$output.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat > "$tmp" <<CONFIG
apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: $server
    certificate-authority-data: $ca
users:
- name: gang-extender
  user:
    token: $token
contexts:
- name: gang-extender
  context:
    cluster: kubernetes
    user: gang-extender
    namespace: gang-scheduler
current-context: gang-extender
CONFIG
chmod 0400 "$tmp"
if [ "$(id -u)" = 0 ]; then
    chown "$owner" "$tmp"
fi
mv -f "$tmp" "$output"
trap - EXIT
echo "wrote $output (ServiceAccount gang-scheduler/gang-extender, server $server)"
