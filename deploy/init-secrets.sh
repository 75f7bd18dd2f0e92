#!/usr/bin/env bash
# Generate deploy/.env: the random bearer tokens the deployment authenticates with, and the
# app operator's invitation issuer key (Ed25519, made with openssl).
#
#   COMPOSE_PROJECT_NAME           segshuffle (names of the containers and volumes)
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
# An existing file is kept (tokens stay stable across rebuilds; an issuer key is added if it
# lacks one); pass --force to rotate everything.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target="${SEGSHUFFLE_ENV_FILE:-${here}/.env}"
keyfile="${SEGSHUFFLE_ISSUER_KEY_FILE:-$(dirname "$target")/issuer-key.pem}"

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
if [[ -e "$target" && "${1:-}" != "--force" ]]; then
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
    secret_files
    database_secrets
    tls_certs
    exit 0
fi

tmp="$(mktemp "${target}.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
{
    printf '# Generated by deploy/init-secrets.sh on %s. Do not commit.\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '# Compose project name: containers and volumes are named segshuffle_*.\n'
    printf 'COMPOSE_PROJECT_NAME=segshuffle\n'
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
database_secrets "$@"
tls_certs "$@"
printf '[init-secrets] wrote %s\n' "$target" >&2
