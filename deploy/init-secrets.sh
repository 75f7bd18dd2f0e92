#!/usr/bin/env bash
# Generate deploy/.env: the random bearer tokens the deployment authenticates with, and the
# app operator's invitation issuer key (Ed25519, made with openssl).
#
#   COMPOSE_PROJECT_NAME           segshuffle-<checkout>-<hash of its path> (names of the
#                                  containers, networks and volumes: two checkouts on one
#                                  host never share them; --project NAME chooses one)
#   SEGSHUFFLE_*_PORT              the host ports compose publishes (server, shuffler, their
#                                  TLS ports, the scale profile's balancer): the defaults
#                                  8080/8081, 8443/8444, 8180/8181 plus the first offset in
#                                  0, 10, .., 90 at which all six are free (--port-offset K)
#   SEGSHUFFLE_SERVER_URL, SEGSHUFFLE_SHUFFLER_URL   the published plain-HTTP ports' URLs,
#                                  which `segshuffle admin` takes as its --server/--shuffler
#                                  defaults: `set -a; . deploy/.env; set +a` loads the tokens
#                                  and the URLs into the shell
#   SEGSHUFFLE_ADMIN_TOKEN         creates campaigns and reads results on the server
#   SEGSHUFFLE_SHUFFLER_TOKEN      the shuffler's credential when it forwards batches to the server
#   SEGSHUFFLE_OPERATOR_TOKEN      triggers the release of a round on the shuffler
#   SEGSHUFFLE_ISSUER_PUBLIC_KEY   the shuffler accepts invitations signed by this key only
#   SEGSHUFFLE_ISSUER_PRIVATE_KEY  its private key (32-byte seed, base64url), for the load test
#
# The private key is also written as PKCS#8 PEM to issuer-key.pem next to the env file (mode
# 0600, ignored by git; SEGSHUFFLE_ISSUER_KEY_FILE overrides the path), for
# `segshuffle admin invitations ID --count N --out FILE --issuer-key deploy/issuer-key.pem`.
#
# The three tokens are also written one per file to deploy/secrets/ (a 0700 directory; the
# files are 0644 so that the containers' unprivileged user can read them), which compose
# hands to each service as Docker secrets: the services read them from /run/secrets and no
# token shows in `docker inspect`. `docker compose -f deploy/compose.yaml ...` reads
# deploy/.env for the other variables (and the load test's tokens). The file is mode 0600 and ignored by git.
# It also writes the PostgreSQL role passwords and libpq password files of the `scale`
# profile to deploy/secrets/ (database_secrets below), and makes the TLS profile's local CA and certificates in deploy/tls/certs
# (deploy/tls/make-certs.sh; SEGSHUFFLE_TLS_DIR in the env file names the directory).
# An existing file is kept (tokens stay stable across rebuilds; an issuer key, the ports and
# the URLs are added if it lacks them); --force rotates every secret but keeps the project
# name and the ports, so the deployment's volumes stay its own.
#
# Usage: deploy/init-secrets.sh [--force] [--project NAME] [--port-offset K]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target="${SEGSHUFFLE_ENV_FILE:-${here}/.env}"
keyfile="${SEGSHUFFLE_ISSUER_KEY_FILE:-$(dirname "$target")/issuer-key.pem}"

force=()
project=""
port_offset=""
while (( $# )); do
    case "$1" in
        --force) force=(--force) ;;
        --project)
            [[ $# -ge 2 && "$2" =~ ^[a-z0-9][a-z0-9_-]{0,62}$ ]] \
                || { echo "[init-secrets] --project needs a name of lowercase letters, digits, - and _" >&2; exit 2; }
            project="$2"; shift ;;
        --port-offset)
            [[ $# -ge 2 && "$2" =~ ^[0-9]{1,4}$ && "$2" -le 1000 ]] \
                || { echo "[init-secrets] --port-offset needs a number from 0 to 1000" >&2; exit 2; }
            port_offset="$2"; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "[init-secrets] unknown argument: $1 (--force, --project NAME, --port-offset K)" >&2; exit 2 ;;
    esac
    shift
done

# The published ports and their defaults, in the order of deploy/compose.yaml.
port_names=(SEGSHUFFLE_SERVER_PUBLISH_PORT SEGSHUFFLE_SHUFFLER_PUBLISH_PORT
            SEGSHUFFLE_SERVER_TLS_PORT SEGSHUFFLE_SHUFFLER_TLS_PORT
            SEGSHUFFLE_SCALE_SERVER_PORT SEGSHUFFLE_SCALE_SHUFFLER_PORT)
port_defaults=(8080 8081 8443 8444 8180 8181)

# A value of the existing env file ("" if it has none).
existing() {
    [[ -e "$target" ]] || return 0
    grep "^$1=" "$target" | head -n 1 | cut -d= -f2- || true
}

# segshuffle-<directory name>-<6 hex digits of its absolute path>: the env file's directory
# (deploy/ of the checkout) names the deployment, so two checkouts never share a project.
default_project() {
    local dir base hash
    dir="$(cd "$(dirname "$target")" && pwd -P)"
    base="$(basename "$(dirname "$dir")")"
    [[ "$(basename "$dir")" == deploy ]] || base="$(basename "$dir")"
    base="$(printf '%s' "$base" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9_-' '-' | cut -c1-24)"
    base="${base#-}"; base="${base%-}"
    hash="$(printf '%s' "$dir" | sha256sum | cut -c1-6)"
    printf 'segshuffle-%s%s\n' "${base:+$base-}" "$hash"
}

# Whether something accepts connections on the loopback port.
port_in_use() {
    (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null
}

# The first offset in 0, 10, .., 90 at which all six default ports are free (0 if none is).
free_offset() {
    local offset port busy
    for offset in 0 10 20 30 40 50 60 70 80 90; do
        busy=0
        for port in "${port_defaults[@]}"; do
            if port_in_use $((port + offset)); then busy=1; break; fi
        done
        (( busy )) || { echo "$offset"; return; }
    done
    echo 0
}

# The project and port lines: kept from the existing file, else chosen; prints them.
deployment_lines() {
    local name value index offset
    name="${project:-$(existing COMPOSE_PROJECT_NAME)}"
    name="${name:-$(default_project)}"
    printf '# Compose project: containers, networks and volumes are named %s_* (or %s-*).\n' "$name" "$name"
    printf 'COMPOSE_PROJECT_NAME=%s\n' "$name"
    printf '# Host ports compose publishes (loopback; TLS: SEGSHUFFLE_TLS_BIND).\n'
    offset="$port_offset"
    for index in "${!port_names[@]}"; do
        value="$(existing "${port_names[$index]}")"
        if [[ -z "$value" || -n "$port_offset" ]]; then
            [[ -n "$offset" ]] || offset="$(free_offset)"
            value=$((port_defaults[index] + offset))
        fi
        printf '%s=%s\n' "${port_names[$index]}" "$value"
    done
}

# The admin CLI's URLs from the port lines on stdin.
url_lines() {
    local lines server shuffler
    lines="$(cat)"
    server="$(printf '%s\n' "$lines" | grep '^SEGSHUFFLE_SERVER_PUBLISH_PORT=' | cut -d= -f2)"
    shuffler="$(printf '%s\n' "$lines" | grep '^SEGSHUFFLE_SHUFFLER_PUBLISH_PORT=' | cut -d= -f2)"
    printf '# segshuffle admin --server/--shuffler defaults (set -a; . deploy/.env; set +a).\n'
    printf 'SEGSHUFFLE_SERVER_URL=http://127.0.0.1:%s\n' "$server"
    printf 'SEGSHUFFLE_SHUFFLER_URL=http://127.0.0.1:%s\n' "$shuffler"
}

b64url() { base64 | tr '+/' '-_' | tr -d '=\n'; }

# 32 random bytes, base64url without padding (43 characters).
token() {
    head -c 32 /dev/urandom | b64url
}

# A new Ed25519 issuer key in $keyfile; prints the two .env lines. The raw 32-byte seed and
# public key are the last 32 bytes of the PKCS#8 and SubjectPublicKeyInfo DER encodings.
issuer_key() {
    command -v openssl > /dev/null || { echo "[init-secrets] openssl is required" >&2; exit 1; }
    local tmpkey
    tmpkey="$(mktemp "${keyfile}.XXXXXX")"
    openssl genpkey -algorithm ed25519 -out "$tmpkey" 2> /dev/null
    printf 'SEGSHUFFLE_ISSUER_PUBLIC_KEY=%s\n' \
        "$(openssl pkey -in "$tmpkey" -pubout -outform DER | tail -c 32 | b64url)"
    printf 'SEGSHUFFLE_ISSUER_PRIVATE_KEY=%s\n' \
        "$(openssl pkey -in "$tmpkey" -outform DER | tail -c 32 | b64url)"
    mv "$tmpkey" "$keyfile"
}

# deploy/secrets/<name> from the token of the same name in $target.
secret_files() {
    local dir name value
    dir="$(dirname "$target")/secrets"
    mkdir -p "$dir" && chmod 0700 "$dir"
    for name in admin shuffler operator; do
        value="$(grep "^SEGSHUFFLE_${name^^}_TOKEN=" "$target" | head -n 1 | cut -d= -f2-)"
        [[ -n "$value" ]] || { echo "[init-secrets] $target lacks the $name token" >&2; exit 1; }
        printf '%s' "$value" > "$dir/${name}_token.tmp"
        chmod 0644 "$dir/${name}_token.tmp"
        mv "$dir/${name}_token.tmp" "$dir/${name}_token"
    done
}

# The compose profile `scale` (PostgreSQL): one password per party's database role, made
# once (kept afterwards; --force makes new ones, which the postgres container applies on its
# next start), and each party's libpq password file naming only its own role and database.
#   secrets/postgres_shuffler_password, secrets/postgres_server_password   for the postgres
#                                        service, which sets the roles' passwords from them
#   secrets/shuffler_pgpass, secrets/server_pgpass   for the replicas (PGPASSFILE; compose
#                                        copies each to a 0600 file in the container, as libpq
#                                        ignores a password file others can read)
database_secrets() {
    local dir role password
    dir="$(dirname "$target")/secrets"
    mkdir -p "$dir" && chmod 0700 "$dir"
    for role in shuffler server; do
        if [[ "${1:-}" == "--force" || ! -s "$dir/postgres_${role}_password" ]]; then
            token > "$dir/postgres_${role}_password.tmp"
            chmod 0644 "$dir/postgres_${role}_password.tmp"
            mv "$dir/postgres_${role}_password.tmp" "$dir/postgres_${role}_password"
        fi
        password="$(head -n 1 "$dir/postgres_${role}_password")"
        [[ "$password" =~ ^[A-Za-z0-9_-]{16,256}$ ]] \
            || { echo "[init-secrets] $dir/postgres_${role}_password is not a base64url password; delete it to make a new one" >&2; exit 1; }
        # hostname:port:database:username:password
        printf '*:*:%s:%s:%s\n' "$role" "$role" "$password" > "$dir/${role}_pgpass.tmp"
        chmod 0644 "$dir/${role}_pgpass.tmp"
        mv "$dir/${role}_pgpass.tmp" "$dir/${role}_pgpass"
    done
}

# The local CA and the proxy's certificates (deploy/tls/make-certs.sh) in tls/certs next to
# the env file, made once (rerun make-certs.sh to add names; --force makes new ones); the
# shuffler container mounts its ca.pem.
tls_certs() {
    local dir
    dir="$(cd "$(dirname "$target")" && pwd)/tls/certs"
    if [[ "${1:-}" == "--force" || ! -s "$dir/ca.pem" || ! -s "$dir/server.pem" \
          || ! -s "$dir/shuffler.pem" ]]; then
        SEGSHUFFLE_TLS_DIR="$dir" "$here/tls/make-certs.sh" "$@" 2> /dev/null \
            || { echo "[init-secrets] deploy/tls/make-certs.sh failed" >&2; exit 1; }
    fi
    if ! grep -q '^SEGSHUFFLE_TLS_DIR=' "$target"; then
        printf 'SEGSHUFFLE_TLS_DIR=%s\n' "$dir" >> "$target"
    fi
}

umask 077
if [[ -e "$target" && ${#force[@]} -eq 0 ]]; then
    if ! grep -q '^SEGSHUFFLE_ISSUER_PUBLIC_KEY=' "$target"; then
        issuer_key >> "$target"
        printf '[init-secrets] added an invitation issuer key to %s (%s)\n' "$target" \
            "$keyfile" >&2
    else
        printf '[init-secrets] %s exists, keeping it (--force rotates the tokens)\n' \
            "$target" >&2
    fi
    if ! grep -q '^SEGSHUFFLE_SECRETS_DIR=' "$target"; then
        printf 'SEGSHUFFLE_SECRETS_DIR=%s\n' "$(cd "$(dirname "$target")" && pwd)/secrets" \
            >> "$target"
    fi
    # Ports and URLs for a file from before they were written (its project name is kept;
    # --project or --port-offset on an existing file rewrites those lines).
    if [[ -n "$project$port_offset" ]] || ! grep -q '^SEGSHUFFLE_SERVER_URL=' "$target"; then
        lines="$(deployment_lines)"
        kept="$(grep -v -E '^(COMPOSE_PROJECT_NAME|SEGSHUFFLE_[A-Z_]*_PORT|SEGSHUFFLE_(SERVER|SHUFFLER)_URL)=|^# (Compose project|Host ports|segshuffle admin)' "$target" || true)"
        { printf '%s\n' "$kept"; printf '%s\n' "$lines"; printf '%s\n' "$lines" | url_lines; } > "$target.tmp"
        chmod 0600 "$target.tmp" && mv "$target.tmp" "$target"
        printf '[init-secrets] %s: %s\n' "$target" "$(printf '%s' "$lines" | grep -v '^#' | tr '\n' ' ')" >&2
    fi
    secret_files
    database_secrets
    tls_certs
    exit 0
fi

lines="$(deployment_lines)"
tmp="$(mktemp "${target}.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
{
    printf '# Generated by deploy/init-secrets.sh on %s. Do not commit.\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '%s\n' "$lines"
    printf '%s\n' "$lines" | url_lines
    printf 'SEGSHUFFLE_ADMIN_TOKEN=%s\n' "$(token)"
    printf 'SEGSHUFFLE_SHUFFLER_TOKEN=%s\n' "$(token)"
    printf 'SEGSHUFFLE_OPERATOR_TOKEN=%s\n' "$(token)"
    printf '# The same tokens as files, handed to the services as Docker secrets.\n'
    printf 'SEGSHUFFLE_SECRETS_DIR=%s\n' "$(cd "$(dirname "$target")" && pwd)/secrets"
    printf '# Invitation issuer (private key also in %s).\n' "$keyfile"
    issuer_key
} > "$tmp"
mv "$tmp" "$target"
trap - EXIT
secret_files
database_secrets "${force[@]}"
tls_certs "${force[@]}"
printf '[init-secrets] wrote %s: %s\n' "$target" "$(printf '%s' "$lines" | grep -v '^#' | tr '\n' ' ')" >&2
