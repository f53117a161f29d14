#!/usr/bin/env bash
# Make a Python 3.11 base image from Debian bookworm packages, here, with no image registry:
#
#   hack/image/base.sh            # the runtime base; prints the image name on the last line of stdout
#   hack/image/base.sh builder    # the builder base: the runtime base's packages, a C compiler and Python's headers
#
# mmdebstrap --variant=minbase with python3 (3.11), python3-venv, python3-pip, python-is-python3 and
# ca-certificates (documentation, man pages and translations left out, as the slim images do), written to
# ~/.cache/gang-extender/images/python-base-bookworm.tar, then `docker import`ed as BASE_IMAGE (default
# gang-extender/python-base:3.11-bookworm). It stands in for python:3.11-slim, which the Dockerfile uses by
# default and which cannot be pulled here: `python` on PATH, pip, venv. The builder base adds gcc, libc6-dev
# and python3-dev (python-build-bookworm.tar, gang-extender/python-build:3.11-bookworm) and stands in for
# python:3.11, the Dockerfile's BUILDER_IMAGE, which mypyc needs to compile the hot path. Both bases carry
# the same Debian python3.11, so what the builder compiles loads in the runtime. Both the tar and the image
# are kept: a second run that finds the image does nothing, one that finds only the tar imports it again.
# Delete the tar to rebuild it (Debian's security updates come with a new one).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PACKAGES=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
case "${1:-runtime}" in
  runtime) BASE_IMAGE=${BASE_IMAGE:-gang-extender/python-base:3.11-bookworm}
           tar="$IMAGE_CACHE/python-base-bookworm.tar" ;;
  builder) BASE_IMAGE=${BUILDER_BASE_IMAGE:-gang-extender/python-build:3.11-bookworm}
           PACKAGES=$PACKAGES,python3-dev,gcc,libc6-dev
           tar="$IMAGE_CACHE/python-build-bookworm.tar" ;;
  *) echo "usage: $0 [runtime|builder]" >&2; exit 2 ;;
esac
stamp="$tar.packages"

"$(dirname "$0")/docker-up.sh"
if [ -s "$tar" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$PACKAGES" ] && image_exists "$BASE_IMAGE"; then
  log base "$BASE_IMAGE already imported from $tar"
  echo "$BASE_IMAGE"; exit 0
fi
mkdir -p "$IMAGE_CACHE"
if [ ! -s "$tar" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$PACKAGES" ]; then
  log base "mmdebstrap bookworm ($PACKAGES) -> $tar (about 30 s)"
  rm -f "$tar" "$stamp"
  mmdebstrap --quiet --format=tar --variant=minbase --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm "$tar.tmp" \
    'deb http://deb.debian.org/debian bookworm main' \
    'deb http://deb.debian.org/debian bookworm-updates main' \
    'deb http://deb.debian.org/debian-security bookworm-security main' >&2
  mv "$tar.tmp" "$tar"
  echo "$PACKAGES" > "$stamp"
fi
log base "docker import $tar as $BASE_IMAGE"
"$DOCKER" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$tar" "$BASE_IMAGE" >/dev/null
echo "$BASE_IMAGE"
