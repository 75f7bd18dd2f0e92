#!/usr/bin/env bash
# Regenerate deploy/requirements.lock, the hash-pinned Python dependencies of the container
# image: the runtime dependencies of `segshuffle[server]` plus the build backend
# (setuptools) that installs the project itself from source inside the image.
#
#   deploy/lock.sh                          keep the current pins where they still fit
#   deploy/lock.sh --upgrade                move every pin to the newest release
#   deploy/lock.sh --upgrade-package NAME   move one pin (repeatable)
#
# The lock is resolved with pip-compile (pip-tools, installed into a venv of its own in the
# build cache) for the interpreter running it, so this script must run on CPython 3.11 on
# linux x86_64: that is the image's Python (Debian bookworm) and platform. The hashes cover
# every file PyPI has for each pinned version, so the same lock serves every platform tag.
#
# Prerequisites: CPython 3.11 with the venv module, network access to PyPI.
#
# Environment:
#   SEGSHUFFLE_PYTHON      interpreter to resolve with (default: python3.11)
#   SEGSHUFFLE_BUILD_DIR   cache directory (default: ${XDG_CACHE_HOME:-~/.cache}/segshuffle-deploy)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/.." && pwd)"
build_dir="${SEGSHUFFLE_BUILD_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/segshuffle-deploy}"
pip_tools_version="7.6.2"

die() { printf 'lock: error: %s\n' "$*" >&2; exit 2; }
log() { printf '[lock %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

upgrade=()
while (($#)); do
    case "$1" in
        --upgrade) upgrade+=(--upgrade); shift ;;
        --upgrade-package)
            [[ $# -ge 2 && -n "$2" && "$2" != -* ]] || die "--upgrade-package needs a package name"
            upgrade+=(--upgrade-package "$2"); shift 2 ;;
        -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

python="${SEGSHUFFLE_PYTHON:-$(command -v python3.11 || true)}"
[[ -n "$python" ]] || die "python3.11 is required (or set SEGSHUFFLE_PYTHON to a CPython 3.11)"
target="$("$python" -c 'import platform, sys; print(sys.implementation.name, "%d.%d" % sys.version_info[:2], sys.platform, platform.machine())' 2>/dev/null)" \
    || die "cannot run $python"
[[ "$target" == "cpython 3.11 linux x86_64" ]] \
    || die "the lock is resolved for CPython 3.11 on linux x86_64 (the image's), $python is: $target"
"$python" -c 'import venv' 2>/dev/null || die "$python lacks the venv module (apt-get install python3.11-venv)"

venv="${build_dir}/lock-venv"
if [[ ! -x "$venv/bin/pip-compile" ]] \
        || [[ "$("$venv/bin/python" -m pip show pip-tools 2>/dev/null | sed -n 's/^Version: //p')" != "$pip_tools_version" ]]; then
    log "installing pip-tools $pip_tools_version into $venv"
    rm -rf "$venv"
    mkdir -p "$build_dir"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pip-tools==${pip_tools_version}"
fi

log "pip-compile: segshuffle[server] and its build backend into deploy/requirements.lock"
cd "$repo"
# --build-deps-for wheel: the lock also pins what [build-system] requires, since the image
# builds the project from source with --no-index --no-build-isolation.
# --allow-unsafe: setuptools is pinned (with hashes) like everything else.
CUSTOM_COMPILE_COMMAND="deploy/lock.sh" timeout 900 "$venv/bin/pip-compile" --quiet \
    --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
    --extra server --build-deps-for wheel \
    "${upgrade[@]}" \
    --output-file deploy/requirements.lock pyproject.toml
log "deploy/requirements.lock: $(grep -cE '^[A-Za-z0-9]' deploy/requirements.lock) pinned distributions"
