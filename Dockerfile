# gang-extender image: `docker build -t gang-extender:dev .` (BuildKit: DOCKER_BUILDKIT=1 or buildx)
#
# Two stages (`make image` builds both bases itself from Debian bookworm packages, hack/image/base.sh):
#   builder  BUILDER_IMAGE (default python:3.11, which has gcc and Python's headers) builds the
#            gang-extender wheel and a wheel of every dependency (needs the network; a CA bundle given
#            as the build secret `pip-ca`, e.g. `--secret id=pip-ca,src=/etc/ssl/certs/
#            ca-certificates.crt`, is the one pip trusts, for a network whose TLS is re-signed; it is
#            mounted for that step only and is not in any layer). With COMPILE=1 (the default) the
#            wheel carries the hot-path modules compiled by mypyc (extender/native.py lists them,
#            docs/decisions/0005): mypy, setuptools and the dependencies go into a throw-away venv, and
#            setup.py compiles with GANG_EXTENDER_COMPILE=1. `--build-arg COMPILE=0` builds the pure
#            wheel instead (the same source, interpreted).
#   runtime  PYTHON_IMAGE (default python:3.11-slim: the same CPython 3.11 as the builder, which the
#            compiled modules are built for) installs those wheels, offline, into a venv at
#            /opt/gang-extender, then checks that the hot path runs as built (`gang-extender --version`
#            says "hot path: compiled (21 of 21 modules native)", or "interpreted" with COMPILE=0): a
#            runtime Python the compiled modules cannot load fails the build, not the first request.
#            No compiler, no source tree, no pip inside the venv.
#
# Runs as the numeric non-root user 65532 and writes nothing outside /tmp, so it works with
# `readOnlyRootFilesystem: true` as long as /tmp is writable (mount an emptyDir there):
#   - gunicorn creates its worker heartbeat file in the temp dir; without a writable /tmp the worker
#     cannot start ("No usable temporary directory found in ['/tmp', '/var/tmp', '/usr/tmp', '/']");
#   - gunicorn >= 25.1 opens a control socket at $XDG_RUNTIME_DIR/gunicorn.ctl or else
#     $HOME/.gunicorn/gunicorn.ctl, hence HOME=/tmp below;
#   - the Kubernetes client writes certificate data from a kubeconfig to temp files (in-cluster
#     service-account credentials need none).
# Byte code is compiled at install time; PYTHONDONTWRITEBYTECODE keeps Python from trying to write
# more at run time.

ARG BUILDER_IMAGE=python:3.11
ARG PYTHON_IMAGE=python:3.11-slim
ARG COMPILE=1

# ------------------------------------------------------------------------------------ builder
FROM ${BUILDER_IMAGE} AS builder
ARG COMPILE
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Only what the wheel is built from (.dockerignore keeps everything else out of the context).
COPY pyproject.toml setup.py README.md ./
COPY extender ./extender
# Compiling: mypyc type-checks the compiled modules as `make typecheck` does (pyproject.toml's mypy
# settings), so the build venv has the dependencies and the `compile` extra (mypy, stubs, setuptools),
# read from pyproject.toml; not gang-extender itself, whose source is here.
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && case "$COMPILE" in \
      1) python -m venv /opt/build \
         && python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
print("\n".join(p["dependencies"] + p["optional-dependencies"]["compile"]))' > /tmp/build-requirements.txt \
         && /opt/build/bin/pip install --quiet --requirement /tmp/build-requirements.txt \
         && GANG_EXTENDER_COMPILE=1 /opt/build/bin/pip wheel --no-build-isolation --wheel-dir /wheels . ;; \
      0) python -m pip wheel --wheel-dir /wheels . ;; \
      *) echo "COMPILE must be 1 or 0, not '$COMPILE'" >&2; exit 1 ;; \
    esac \
 && ls -l /wheels/gang_extender-*.whl

# ------------------------------------------------------------------------------------ runtime
FROM ${PYTHON_IMAGE} AS runtime
ARG COMPILE
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# The venv has no pip of its own: the base image's pip installs into it (--python), from the
# builder's wheels only (--no-index), and compiles byte code while it is still allowed to write.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/gang-extender \
 && python -m pip --python /opt/gang-extender/bin/python install --no-index --find-links /wheels \
        --compile gang-extender \
 && /opt/gang-extender/bin/gang-extender serve --help > /dev/null \
 && version=$(/opt/gang-extender/bin/gang-extender --version) && echo "$version" \
 && expected=$([ "$COMPILE" = 1 ] && echo compiled || echo interpreted) \
 && case "$version" in *"hot path: $expected "*) ;; \
      *) echo "expected the hot path $expected (COMPILE=$COMPILE), got: $version" >&2; exit 1 ;; esac

ENV PATH=/opt/gang-extender/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

LABEL org.opencontainers.image.title="gang-extender" \
      org.opencontainers.image.description="kube-scheduler extender for gang scheduling" \
      org.opencontainers.image.licenses="Apache-2.0"

WORKDIR /tmp
USER 65532:65532
EXPOSE 8888
# Loopback by default: the extender's verbs are unauthenticated (bind creates pods/binding with the
# extender's credentials), so it must only be reachable by the kube-scheduler in the same pod or
# host network namespace.
ENTRYPOINT ["gang-extender", "serve"]
CMD ["--host", "127.0.0.1", "--port", "8888"]
