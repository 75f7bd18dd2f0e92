# shellcheck shell=bash
# Sourced by the deploy scripts, not run: which Docker Compose this machine has.
#
# compose_command prints the command line prefix that runs Docker Compose here:
# "docker compose" when Docker's compose plugin answers `docker compose version`, else
# "docker-compose" when that program is installed; with neither it prints nothing and
# returns 1. The plugin is asked (not just `docker` looked up), since a docker client
# without the plugin says "unknown command" only when the command is run. Each probe is
# bounded by `timeout`, so a client that hangs cannot stop the caller.

compose_probe_seconds=30

compose_command() {
    if command -v docker >/dev/null 2>&1 \
            && timeout "$compose_probe_seconds" docker compose version >/dev/null 2>&1; then
        printf 'docker compose\n'
    elif command -v docker-compose >/dev/null 2>&1; then
        printf 'docker-compose\n'
    else
        return 1
    fi
}

# compose_up_hint FILE prints the command that starts the deployment of the compose FILE
# with the Docker Compose of this machine, or, without one, what to install first.
compose_up_hint() {
    local compose
    if compose="$(compose_command)"; then
        printf '%s -f %s up -d\n' "$compose" "$1"
    else
        printf 'install Docker Compose (the docker compose plugin, or docker-compose 1.28 or newer), then: docker compose -f %s up -d\n' "$1"
    fi
}
