# Shared by hack/image/*.sh and hack/real-nodes/*.sh (sourced, not run).
#
# Debian's docker CLI is used on purpose: it has BuildKit built in (DOCKER_BUILDKIT=1), while a newer
# CLI that may come first on PATH (e.g. /usr/local/bin/docker) has no buildx and cannot build with it.

GANG_CACHE=${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}
IMAGE_CACHE="$GANG_CACHE/images"
DOCKER=${GANG_DOCKER:-/usr/bin/docker}
export DOCKER_BUILDKIT=1

# log TAG MESSAGE...: progress on stderr, with the seconds since the script started.
_lib_start=$(date +%s)
log() { local tag=$1; shift; printf '[%s] [%ss] %s\n' "$tag" "$(( $(date +%s) - _lib_start ))" "$*" >&2; }

root_or_sudo() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# apt_ensure CMD PACKAGE [CMD PACKAGE ...]: install each Debian PACKAGE whose CMD (a path) is missing.
apt_ensure() {
  local missing=() updated=0
  while [ $# -gt 1 ]; do
    [ -e "$1" ] || missing+=("$2")
    shift 2
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log apt "installing ${missing[*]} (apt-get install)"
  if ! root_or_sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    root_or_sudo apt-get update -q >/dev/null
    updated=1
    root_or_sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
  : "$updated"
}

# image_exists NAME: the Docker engine has an image NAME.
image_exists() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }
