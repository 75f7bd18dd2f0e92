#!/bin/bash
# Entry point of the `postgres` service of the compose profile `scale` (image
# segshuffle-postgres:bookworm, Debian's postgresql-15; runs as the postgres user under tini).
#
# On the first start (no $PGDATA/PG_VERSION on the data volume) it makes the cluster with
# initdb: UTF-8, C.UTF-8 locale, data checksums, SCRAM-SHA-256 for TCP and peer for the
# socket. On every start it then brings up a private instance (socket in a directory of its
# own, no TCP) and makes sure that
#   - the roles `shuffler` and `server` exist: LOGIN, nothing else (no superuser, no
#     CREATEDB/CREATEROLE/REPLICATION/BYPASSRLS), at most 60 connections each, with the
#     passwords of the secret files (so a rotation by `init-secrets.sh --force` takes effect
#     on the next start);
#   - the databases `shuffler` and `server` exist, each owned by its role, and no other role
#     (PUBLIC) may connect to them, nor to `postgres` or `template1`: neither party's role can
#     read the other's database (pg_hba.conf refuses it too);
# stops it, and execs `postgres` with deploy/postgres/postgresql.conf, listening on the
# compose network.
#
# Environment (defaults in brackets):
#   PGDATA                           [/var/lib/postgresql/data] the cluster, on the named volume
#   SEGSHUFFLE_POSTGRES_CONFIG       [/etc/segshuffle/postgres/postgresql.conf]
#   SEGSHUFFLE_POSTGRES_SHUFFLER_PASSWORD_FILE  [/run/secrets/postgres_shuffler_password]
#   SEGSHUFFLE_POSTGRES_SERVER_PASSWORD_FILE    [/run/secrets/postgres_server_password]
set -euo pipefail

die() { printf 'postgres-entrypoint: error: %s\n' "$*" >&2; exit 2; }
log() { printf 'postgres-entrypoint: %s\n' "$*" >&2; }

export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
config="${SEGSHUFFLE_POSTGRES_CONFIG:-/etc/segshuffle/postgres/postgresql.conf}"
declare -A password_files=(
    [shuffler]="${SEGSHUFFLE_POSTGRES_SHUFFLER_PASSWORD_FILE:-/run/secrets/postgres_shuffler_password}"
    [server]="${SEGSHUFFLE_POSTGRES_SERVER_PASSWORD_FILE:-/run/secrets/postgres_server_password}"
)

[[ "$(id -u)" != "0" ]] || die "refusing to run as root (the image runs as postgres)"
[[ -r "$config" ]] || die "no configuration at $config (mount deploy/postgres/postgresql.conf)"
command -v initdb >/dev/null || die "initdb is not on PATH (/usr/lib/postgresql/15/bin)"

# Each password: one line of 16 to 256 characters from the base64url alphabet, as
# init-secrets.sh makes them (nothing that libpq's password-file format would need escaped).
for role in shuffler server; do
    file="${password_files[$role]}"
    [[ -r "$file" ]] || die "the $role role's password file $file is missing or unreadable (run deploy/init-secrets.sh)"
    password="$(head -c 300 "$file")"
    [[ "$password" =~ ^[A-Za-z0-9_-]{16,256}$ ]] \
        || die "the $role role's password in $file is not 16 to 256 base64url characters"
done
unset password

if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
    if [[ -d "$PGDATA" ]] && [[ -n "$(ls -A "$PGDATA")" ]]; then
        die "$PGDATA is neither empty nor a cluster; refusing to initialise over it"
    fi
    log "initialising a new cluster in $PGDATA"
    # The superuser gets no password: it logs in over the container's socket only (peer).
    initdb --pgdata="$PGDATA" --username=postgres --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=peer --auth-host=scram-sha-256 --data-checksums --no-instructions \
        >/dev/null || die "initdb failed in $PGDATA"
fi
major="$(cat "$PGDATA/PG_VERSION")"
[[ "$major" == "$(postgres --version | sed -E 's/.* ([0-9]+)\..*/\1/')" ]] \
    || die "the cluster in $PGDATA is PostgreSQL $major, this image runs $(postgres --version)"

# A private instance for the setup: no TCP, a socket directory nobody else uses (the
# healthcheck, which probes TCP, stays unhealthy until the real server runs).
setup_socket="$(mktemp -d /tmp/postgres-setup.XXXXXX)"
cleanup() { pg_ctl --pgdata="$PGDATA" --mode=fast --wait stop >/dev/null 2>&1 || true; rm -rf "$setup_socket"; }
trap cleanup EXIT
pg_ctl --pgdata="$PGDATA" --wait --timeout=120 --silent \
    --options="-c config_file=$config -c listen_addresses='' -c unix_socket_directories=$setup_socket" \
    start || die "the setup instance did not start (see the log above)"

# psql reads the passwords itself (\set with backquotes), so they appear in no command line
# and no environment; ALTER ROLE hashes them (SCRAM-SHA-256) before storing them.
psql --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --host="$setup_socket" --username=postgres \
     --dbname=postgres >/dev/null <<SQL || die "setting up the roles and databases failed"
\\set shuffler_password \`head -n 1 '${password_files[shuffler]}'\`
\\set server_password \`head -n 1 '${password_files[server]}'\`
SELECT format('CREATE ROLE %I', name) FROM unnest(ARRAY['shuffler', 'server']) AS name
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) \\gexec
ALTER ROLE shuffler WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
    CONNECTION LIMIT 60 PASSWORD :'shuffler_password';
ALTER ROLE server WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
    CONNECTION LIMIT 60 PASSWORD :'server_password';
SELECT format('CREATE DATABASE %I OWNER %I', name, name)
  FROM unnest(ARRAY['shuffler', 'server']) AS name
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = name) \\gexec
ALTER DATABASE shuffler OWNER TO shuffler;
ALTER DATABASE server OWNER TO server;
REVOKE ALL ON DATABASE shuffler, server, postgres, template1 FROM PUBLIC;
-- Neither role is a member of the other (nor of any role), so only its own database is open.
SELECT format('REVOKE %I FROM %I', r.rolname, m.rolname)
  FROM pg_auth_members a JOIN pg_roles r ON r.oid = a.roleid JOIN pg_roles m ON m.oid = a.member
 WHERE m.rolname IN ('shuffler', 'server') \\gexec
SQL
for database in shuffler server; do
    # In each database the public schema belongs to the party's role, and nobody else may
    # create or use anything in it.
    psql --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --host="$setup_socket" --username=postgres \
         --dbname="$database" >/dev/null <<SQL || die "securing the $database database failed"
ALTER SCHEMA public OWNER TO "$database";
REVOKE ALL ON SCHEMA public FROM PUBLIC;
SQL
done

pg_ctl --pgdata="$PGDATA" --mode=fast --wait --timeout=120 --silent stop >/dev/null \
    || die "the setup instance did not stop"
trap - EXIT
rm -rf "$setup_socket"
log "roles and databases ready; starting postgres"
exec postgres -D "$PGDATA" -c config_file="$config"
