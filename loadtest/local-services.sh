#!/usr/bin/env bash
# Run the load test against services started locally by `segshuffle serve` (no Docker).
#
#   loadtest/local-services.sh [loadtest.py flags...]
#   loadtest/local-services.sh --users 300 --repeats 1
#
# Starts `segshuffle serve server` and `segshuffle serve shuffler` on 127.0.0.1 (free ports
# unless SEGSHUFFLE_LOADTEST_SERVER_PORT / SEGSHUFFLE_LOADTEST_SHUFFLER_PORT are set) with
# fresh databases in a temporary directory, random tokens and a fresh invitation issuer key
# (per-source rate limits off: every simulated user comes from 127.0.0.1), waits for /readyz, runs
# loadtest/loadtest.py against them, stops them and removes the directory. The services' logs
# are kept when the load test fails.
#
# Environment: SEGSHUFFLE (the command, default: the repository's .venv, else PATH),
# PYTHON (the interpreter for loadtest.py, default: the repository's .venv, else python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/.." && pwd)"
segshuffle="${SEGSHUFFLE:-}"
python="${PYTHON:-}"
if [[ -z "$segshuffle" ]]; then
    if [[ -x "$repo/.venv/bin/segshuffle" ]]; then segshuffle="$repo/.venv/bin/segshuffle"
    else segshuffle="$(command -v segshuffle || true)"; fi
fi
if [[ -z "$python" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"
    else python="$(command -v python3)"; fi
fi
[[ -n "$segshuffle" ]] || { echo "local-services: error: no segshuffle command found" >&2; exit 2; }

log() { printf '[local-services %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
token() { head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }

workdir="$(mktemp -d "${TMPDIR:-/tmp}/segshuffle-loadtest.XXXXXX")"
pids=()
status=1
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [[ "$status" == "0" ]]; then
        rm -rf "$workdir"
    else
        log "logs kept in $workdir"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

server_port="${SEGSHUFFLE_LOADTEST_SERVER_PORT:-$(free_port)}"
shuffler_port="${SEGSHUFFLE_LOADTEST_SHUFFLER_PORT:-$(free_port)}"
admin_token="$(token)"
shuffler_token="$(token)"
operator_token="$(token)"
issuer_public="$("$segshuffle" admin issuer-key --out "$workdir/issuer-key.pem")"

log "server on 127.0.0.1:$server_port, shuffler on 127.0.0.1:$shuffler_port, state in $workdir"
SEGSHUFFLE_SERVER_ADMIN_TOKEN="$admin_token" \
SEGSHUFFLE_SERVER_SHUFFLER_TOKEN="$shuffler_token" \
    "$segshuffle" serve server --host 127.0.0.1 --port "$server_port" \
        --database "$workdir/server.sqlite3" > "$workdir/server.log" 2>&1 &
pids+=("$!")
SEGSHUFFLE_SHUFFLER_SERVER_TOKEN="$shuffler_token" \
SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN="$operator_token" \
SEGSHUFFLE_SHUFFLER_INVITATION_KEYS="$issuer_public" \
SEGSHUFFLE_SHUFFLER_ENROLL_RATE=0 SEGSHUFFLE_SHUFFLER_SUBMIT_RATE=0 SEGSHUFFLE_SHUFFLER_READ_RATE=0 \
    "$segshuffle" serve shuffler --host 127.0.0.1 --port "$shuffler_port" \
        --database "$workdir/shuffler.sqlite3" \
        --server-url "http://127.0.0.1:$server_port" > "$workdir/shuffler.log" 2>&1 &
pids+=("$!")

ready() {
    "$python" - "$1" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1] + "/readyz", timeout=2)
except Exception:
    raise SystemExit(1)
EOF
}
for _ in $(seq 1 120); do
    if ready "http://127.0.0.1:$server_port" && ready "http://127.0.0.1:$shuffler_port"; then
        break
    fi
    for pid in "${pids[@]}"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "a service exited during startup:"
            tail -n 5 "$workdir/server.log" "$workdir/shuffler.log" >&2
            exit 1
        fi
    done
    sleep 0.5
done
ready "http://127.0.0.1:$shuffler_port" || { log "services not ready after 60 s"; exit 1; }
log "both services ready"

# CPU seconds (user + system) of a process and its descendants, reaped children included.
cpu_seconds() {
    "$python" - "$1" <<'EOF'
import os, sys
ticks = os.sysconf("SC_CLK_TCK")
stats = {}
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = (int(fields[1]), sum(int(v) for v in fields[11:15]))
tree, frontier = set(), [int(sys.argv[1])]
while frontier:
    pid = frontier.pop()
    tree.add(pid)
    frontier.extend(p for p, (parent, _) in stats.items() if parent == pid and p not in tree)
print(f"{sum(stats[p][1] for p in tree if p in stats) / ticks:.2f}")
EOF
}
server_cpu_before="$(cpu_seconds "${pids[0]}")"
shuffler_cpu_before="$(cpu_seconds "${pids[1]}")"

set +e
SEGSHUFFLE_ADMIN_TOKEN="$admin_token" SEGSHUFFLE_OPERATOR_TOKEN="$operator_token" \
    "$python" "$here/loadtest.py" --server-url "http://127.0.0.1:$server_port" \
        --shuffler-url "http://127.0.0.1:$shuffler_port" --env-file /dev/null \
        --issuer-key "$workdir/issuer-key.pem" "$@"
status=$?
set -e
server_cpu="$(cpu_seconds "${pids[0]}")"
shuffler_cpu="$(cpu_seconds "${pids[1]}")"
log "CPU used during the load test: server $(awk "BEGIN {printf \"%.2f\", $server_cpu - $server_cpu_before}") s, shuffler $(awk "BEGIN {printf \"%.2f\", $shuffler_cpu - $shuffler_cpu_before}") s (process trees)"
exit "$status"
