#!/usr/bin/env bash
# What mypyc needs to compile the hot path (make compiled): a C compiler, the C library's headers and the
# headers of the Python it compiles for. Installs the missing ones with apt (Debian), else says what is missing.
#
#   hack/ensure-compiler.sh PYTHON
set -euo pipefail
python=${1:?usage: $0 PYTHON}
. "$(dirname "$0")/image/lib.sh"

include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
if command -v apt-get >/dev/null; then
  apt_ensure /usr/bin/gcc gcc /usr/include/stdio.h libc6-dev
  case "$include" in
    /usr/include/*) apt_ensure "$include/Python.h" python3-dev ;;  # Debian's own Python
  esac
fi
command -v "${CC:-gcc}" >/dev/null || command -v cc >/dev/null \
  || { echo "no C compiler: install gcc (Debian: apt-get install gcc libc6-dev)" >&2; exit 1; }
[ -e "$include/Python.h" ] || { echo "no $include/Python.h: install the headers of $python" >&2; exit 1; }
