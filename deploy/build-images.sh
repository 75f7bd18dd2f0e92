#!/usr/bin/env bash
# Build the segshuffle container images without any container registry and without root
# (beyond access to the Docker engine).
#
#   1. segshuffle-base:bookworm   Debian bookworm root filesystem (minbase + python3,
#                                 python3-venv, python3-pip, ca-certificates, tini) made with
#                                 mmdebstrap as a tarball and loaded with `docker import`.
#   2. segshuffle-proxy:bookworm  the same for the TLS reverse proxy: nginx-light,
#                                 ca-certificates, tini, no Python. Built by default;
#                                 --no-proxy leaves it out.
#                                 Both base images are skipped when they exist
#                                 (SEGSHUFFLE_REBUILD_BASE=1 rebuilds them).
#   2b. segshuffle-postgres:bookworm  with --postgres only, for the compose profile `scale`:
#                                 Debian's postgresql-15 and tini, run as the postgres user
#                                 (deploy/postgres/entrypoint.sh, mounted by compose,
#                                 initialises the cluster). Skipped when it exists, likewise.
#   3. a wheelhouse               `pip download --require-hashes` of deploy/requirements.lock
#                                 (hash-pinned; regenerate it with deploy/lock.sh): wheels for
#                                 CPython 3.11 on manylinux x86_64, whatever the host's Python.
#   4. segshuffle:latest          `docker build --network none` of deploy/Dockerfile FROM the
#                                 base image; installs the wheelhouse with --require-hashes.
#   5. deploy/.env                random service tokens (deploy/init-secrets.sh), kept if present.
#
# It ends by printing the command that starts the deployment with the Docker Compose this
# machine has: `docker compose` (the plugin) or `docker-compose` (deploy/compose-command.sh).
#
# Idempotent: run it again after changing the code; only steps 3 and 4 are redone.
#
# Prerequisites (each is checked; `deploy/build-images.sh --check` checks them all and exits):
#   - the Docker engine, reachable by this user (root, or a member of the `docker` group)
#   - mmdebstrap (apt-get install mmdebstrap), for steps 1 and 2
#   - as a non-root user, mmdebstrap runs in its unshare mode: newuidmap/newgidmap
#     (apt-get install uidmap), a range for the user in /etc/subuid and /etc/subgid (adduser
#     makes one; else `usermod --add-subuids 100000-165535 --add-subgids 100000-165535 USER`),
#     and unprivileged user namespaces enabled in the kernel
#   - Python 3.9 or newer with the venv module (python3.11 preferred), for `pip download`
#   - network access to a Debian mirror and to PyPI (only steps 1 to 3)
#   - openssl, for deploy/init-secrets.sh
#   - about 2 GiB free in the build directory and 2 GiB in Docker's data root
#
# Usage: deploy/build-images.sh [--base-only] [--no-proxy] [--postgres] [--check] [--help]
#   --base-only   build the base images (steps 1 and 2) only
#   --no-proxy    do not build segshuffle-proxy:bookworm
#   --postgres    also build segshuffle-postgres:bookworm (the `scale` profile's database)
#   --check       check the prerequisites and exit
#
# Environment:
#   SEGSHUFFLE_DEBIAN_MIRROR     apt mirror (default: first Debian URI of /etc/apt/sources*;
#                                a http://snapshot.debian.org/archive/debian/TIMESTAMP URL
#                                pins the package set for byte-identical rebuilds)
#   SEGSHUFFLE_DEBIAN_SECURITY_MIRROR   security archive (default: the host's, or the
#                                snapshot's debian-security; "none" leaves security updates out)
#   SOURCE_DATE_EPOCH            timestamp for the root filesystems (default: the snapshot's
#                                time, else the last commit of this script)
#   SEGSHUFFLE_MMDEBSTRAP_MODE   mmdebstrap mode (default: root as root, unshare otherwise)
#   SEGSHUFFLE_BUILD_DIR         scratch directory (default: ${XDG_CACHE_HOME:-~/.cache}/segshuffle-deploy)
#   SEGSHUFFLE_PYTHON            host python used for `pip download` (default: python3.11 or python3)
#   SEGSHUFFLE_REBUILD_BASE=1    rebuild the base images even if they exist
#   SEGSHUFFLE_IMAGE             name of the application image (default: segshuffle:latest)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/.." && pwd)"
# shellcheck source=deploy/compose-command.sh
. "${here}/compose-command.sh"
base_image="segshuffle-base:bookworm"
proxy_image="segshuffle-proxy:bookworm"
postgres_image="segshuffle-postgres:bookworm"
app_image="${SEGSHUFFLE_IMAGE:-segshuffle:latest}"
build_dir="${SEGSHUFFLE_BUILD_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/segshuffle-deploy}"
lock_file="${here}/requirements.lock"
suite="bookworm"
base_packages="python3,python3-venv,python3-pip,ca-certificates,tini"
proxy_packages="nginx-light,ca-certificates,tini"
postgres_packages="postgresql-15,tini"
min_free_kib=$((2 * 1024 * 1024))

log() { printf '[build-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'build-images: error: %s\n' "$*" >&2; exit 2; }

usage() { sed -n '/^# Usage:/,/^#   --check/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

base_only=0
with_proxy=1
with_postgres=0
check_only=0
while (($#)); do
    case "$1" in
        --base-only) base_only=1 ;;
        --no-proxy) with_proxy=0 ;;
        --postgres) with_postgres=1 ;;
        --check) check_only=1 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (usage: deploy/build-images.sh [--base-only] [--no-proxy] [--postgres] [--check])" ;;
    esac
    shift
done

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required ($2)"; }

mmdebstrap_mode() {
    if [[ -n "${SEGSHUFFLE_MMDEBSTRAP_MODE:-}" ]]; then
        printf '%s\n' "$SEGSHUFFLE_MMDEBSTRAP_MODE"
    elif [[ "$(id -u)" == "0" ]]; then
        printf 'root\n'
    else
        printf 'unshare\n'
    fi
}

# Free space (KiB) of the file system holding $1, or nothing when it cannot be read.
free_kib() { df -Pk "$1" 2>/dev/null | awk 'NR == 2 { print $4 }'; }

check_space() {
    local path="$1" what="$2" free
    free="$(free_kib "$path")"
    if [[ -z "$free" ]]; then
        log "cannot read the free space of $path ($what); not checked"
    elif ((free < min_free_kib)); then
        die "only $((free / 1024)) MiB free in $path ($what); the build needs about $((min_free_kib / 1024)) MiB"
    fi
}

check_mmdebstrap() {
    need mmdebstrap "apt-get install mmdebstrap"
    [[ -d /usr/share/mmdebstrap/hooks/merged-usr ]] \
        || die "mmdebstrap lacks its merged-usr hook (/usr/share/mmdebstrap/hooks/merged-usr); mmdebstrap 1.0 or newer is required"
    local mode
    mode="$(mmdebstrap_mode)"
    case "$mode" in
        root|sudo|auto) [[ "$(id -u)" == "0" ]] || die "mmdebstrap mode '$mode' needs root; unset SEGSHUFFLE_MMDEBSTRAP_MODE to use unshare" ;;
        unshare)
            if [[ "$(id -u)" != "0" ]]; then
                need newuidmap "apt-get install uidmap; mmdebstrap's unshare mode maps the user's subordinate ids"
                need newgidmap "apt-get install uidmap; mmdebstrap's unshare mode maps the user's subordinate ids"
                local user
                user="$(id -un)"
                local file
                for file in /etc/subuid /etc/subgid; do
                    grep -qE "^(${user}|$(id -u)):" "$file" 2>/dev/null \
                        || die "no range for $user in $file (usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $user)"
                done
                local max
                max="$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || printf '1')"
                [[ "$max" != "0" ]] || die "user namespaces are disabled (sysctl user.max_user_namespaces=0); mmdebstrap's unshare mode needs them"
                if [[ "$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || printf '1')" == "0" ]]; then
                    die "unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=1 enables them)"
                fi
            fi ;;
        *) die "SEGSHUFFLE_MMDEBSTRAP_MODE must be root or unshare, got '$mode'" ;;
    esac
}

host_python() {
    local python="${SEGSHUFFLE_PYTHON:-$(command -v python3.11 || command -v python3 || true)}"
    [[ -n "$python" ]] || die "python3 is required (3.9 or newer with venv; python3.11 preferred) for pip download"
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null \
        || die "$python is not Python 3.9 or newer (set SEGSHUFFLE_PYTHON)"
    "$python" -c 'import venv, ensurepip' 2>/dev/null \
        || die "$python lacks the venv module (apt-get install python3-venv)"
    printf '%s\n' "$python"
}

check_prerequisites() {
    local need_base="$1" need_app="$2"
    need docker "the Docker engine's client (apt-get install docker.io)"
    docker info >/dev/null 2>&1 \
        || die "cannot reach the Docker engine as $(id -un) (is it running? is $(id -un) in the docker group?)"
    need tar "GNU tar"
    need sha256sum "coreutils"
    if ((need_base)); then
        check_mmdebstrap
    fi
    if ((need_app)); then
        host_python >/dev/null
        [[ -r "$lock_file" ]] || die "$lock_file is missing (deploy/lock.sh makes it)"
        need openssl "apt-get install openssl; deploy/init-secrets.sh makes the issuer key with it"
    fi
    mkdir -p "$build_dir" || die "cannot create the build directory $build_dir"
    [[ -w "$build_dir" ]] || die "the build directory $build_dir is not writable"
    check_space "$build_dir" "build directory"
    local docker_root
    docker_root="$(docker info --format '{{.DockerRootDir}}' 2>/dev/null || true)"
    if [[ -n "$docker_root" ]]; then
        check_space "$docker_root" "Docker's data root"
    fi
}

# First http(s) URI of a Debian archive named $1 (debian, debian-security) in the host's apt
# configuration (deb822 or one-line), or nothing.
detect_mirror() {
    local archive="$1"
    local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
    local f uri
    for f in "${files[@]}"; do
        [[ -r "$f" ]] || continue
        uri="$(grep -hoE "^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)https?://[^[:space:]]+/${archive}/?([[:space:]]|\$)" "$f" \
               | grep -oE 'https?://[^[:space:]]+' | head -n1 || true)"
        if [[ -n "$uri" ]]; then
            printf '%s\n' "${uri%/}"
            return 0
        fi
    done
}

mirror="" security_mirror="" snapshot_time=""
resolve_mirrors() {
    mirror="${SEGSHUFFLE_DEBIAN_MIRROR:-$(detect_mirror debian)}"
    mirror="${mirror:-http://deb.debian.org/debian}"
    mirror="${mirror%/}"
    [[ "$mirror" =~ ^https?://[^[:space:]]+$ ]] || die "SEGSHUFFLE_DEBIAN_MIRROR must be an http(s) URL, got '$mirror'"
    if [[ "$mirror" =~ ^https?://snapshot\.debian\.org/archive/debian/([0-9]{8}T[0-9]{6}Z)$ ]]; then
        snapshot_time="${BASH_REMATCH[1]}"
    fi
    if [[ -n "${SEGSHUFFLE_DEBIAN_SECURITY_MIRROR:-}" ]]; then
        security_mirror="${SEGSHUFFLE_DEBIAN_SECURITY_MIRROR%/}"
    elif [[ -n "$snapshot_time" ]]; then
        security_mirror="${mirror%/debian/*}/debian-security/${snapshot_time}"
    else
        security_mirror="$(detect_mirror debian-security)"
        security_mirror="${security_mirror:-http://deb.debian.org/debian-security}"
    fi
    if [[ "$security_mirror" != "none" ]]; then
        [[ "$security_mirror" =~ ^https?://[^[:space:]]+$ ]] \
            || die "SEGSHUFFLE_DEBIAN_SECURITY_MIRROR must be an http(s) URL or none, got '$security_mirror'"
    fi
}

source_date_epoch() {
    if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
        [[ "$SOURCE_DATE_EPOCH" =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be seconds since 1970, got '$SOURCE_DATE_EPOCH'"
        printf '%s\n' "$SOURCE_DATE_EPOCH"
    elif [[ -n "$snapshot_time" ]]; then
        date -u -d "${snapshot_time:0:4}-${snapshot_time:4:2}-${snapshot_time:6:2} ${snapshot_time:9:2}:${snapshot_time:11:2}:${snapshot_time:13:2}" +%s
    else
        local epoch
        epoch="$(git -C "$repo" log -1 --format=%ct -- deploy/build-images.sh 2>/dev/null || true)"
        printf '%s\n' "${epoch:-$(stat -c %Y "${BASH_SOURCE[0]}")}"
    fi
}

# mmdebstrap a root filesystem tarball. $1: image name, $2: packages, $3: tarball path,
# further arguments: extra mmdebstrap options (hooks).
make_rootfs() {
    local image="$1" packages="$2" tarball="$3"
    shift 3
    local mode epoch
    mode="$(mmdebstrap_mode)"
    epoch="$(source_date_epoch)"
    local sources=("deb ${mirror} ${suite} main" "deb ${mirror} ${suite}-updates main")
    if [[ "$security_mirror" != "none" ]]; then
        sources+=("deb ${security_mirror} ${suite}-security main")
    fi
    local options=(
        --mode="$mode" --variant=minbase --format=tar --include="$packages"
        # merged /usr made with directory symlinks, as debootstrap does (else apt picks the
        # usrmerge package, which pulls in perl: 45 MB more)
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
        # no documentation, manual pages, translations: smaller, and nothing a container reads
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias'
        --dpkgopt='path-exclude=/usr/share/lintian/*'
        --aptopt='Acquire::Languages "none"'
        # Docker provides /dev, /etc/hostname and /etc/resolv.conf at run time; the host's
        # copies would make the tarball depend on the build machine.
        --skip=output/dev
        --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"'
        # caches and logs whose content depends on when and where the build ran
        --customize-hook='rm -rf "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/var/cache/ldconfig/aux-cache "$1"/var/log/apt/eipp.log.xz "$1"/var/log/bootstrap.log'
    )
    if [[ -n "$snapshot_time" ]]; then
        # snapshot Release files are past their Valid-Until date by design
        options+=(--aptopt='Acquire::Check-Valid-Until "false"')
    fi
    log "mmdebstrap ($mode mode) $suite for $image from $mirror, SOURCE_DATE_EPOCH=$epoch"
    rm -f "$tarball" "$tarball.partial"
    local status=0
    SOURCE_DATE_EPOCH="$epoch" timeout 1800 mmdebstrap "${options[@]}" "$@" \
        "$suite" "$tarball.partial" "${sources[@]}" 2>&1 \
        | while IFS= read -r line; do
            case "$line" in I:\ *|*\ Get:*|Get:*|Hit:*|Ign:*|Fetched\ *|Reading\ *|Building\ *|"Selecting previously"*|"Preparing to unpack"*|Unpacking\ *|Setting\ up\ *|Processing\ triggers*|"(Reading database"*) ;;
                *) printf '  %s\n' "$line" >&2 ;; esac
        done || status=$?
    [[ "$status" == "0" && -s "$tarball.partial" ]] || die "mmdebstrap failed for $image (exit $status)"
    mv "$tarball.partial" "$tarball"
    log "root filesystem of $image: $(du -m "$tarball" | cut -f1) MB, sha256 $(sha256sum "$tarball" | cut -d' ' -f1)"
}

# docker import a root filesystem tarball. $1: tarball, $2: image, further: --change options.
import_rootfs() {
    local tarball="$1" image="$2"
    shift 2
    local previous
    previous="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
    docker import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$@" "$tarball" "$image" >/dev/null || die "docker import of $tarball failed"
    local current
    current="$(docker image inspect --format '{{.Id}}' "$image")"
    if [[ -n "$previous" && "$previous" != "$current" ]]; then
        docker image rm "$previous" >/dev/null 2>&1 || true
    fi
    log "$image: $current, layer $(docker image inspect --format '{{index .RootFS.Layers 0}}' "$image")"
}

base_wanted() {
    [[ "${SEGSHUFFLE_REBUILD_BASE:-0}" == "1" ]] || ! docker image inspect "$1" >/dev/null 2>&1
}

# Recompile the timestamp-based .pyc files under /usr as checked-hash ones (run in the chroot).
normalize_pyc='
import pathlib, py_compile
for pyc in sorted(pathlib.Path("/usr").rglob("__pycache__/*.pyc")):
    if int.from_bytes(pyc.read_bytes()[4:8], "little") != 0:
        continue
    source = pyc.parent.parent / (pyc.name.split(".", 1)[0] + ".py")
    if source.is_file():
        py_compile.compile(str(source), cfile=str(pyc), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    else:
        pyc.unlink()
'

build_base() {
    if ! base_wanted "$base_image"; then
        log "base image $base_image exists, skipping mmdebstrap (SEGSHUFFLE_REBUILD_BASE=1 forces it)"
        return 0
    fi
    local tarball="${build_dir}/rootfs-base-${suite}.tar"
    # Debian compiles the installed modules with SOURCE_DATE_EPOCH set, into hash-checked
    # .pyc files; a few that Python's own import cache wrote during the installation carry
    # a timestamp header instead (in unshare mode only): make those hash-checked too, so that
    # both modes give the same tarball.
    make_rootfs "$base_image" "$base_packages" "$tarball" \
        --customize-hook="chroot \"\$1\" python3 -c '${normalize_pyc}'"
    import_rootfs "$tarball" "$base_image" \
        --change 'LABEL io.segshuffle.image=base' \
        --change 'CMD ["/bin/bash"]'
    docker run --rm --network none "$base_image" python3 -c 'import ensurepip, ssl, venv' \
        || die "$base_image cannot run python3 with venv and ssl"
}

build_proxy() {
    if ! base_wanted "$proxy_image"; then
        log "proxy image $proxy_image exists, skipping mmdebstrap (SEGSHUFFLE_REBUILD_BASE=1 forces it)"
        return 0
    fi
    local tarball="${build_dir}/rootfs-proxy-${suite}.tar"
    # nginx logs to the container's stdout/stderr (as the compiled-in default paths) and has
    # no default site: the compose profile mounts its own /etc/nginx/nginx.conf.
    make_rootfs "$proxy_image" "$proxy_packages" "$tarball" \
        --customize-hook='ln -sf /dev/stdout "$1/var/log/nginx/access.log"' \
        --customize-hook='ln -sf /dev/stderr "$1/var/log/nginx/error.log"' \
        --customize-hook='rm -f "$1/etc/nginx/sites-enabled/default"'
    import_rootfs "$tarball" "$proxy_image" \
        --change 'LABEL io.segshuffle.image=proxy' \
        --change 'EXPOSE 443' \
        --change 'ENTRYPOINT ["/usr/bin/tini", "--"]' \
        --change 'CMD ["nginx", "-g", "daemon off;"]'
    docker run --rm --network none "$proxy_image" nginx -t -q \
        || die "$proxy_image: nginx -t fails with the packaged configuration"
}

build_postgres() {
    if ! base_wanted "$postgres_image"; then
        log "database image $postgres_image exists, skipping mmdebstrap (SEGSHUFFLE_REBUILD_BASE=1 forces it)"
        return 0
    fi
    local tarball="${build_dir}/rootfs-postgres-${suite}.tar"
    # The package's postinst makes a cluster "main" (and ssl-cert a snakeoil key pair): the
    # container makes its own on its data volume at first start (deploy/postgres/entrypoint.sh),
    # so drop both; no key may ship in an image. /var/lib/postgresql (the postgres user's
    # home) becomes the data volume's initial content, owned by postgres.
    # LLVM (and z3, which only it uses) serve the JIT alone, which the configuration turns off
    # (deploy/postgres/postgresql.conf): 135 MB that dpkg leaves out.
    make_rootfs "$postgres_image" "$postgres_packages" "$tarball" \
        --dpkgopt='path-exclude=/usr/lib/x86_64-linux-gnu/libLLVM-*' \
        --dpkgopt='path-exclude=/usr/lib/x86_64-linux-gnu/libz3.so*' \
        --dpkgopt='path-exclude=/usr/lib/postgresql/15/lib/llvmjit*' \
        --dpkgopt='path-exclude=/usr/lib/postgresql/15/lib/bitcode/*' \
        --customize-hook='rm -rf "$1"/etc/postgresql/15 "$1"/var/lib/postgresql/15 "$1"/var/log/postgresql/*' \
        --customize-hook='rm -f "$1"/etc/ssl/private/ssl-cert-snakeoil.key "$1"/etc/ssl/certs/ssl-cert-snakeoil.pem' \
        --customize-hook='find "$1"/etc/ssl/certs -xtype l -delete' \
        --customize-hook='chroot "$1" install -d -o postgres -g postgres -m 0700 /var/lib/postgresql'
    import_rootfs "$tarball" "$postgres_image" \
        --change 'LABEL io.segshuffle.image=postgres' \
        --change 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV PGDATA=/var/lib/postgresql/data' \
        --change 'USER postgres' \
        --change 'WORKDIR /var/lib/postgresql' \
        --change 'EXPOSE 5432' \
        --change 'ENTRYPOINT ["/usr/bin/tini", "--"]' \
        --change 'CMD ["postgres", "--version"]'
    docker run --rm --network none "$postgres_image" postgres --version >/dev/null \
        || die "$postgres_image cannot run postgres"
    [[ "$(docker run --rm --network none "$postgres_image" id -un)" == "postgres" ]] \
        || die "$postgres_image does not run as the postgres user"
}

build_wheelhouse() {
    local python
    python="$(host_python)"
    local wheels="${build_dir}/wheelhouse"
    local venv="${build_dir}/wheel-venv"
    if [[ ! -x "$venv/bin/pip" ]]; then
        log "creating $venv for pip download"
        "$python" -m venv "$venv"
    fi
    # Rebuilt from scratch each time (pip's own cache makes that quick), so that it holds
    # exactly the locked files.
    rm -rf "$wheels"
    mkdir -p "$wheels"
    log "pip download: deploy/requirements.lock into $wheels (CPython 3.11, manylinux x86_64)"
    # Wheels for the image's interpreter and C library (bookworm: CPython 3.11, glibc 2.36),
    # not the host's; every file must match one of the lock's hashes. pip does not widen a
    # manylinux_2_36 target to the older glibc versions it includes, so list them all.
    local platforms=() glibc_minor
    for glibc_minor in $(seq 36 -1 17); do
        platforms+=(--platform "manylinux_2_${glibc_minor}_x86_64")
    done
    platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
    timeout 1800 "$venv/bin/pip" download --quiet --disable-pip-version-check \
        --require-hashes --only-binary=:all: \
        --implementation cp --python-version 3.11 --abi cp311 "${platforms[@]}" \
        --dest "$wheels" --requirement "$lock_file" \
        || die "pip download of deploy/requirements.lock failed (is PyPI reachable? is the lock current: deploy/lock.sh)"
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
    cp -a "$lock_file" "$context/requirements.lock"
    cp -a "$here/Dockerfile" "$context/Dockerfile"
}

build_app() {
    stage_context
    local previous
    previous="$(docker image inspect --format '{{.Id}}' "$app_image" 2>/dev/null || true)"
    log "docker build $app_image (deploy/Dockerfile, --network none)"
    local status=0
    docker build --network none --force-rm -t "$app_image" "${build_dir}/context" 2>&1 \
        | while IFS= read -r line; do printf '  %s\n' "$line" >&2; done || status=$?
    [[ "$status" == "0" ]] || die "docker build of $app_image failed (exit $status)"
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
    local need_base=0 need_app=$((1 - base_only))
    if ((check_only)); then
        need_base=1
        need_app=1
    elif base_wanted "$base_image" || { ((with_proxy)) && base_wanted "$proxy_image"; } \
            || { ((with_postgres)) && base_wanted "$postgres_image"; }; then
        need_base=1
    fi
    check_prerequisites "$need_base" "$need_app"
    if ((check_only)); then
        log "all prerequisites found (mmdebstrap mode: $(mmdebstrap_mode))"
        return 0
    fi
    resolve_mirrors
    build_base
    if ((with_proxy)); then
        build_proxy
    fi
    if ((with_postgres)); then
        build_postgres
    fi
    if ((base_only)); then
        return 0
    fi
    build_wheelhouse
    build_app
    "$here/init-secrets.sh"
    log "done: $(compose_up_hint deploy/compose.yaml)"
}

main
