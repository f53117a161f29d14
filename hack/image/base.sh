#!/usr/bin/env bash
# Make a Python 3.11 base image from Debian bookworm packages, here, with no image registry:
#
#   hack/image/base.sh          # prints the image name on the last line of stdout
#
# mmdebstrap --variant=minbase with python3 (3.11), python3-venv, python3-pip, python-is-python3 and
# ca-certificates (documentation, man pages and translations left out, as the slim images do), written to
# ~/.cache/gang-extender/images/python-base-bookworm.tar, then `docker import`ed as BASE_IMAGE (default
# gang-extender/python-base:3.11-bookworm). It stands in for python:3.11-slim, which the Dockerfile uses by
# default and which cannot be pulled here: `python` on PATH, pip, venv. Both the tar and the image are
# kept: a second run that finds the image does nothing, one that finds only the tar imports it again.
# Delete the tar to rebuild it (Debian's security updates come with a new one).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BASE_IMAGE=${BASE_IMAGE:-gang-extender/python-base:3.11-bookworm}
PACKAGES=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
tar="$IMAGE_CACHE/python-base-bookworm.tar"
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
