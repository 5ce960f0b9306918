# Shared helpers for the project's scripts. Sourced, not run.

# Fixed loopback ports of the integration environment (the one list, also read by the tests):
# doh-a.test (127.0.0.1, ::1) and nginx on 127.0.0.3 on DOH_PORT, doh-a's plain DNS on DNS_PORT,
# doh-b.test on DOH_PORT_B/DNS_PORT_B, dnsmasq (the "system" DNS) on SYSTEM_DNS_PORT, the nginx
# origins on ORIGIN_PORT (HTTPS, 127.0.0.4-6), ORIGIN_PLAIN_PORT (plain) and ORIGIN_H1_PORT (HTTP/1.1).
set -a
. "$(dirname "${BASH_SOURCE[0]}")/ports.env"
set +a

# Installs the Debian packages that are missing (apt-get needs root; CI and dev machines run as root).
need_packages() {
    local missing=()
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The system packages the Swift build itself needs.
need_build_packages() {
    need_packages libcurl4-openssl-dev libc-ares-dev pkg-config ca-certificates
    command -v swift >/dev/null || { echo "swift is not on PATH (Swift 6.x toolchain required)" >&2; exit 2; }
}

wait_for_port() { # host port [seconds]
    local host=$1 port=$2 deadline=$((SECONDS + ${3:-10}))
    while ! (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; do
        if [ $SECONDS -ge $deadline ]; then echo "timed out waiting for $host:$port" >&2; return 1; fi
        sleep 0.1
    done
}

stop_pidfile() { # pidfile
    local pidfile=$1 pid
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

# Starts the loopback test environment unless it is already running, and stops it again on exit
# only if this script started it (benchmarks can run alongside a developer's own environment).
use_testenv() {
    if bash "$root/Scripts/testenv.sh" status >/dev/null 2>&1; then return; fi
    bash "$root/Scripts/testenv.sh" start >/dev/null
    on_exit 'bash "$root/Scripts/testenv.sh" stop >/dev/null 2>&1 || true'
}

# Adds a command to run when the script exits (after the ones added before it).
exit_actions=""
on_exit() {
    exit_actions="$exit_actions $1;"
    # shellcheck disable=SC2064  # expanded now on purpose: the list as it stands
    trap "$exit_actions" EXIT
}
