#!/usr/bin/env bash
# End-to-end on kind, with real kubelets, both topologies of docs/deploy.md, the image from ./Dockerfile.
#
# Needs Docker, kind (a release whose 1.35 node image manifests/kind/kind-config.yaml names), kubectl and
# the project's .venv (created with `make test-fast` or `make .venv/.installed` if missing).
#
#   1. create the cluster from manifests/kind/kind-config.yaml (Workload API on; the default
#      kube-scheduler already configured to call gang-extender on 127.0.0.1:8888);
#   2. docker build -t gang-extender:dev . ; kind load docker-image;
#   3. apply the PodGroup CRD and manifests/default-scheduler (the extender's ServiceAccount, token
#      Secret, RBAC and admission policy), write its kubeconfig (extender-kubeconfig.sh) to
#      /etc/kubernetes/gang-extender.conf and copy the extender's static pod
#      into /etc/kubernetes/manifests on every control-plane node (until it runs, nothing can be
#      scheduled: not CoreDNS, not the CNI; see docs/deploy.md for why it is not a DaemonSet);
#   4. deploy the second scheduler (manifests/second-scheduler) and wait for everything to be ready;
#   5. server-side dry-run of every kustomization under manifests/ against the kind API server;
#   6. pytest -m e2e tests/e2e/test_external_cluster.py against the cluster (the rest of tests/e2e starts
#      its own local control plane and does not need kind: run it with `make test`).
#
# Environment: KIND_CLUSTER_NAME (default gang-extender), IMAGE (default gang-extender:dev),
# KEEP_CLUSTER=1 to keep the cluster afterwards (a kept cluster is reused by the next run).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${KIND_CLUSTER_NAME:-gang-extender}"
IMAGE="${IMAGE:-gang-extender:dev}"
KEEP="${KEEP_CLUSTER:-0}"
KUBECONFIG_FILE="$PWD/.cache/kind-$CLUSTER.kubeconfig"
PYTHON="$PWD/.venv/bin/python"
TIMEOUT=300

log() { printf '[kind-e2e] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
k() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }

for tool in docker kind kubectl; do
    command -v "$tool" > /dev/null || die "$tool is required (and a running Docker daemon)"
done
docker info > /dev/null 2>&1 || die "the Docker daemon is not reachable"
[ -x "$PYTHON" ] || make .venv/.installed
mkdir -p .cache

# wait_until SECONDS DESCRIPTION COMMAND...: retry COMMAND every 2 s.
wait_until() {
    local seconds="$1" what="$2"
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" > /dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out after ${seconds}s waiting for $what"
        sleep 2
    done
}

diagnostics() {
    log "diagnostics:"
    k get nodes -o wide || true
    k get pods -A -o wide || true
    k -n kube-system logs -l app.kubernetes.io/name=gang-extender --tail=50 || true
    k -n gang-scheduler logs deployment/gang-scheduler --all-containers --tail=50 || true
}

finish() {
    local status=$?
    if ((status != 0)); then
        diagnostics
    fi
    if [ "$KEEP" = 1 ]; then
        log "cluster $CLUSTER kept: export KUBECONFIG=$KUBECONFIG_FILE"
    else
        kind delete cluster --name "$CLUSTER" || true
    fi
    exit "$status"
}

# 1. cluster
if kind get clusters 2> /dev/null | grep -qx "$CLUSTER"; then
    log "reusing kind cluster $CLUSTER"
    kind get kubeconfig --name "$CLUSTER" > "$KUBECONFIG_FILE"
else
    log "creating kind cluster $CLUSTER"
    kind create cluster --name "$CLUSTER" --config manifests/kind/kind-config.yaml --kubeconfig "$KUBECONFIG_FILE"
fi
trap finish EXIT

# 2. image
log "building $IMAGE"
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

# 3. default-scheduler topology
k apply -k manifests/crds
k wait --for=condition=Established crd/podgroups.scheduling.x-k8s.io --timeout=60s
k apply -k manifests/default-scheduler
static_pod="$(mktemp)"
sed "s|image: gang-extender:dev|image: $IMAGE|" manifests/default-scheduler/gang-extender-static-pod.yaml > "$static_pod"
control_planes=()
while IFS= read -r node; do
    [[ "$node" == *control-plane* ]] && control_planes+=("$node")
done < <(kind get nodes --name "$CLUSTER")
((${#control_planes[@]} > 0)) || die "no control-plane node in cluster $CLUSTER"
extender_kubeconfig="$(mktemp -d)/gang-extender.conf"
for node in "${control_planes[@]}"; do
    log "writing /etc/kubernetes/gang-extender.conf on $node (ServiceAccount gang-scheduler/gang-extender)"
    server="$(docker exec "$node" kubectl config view --kubeconfig /etc/kubernetes/scheduler.conf \
        -o jsonpath='{.clusters[0].cluster.server}')"
    wait_until 60 "the token of gang-scheduler/gang-extender" env KUBECONFIG="$KUBECONFIG_FILE" \
        manifests/default-scheduler/extender-kubeconfig.sh "$server" "$extender_kubeconfig"
    docker cp "$extender_kubeconfig" "$node:/etc/kubernetes/gang-extender.conf"
    docker exec "$node" sh -c 'chown 65532:65532 /etc/kubernetes/gang-extender.conf &&
        chmod 0400 /etc/kubernetes/gang-extender.conf'
    rm -f "$extender_kubeconfig"
    log "installing the gang-extender static pod on $node"
    docker cp "$static_pod" "$node:/etc/kubernetes/manifests/gang-extender.yaml"
    wait_until "$TIMEOUT" "gang-extender on $node" \
        k -n kube-system wait --for=condition=Ready "pod/gang-extender-$node" --timeout=5s
done
rm -f "$static_pod"
log "gang-extender is ready; waiting for the nodes and CoreDNS, which it lets the scheduler place"
k wait --for=condition=Ready nodes --all --timeout="${TIMEOUT}s"
k -n kube-system rollout status deployment/coredns --timeout="${TIMEOUT}s"

# 4. second-scheduler topology
k kustomize manifests/second-scheduler | sed "s|image: gang-extender:dev|image: $IMAGE|" | k apply -f -
k -n gang-scheduler rollout status deployment/gang-scheduler --timeout="${TIMEOUT}s"
lease_held() {
    local holder
    holder="$(k -n gang-scheduler get lease gang-scheduler -o jsonpath='{.spec.holderIdentity}')"
    [[ -n "$holder" ]]
}
wait_until 60 "gang-scheduler to hold its Lease" lease_held

# 5. every kustomization, server-side dry run against a real 1.35 cluster
for kustomization in manifests/*/kustomization.yaml; do
    dir="$(dirname "$kustomization")"
    log "dry run: $dir"
    k apply -k "$dir" --dry-run=server --validate=strict > /dev/null
done

# 6. the e2e tests that take an external cluster
log "running tests/e2e/test_external_cluster.py"
GANG_E2E_KUBECONFIG="$KUBECONFIG_FILE" GANG_E2E_KUBECTL="$(command -v kubectl)" \
    "$PYTHON" -m pytest -m e2e tests/e2e/test_external_cluster.py -q -p no:cacheprovider "$@"
