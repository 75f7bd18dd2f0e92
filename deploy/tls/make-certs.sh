#!/usr/bin/env bash
# Make a local certificate authority and the TLS certificates of the segshuffle proxy with
# openssl (deploy/tls/nginx.conf):
#
#   ca.pem, ca-key.pem             the local CA (10 years). ca.pem is public: the shuffler
#                                  (SEGSHUFFLE_SHUFFLER_SERVER_CA_FILE), the apps (Client
#                                  ca_file=) and the admin (segshuffle admin --ca-file) trust it.
#   server.pem, server-key.pem     the server's certificate (2 years), for port 8443
#   shuffler.pem, shuffler-key.pem the shuffler's certificate (2 years), for port 8444
#
# Keys are EC P-256, mode 0600; the directory is 0700. Each certificate names
# segshuffle-<service> (the proxy's alias on the compose network), localhost, 127.0.0.1 and
# ::1, plus the comma-separated DNS names or IP addresses in SEGSHUFFLE_TLS_SERVER_NAMES /
# SEGSHUFFLE_TLS_SHUFFLER_NAMES (the public names of a real deployment).
#
#   deploy/tls/make-certs.sh [--out DIR] [--force]
#
# DIR defaults to $SEGSHUFFLE_TLS_DIR, else deploy/tls/certs (ignored by git).
# Idempotent: an existing CA is kept, and so is every certificate that it signed, that
# names the requested hosts and that is valid for 30 more days; --force makes all anew.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${SEGSHUFFLE_TLS_DIR:-${here}/certs}"
force=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) [[ $# -ge 2 ]] || { echo "make-certs: error: --out needs a directory" >&2; exit 2; }
               out="$2"; shift 2 ;;
        --force) force=1; shift ;;
        -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "make-certs: error: unknown argument '$1' (--out DIR, --force)" >&2; exit 2 ;;
    esac
done
command -v openssl >/dev/null || { echo "make-certs: error: openssl is required" >&2; exit 2; }

log() { printf '[make-certs] %s\n' "$*" >&2; }

# "DNS:a,IP:1.2.3.4,..." from the built-in names of $1 and the extra list $2.
san_list() {
    local service="$1" extra="$2" name sans
    sans="DNS:segshuffle-${service},DNS:localhost,IP:127.0.0.1,IP:::1"
    local IFS=','
    for name in $extra; do
        name="${name//[[:space:]]/}"
        [[ -n "$name" ]] || continue
        if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then
            [[ "$name" =~ ^[0-9a-fA-F.:]+$ ]] || { echo "make-certs: error: bad IP address '$name'" >&2; exit 2; }
            sans+=",IP:${name}"
        else
            [[ "$name" =~ ^[A-Za-z0-9*]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]] \
                || { echo "make-certs: error: bad host name '$name'" >&2; exit 2; }
            sans+=",DNS:${name}"
        fi
    done
    printf '%s' "$sans"
}

# The subjectAltName of certificate $1 in the "DNS:a,IP:b" form of san_list.
current_sans() {
    openssl x509 -in "$1" -noout -ext subjectAltName 2>/dev/null | tail -n +2 \
        | tr -d ' ' | sed -e 's/IPAddress:/IP:/g' -e 's/0:0:0:0:0:0:0:1/::1/g'
}

umask 077
mkdir -p "$out"
chmod 0700 "$out"
tmp="$(mktemp -d "${out}/.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

ca_valid() {
    [[ -s "$out/ca.pem" && -s "$out/ca-key.pem" ]] \
        && openssl x509 -in "$out/ca.pem" -noout -checkend $((365 * 86400)) >/dev/null 2>&1
}

if [[ "$force" == 1 ]] || ! ca_valid; then
    log "new local CA in $out/ca.pem"
    cat > "$tmp/ca.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
x509_extensions = ca
[dn]
CN = segshuffle local CA $(openssl rand -hex 4)
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
CNF
    openssl req -x509 -new -config "$tmp/ca.cnf" -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
        -nodes -keyout "$tmp/ca-key.pem" -out "$tmp/ca.pem" -days 3650 2>/dev/null
    chmod 0644 "$tmp/ca.pem"
    mv "$tmp/ca-key.pem" "$out/ca-key.pem"
    mv "$tmp/ca.pem" "$out/ca.pem"
    force=1   # every certificate of the old CA goes
fi

# A certificate for $1 (server or shuffler) with the names of san_list, unless a good one
# exists.
leaf() {
    local service="$1" sans="$2" cert="$out/$1.pem" key="$out/$1-key.pem"
    if [[ "$force" != 1 && -s "$cert" && -s "$key" ]] \
        && openssl verify -CAfile "$out/ca.pem" "$cert" >/dev/null 2>&1 \
        && openssl x509 -in "$cert" -noout -checkend $((30 * 86400)) >/dev/null 2>&1 \
        && [[ "$(current_sans "$cert")" == "$sans" ]]; then
        log "keeping $cert"
        return 0
    fi
    log "new $service certificate $cert ($sans)"
    cat > "$tmp/$service.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = segshuffle-${service}
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = ${sans}
CNF
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/$service-key.pem" 2>/dev/null
    openssl req -new -config "$tmp/$service.cnf" -key "$tmp/$service-key.pem" \
        -out "$tmp/$service.csr" 2>/dev/null
    openssl x509 -req -in "$tmp/$service.csr" -CA "$out/ca.pem" -CAkey "$out/ca-key.pem" \
        -set_serial "0x$(openssl rand -hex 16)" -days 730 -extfile "$tmp/$service.cnf" \
        -extensions leaf -out "$tmp/$service.pem" 2>/dev/null
    chmod 0644 "$tmp/$service.pem"
    mv "$tmp/$service-key.pem" "$key"
    mv "$tmp/$service.pem" "$cert"
}

server_sans="$(san_list server "${SEGSHUFFLE_TLS_SERVER_NAMES:-}")"
shuffler_sans="$(san_list shuffler "${SEGSHUFFLE_TLS_SHUFFLER_NAMES:-}")"
leaf server "$server_sans"
leaf shuffler "$shuffler_sans"
log "done: trust $out/ca.pem"
