# kube-scheduler for charts/gang-extender, from the pinned binary hack/build-k8s.sh builds (static,
# CGO_ENABLED=0): the binary alone, no shell, no package. hack/image/build.sh builds it with the binary's
# directory as the context:
#   docker build -f hack/image/kube-scheduler.Dockerfile -t localhost/kube-scheduler:v1.35.4 <bin dir>
# The chart runs it as `kube-scheduler --config=...` (PATH below), as 65532 with a read-only root;
# it writes nothing (its serving certificate is self-signed in memory).
FROM scratch
COPY kube-scheduler /usr/local/bin/kube-scheduler
ENV PATH=/usr/local/bin
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kube-scheduler"]
