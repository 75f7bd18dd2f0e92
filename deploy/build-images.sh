#!/usr/bin/env bash
# Build the segshuffle container images without any container registry.
#
#   1. segshuffle-base:bookworm  a Debian bookworm root filesystem made with debootstrap from
#                                the apt mirror this host is configured with, imported with
#                                `docker import` (skipped when the image already exists).
#   2. a wheelhouse              `pip wheel` of the project's runtime dependencies, built on the
#                                host (the image build then needs no network at all).
#   3. segshuffle:latest         `docker build` of deploy/Dockerfile FROM the base image.
#   4. deploy/.env               random service tokens (deploy/init-secrets.sh), kept if present.
#
# Idempotent: run it again after changing the code; only steps 2 and 3 are redone.
#
# Environment:
#   SEGSHUFFLE_DEBIAN_MIRROR   apt mirror for debootstrap (default: first URI of /etc/apt/sources*)
#   SEGSHUFFLE_BUILD_DIR       scratch directory (default: ${XDG_CACHE_HOME:-~/.cache}/segshuffle-deploy)
#   SEGSHUFFLE_PYTHON          host python used for `pip wheel` (default: python3.11 or python3)
#   SEGSHUFFLE_CONSTRAINTS     pip constraints for the wheelhouse (default: the versions installed
#                              in the repository's .venv; "none": newest releases)
#   SEGSHUFFLE_REBUILD_BASE=1  rebuild the base image even if it exists
#   SEGSHUFFLE_IMAGE           name of the application image (default: segshuffle:latest)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/.." && pwd)"
base_image="segshuffle-base:bookworm"
app_image="${SEGSHUFFLE_IMAGE:-segshuffle:latest}"
build_dir="${SEGSHUFFLE_BUILD_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/segshuffle-deploy}"
suite="bookworm"
base_packages="python3,python3-venv,python3-pip,ca-certificates,tini"

log() { printf '[build-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'build-images: error: %s\n' "$*" >&2; exit 2; }

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required ($2)"; }

# First http(s) URI of a Debian archive in the host's apt configuration (deb822 or one-line).
detect_mirror() {
    local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
    local f uri
    for f in "${files[@]}"; do
        [[ -r "$f" ]] || continue
        uri="$(grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)https?://[^[:space:]]+/debian/?([[:space:]]|$)' "$f" \
               | grep -oE 'https?://[^[:space:]]+' | head -n1 || true)"
        if [[ -n "$uri" ]]; then
            printf '%s\n' "${uri%/}"
            return 0
        fi
    done
    printf '%s\n' "http://deb.debian.org/debian"
}

build_base() {
    if [[ "${SEGSHUFFLE_REBUILD_BASE:-0}" != "1" ]] && docker image inspect "$base_image" >/dev/null 2>&1; then
        log "base image $base_image exists, skipping debootstrap (SEGSHUFFLE_REBUILD_BASE=1 forces it)"
        return 0
    fi
    need debootstrap "apt-get install debootstrap"
    [[ "$(id -u)" == "0" ]] || die "debootstrap needs root"
    local mirror="${SEGSHUFFLE_DEBIAN_MIRROR:-$(detect_mirror)}"
    local rootfs="${build_dir}/rootfs-${suite}"
    log "debootstrap $suite from $mirror into $rootfs (a few minutes)"
    rm -rf "$rootfs"
    mkdir -p "$rootfs"
    debootstrap --variant=minbase --include="$base_packages" "$suite" "$rootfs" "$mirror" \
        2>&1 | while IFS= read -r line; do
            case "$line" in I:\ Retrieving*|I:\ Validating*|I:\ Extracting*|I:\ Unpacking*|I:\ Configuring*) ;;
                *) printf '  %s\n' "$line" >&2 ;; esac
        done
    [[ -x "$rootfs/usr/bin/python3" ]] || die "debootstrap did not produce $rootfs/usr/bin/python3"
    log "trimming apt caches and docs"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
           "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
    printf 'deb %s %s main\n' "$mirror" "$suite" > "$rootfs/etc/apt/sources.list"
    log "importing $rootfs as $base_image"
    tar --numeric-owner -C "$rootfs" -c . | docker import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        - "$base_image" >/dev/null
    rm -rf "$rootfs"
    log "base image: $(docker image inspect --format '{{.Id}} {{.Size}} bytes' "$base_image")"
}

build_wheelhouse() {
    local python="${SEGSHUFFLE_PYTHON:-$(command -v python3.11 || command -v python3)}"
    local version
    version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$version" == "3.11" ]] || die "the wheelhouse must be built with Python 3.11 (bookworm's), got $version from $python"
    local wheels="${build_dir}/wheelhouse"
    local venv="${build_dir}/wheel-venv"
    if [[ ! -x "$venv/bin/pip" ]]; then
        log "creating $venv for pip wheel"
        "$python" -m venv "$venv"
    fi
    # Rebuilt from scratch each time (pip's own cache makes that quick), so that it holds
    # exactly one version of each distribution.
    rm -rf "$wheels"
    mkdir -p "$wheels"
    log "pip wheel: project dependencies into $wheels"
    # Runtime requirements of the project with the server extra, plus the build backend, so
    # that the image build can install the project from source with --no-index.
    # Pin the image to the versions the project is tested with: the development venv's
    # versions serve as constraints (SEGSHUFFLE_CONSTRAINTS names another file; "none" lets
    # pip pick the newest).
    local constraints=()
    local constraints_file="${SEGSHUFFLE_CONSTRAINTS:-}"
    if [[ -z "$constraints_file" && -x "$repo/.venv/bin/python" ]]; then
        constraints_file="${build_dir}/constraints.txt"
        "$repo/.venv/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check \
            | grep -v -e '^-e ' -e ' @ ' -e '^segshuffle[=@ ]' > "$constraints_file" || true
        log "constraints: versions of $repo/.venv ($(wc -l < "$constraints_file") pins)"
    fi
    if [[ -n "$constraints_file" && "$constraints_file" != "none" ]]; then
        constraints=(--constraint "$constraints_file")
    fi
    "$venv/bin/pip" wheel --quiet --disable-pip-version-check --wheel-dir "$wheels" \
        "${constraints[@]}" "setuptools>=68" wheel pip "${repo}[server]"
    # The project's own wheel is rebuilt from the copied source inside the image.
    rm -f "$wheels"/segshuffle-*.whl
    log "wheelhouse: $(find "$wheels" -name '*.whl' | wc -l) wheels"
}

# A build context of its own: only what the image needs (no .git, no .venv, no caches).
stage_context() {
    local context="${build_dir}/context"
    log "staging the build context in $context"
    rm -rf "$context"
    mkdir -p "$context"
    cp -a "$repo/pyproject.toml" "$repo/README.md" "$context/"
    local dir
    for dir in shared services loadtest; do
        mkdir -p "$context/$dir"
        tar -C "$repo/$dir" --exclude='__pycache__' --exclude='*.pyc' --exclude='*.egg-info' \
            --exclude='*.sqlite3*' -c . | tar -C "$context/$dir" -x
    done
    cp -a "${build_dir}/wheelhouse" "$context/wheelhouse"
    cp -a "$here/Dockerfile" "$context/Dockerfile"
}

build_app() {
    stage_context
    local previous
    previous="$(docker image inspect --format '{{.Id}}' "$app_image" 2>/dev/null || true)"
    log "docker build $app_image (deploy/Dockerfile, --network none)"
    docker build --network none --force-rm -t "$app_image" "${build_dir}/context" 2>&1 \
        | while IFS= read -r line; do printf '  %s\n' "$line" >&2; done
    docker image inspect "$app_image" >/dev/null 2>&1 || die "docker build did not produce $app_image"
    local current
    current="$(docker image inspect --format '{{.Id}}' "$app_image")"
    # Images earlier builds replaced are left untagged; remove those no container uses
    # (only ours: the label filter keeps the prune away from any other image).
    if [[ -n "$previous" && "$previous" != "$current" ]]; then
        docker image rm "$previous" >/dev/null 2>&1 || true
    fi
    docker image prune --force --filter "label=io.segshuffle.image=app" >/dev/null 2>&1 || true
    log "application image: $current"
}

main() {
    need docker "the Docker engine"
    docker info >/dev/null 2>&1 || die "cannot reach the Docker engine"
    mkdir -p "$build_dir"
    build_base
    if [[ "${1:-}" == "--base-only" ]]; then
        return 0
    fi
    build_wheelhouse
    build_app
    "$here/init-secrets.sh"
    log "done: docker compose -f deploy/compose.yaml up -d"
}

main "$@"
