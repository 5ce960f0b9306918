# Shared helpers for the project's scripts. Sourced, not run.

# Fixed loopback ports of the integration environment (the one list, also read by the tests):
# doh-a.test (127.0.0.1, ::1) and nginx on 127.0.0.3 on DOH_PORT, doh-a's plain DNS on DNS_PORT,
# doh-b.test on DOH_PORT_B/DNS_PORT_B, dnsmasq (the "system" DNS) on SYSTEM_DNS_PORT, the nginx
# origins on ORIGIN_PORT (HTTPS, 127.0.0.4-6), ORIGIN_PLAIN_PORT (plain) and ORIGIN_H1_PORT (HTTP/1.1).
set -a
. "$(dirname "${BASH_SOURCE[0]}")/env/ports.env"
set +a

# The debug build's flags, one set for the demo and the tests, so whichever runs first builds for the
# other. No debug information (two copies of BoringSSL, SwiftNIO): with the index store off as well, a
# build of `resolve` from a fresh clone took 263 s instead of SwiftPM's default 296 s on 2 cores, but
# the tests' discovery on Linux reads the index store, so it stays. Backtraces still name functions
# (from the symbol table), without line numbers; build without these flags to debug.
SWIFT_DEBUG_FLAGS=(-Xcc -g0 -Xswiftc -gnone)

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
    need_packages libcurl4-openssl-dev libssl-dev libc-ares-dev libhiredis-dev pkg-config ca-certificates
    command -v swift >/dev/null || { echo "swift is not on PATH (Swift 6.x toolchain required)" >&2; exit 2; }
}

# The test environment's packages. Scripts that isolate the network install them first, while the
# package registries can still be reached (Scripts/env/testenv.sh start installs them too).
need_testenv_packages() {
    need_packages bind9 bind9-dnsutils unbound dnsmasq-base nginx-light openssl python3 python3-cryptography python3-dnspython \
        iproute2 util-linux
}

# Python peers Debian 12 does not package at a version that has the feature under test, installed
# from PyPI (pinned by version and hash) into .build/pydeps, which the tests put on PYTHONPATH:
# dnspython 2.7 for its DDR client (RFC 9462, Resolver.try_ddr; Debian's 2.3 has none).
need_python_peers() {
    local target="$root/.build/pydeps"
    [ -f "$target/dns/_ddr.py" ] && return 0
    need_packages python3-pip
    local requirements
    requirements=$(mktemp)
    echo "dnspython==2.7.0 --hash=sha256:b4c34b7d10b51bcc3a5071e7b8dee77939f1e878477eeecc965e9835f63c6c86" >"$requirements"
    echo "installing into $target: dnspython 2.7.0 (the DDR client)" >&2
    /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes --target "$target" -r "$requirements" \
        2>&1 | grep -v "Running pip as the 'root' user" >&2 || true
    rm -f "$requirements"
    [ -f "$target/dns/_ddr.py" ] || { echo "need_python_peers: dnspython 2.7.0 did not install into $target" >&2; exit 1; }
}

# Runs the rest of the calling script in a network namespace of its own with only loopback up, so
# that nothing it starts — servers, tests, a mistaken dial — can send a packet off this machine,
# whatever an address in the test data says (198.18.0.0/15, 192.0.2.0/24 route off-machine here).
# Call it once every package is installed (apt needs the network):
#     isolate_network "${BASH_SOURCE[0]}" "$@"
# As root: unshare --net; otherwise a user namespace as well (unshare -rn). HTTPDNS_NETNS=off runs
# without isolation, and says so.
isolate_network() {
    local script=$1
    shift
    case "${HTTPDNS_NETNS:-}" in
        inside)
            if (exec 3<>/dev/tcp/198.18.0.1/9) 2>/dev/null; then
                echo "isolate_network: 198.18.0.1 is reachable inside the namespace; refusing to go on" >&2
                exit 1
            fi
            echo "network: isolated (a namespace with only loopback; dialling 198.18.0.1: Network is unreachable)" >&2
            return 0
            ;;
        off)
            echo "warning: HTTPDNS_NETNS=off: running without network isolation" >&2
            return 0
            ;;
    esac
    local flags=(--net)
    [ "$(id -u)" -ne 0 ] && flags=(--user --map-root-user --net)
    # shellcheck disable=SC2016  # expanded by the inner shell
    exec unshare "${flags[@]}" -- env HTTPDNS_NETNS=inside bash -c 'ip link set lo up || exit 1; exec bash "$0" "$@"' "$script" "$@"
}

# The release build of PRODUCT, built now (errors and warnings shown on stderr); its path on stdout.
release_product() { # product
    swift build -c release --product "$1" 2>&1 | grep -E "error|warning: " | grep -v distributed-tracing >&2 || true
    echo "$(swift build -c release --show-bin-path)/$1"
}

# The `resolve` a benchmark measures: RESOLVE_BIN when set (another build, for a before and after),
# else the release build.
bench_resolve() {
    if [ -n "${RESOLVE_BIN:-}" ]; then echo "$RESOLVE_BIN"; else release_product resolve; fi
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
    # Running means answering here: inside a network namespace, an environment started outside it
    # (its pidfiles say running) is on another loopback.
    if bash "$root/Scripts/env/testenv.sh" status >/dev/null 2>&1 && (exec 3<>"/dev/tcp/127.0.0.1/$DOH_PORT") 2>/dev/null; then return; fi
    bash "$root/Scripts/env/testenv.sh" start >/dev/null
    on_exit 'bash "$root/Scripts/env/testenv.sh" stop >/dev/null 2>&1 || true'
}

# Adds a command to run when the script exits (after the ones added before it).
exit_actions=""
on_exit() {
    exit_actions="$exit_actions $1;"
    # shellcheck disable=SC2064  # expanded now on purpose: the list as it stands
    trap "$exit_actions" EXIT
}

# Pins BIND (doh-a of the test environment) to CPU 0 with the servers under test, back to every CPU
# at exit; its pid in `bind_pid`.
pin_bind() {
    bind_pid=$(cat "$root/.testenv/named-a/named.pid")
    taskset -a -p -c 0 "$bind_pid" >/dev/null
    on_exit "taskset -a -p -c 0-$(( $(nproc) - 1 )) $bind_pid >/dev/null 2>&1 || true"
}

# The peers the daemon benchmarks compare with, in the daemon's role in front of BIND's plain DNS on
# $DNS_PORT (hd.test), with nothing that leaves loopback. Each writes a config file.
#
# dnsdist 1.7: LISTEN is the frontend line (addDOHLocal(…) or addTLSLocal(…)); a packet cache; no
# security polling (a DNS query to the vendor).
write_dnsdist_conf() { # file listen-line
    cat >"$1" <<CONF
setSecurityPollSuffix("")
setACL({"127.0.0.0/8"})
$2
newServer({address="127.0.0.1:$DNS_PORT", name="bind"})
pc = newPacketCache(100000, {maxTTL=86400, minTTL=0})
getPool(""):setCache(pc)
CONF
}

# Knot Resolver 5.6 listening with KIND ('doh2', 'tls'): hd.test stubbed to BIND, everything else
# refused; no trust anchor and none of the modules that reach the root (priming, time-skew detection,
# RFC 5011).
write_kresd_conf() { # file port kind cert key
    cat >"$1" <<CONF
net.listen('127.0.0.1', $2, { kind = '$3' })
net.tls('$4', '$5')
pcall(modules.unload, 'priming')
pcall(modules.unload, 'detect_time_skew')
pcall(modules.unload, 'detect_time_jump')
pcall(modules.unload, 'ta_update')
pcall(modules.unload, 'ta_signal_query')
pcall(modules.unload, 'ta_sentinel')
pcall(trust_anchors.remove, '.')
cache.size = 100 * MB
policy.add(policy.suffix(policy.STUB({'127.0.0.1@$DNS_PORT'}), {todname('hd.test.')}))
policy.add(policy.all(policy.REFUSE))
CONF
}

# unbound 1.17 as a caching forwarder: hd.test stubbed to BIND's plain DNS, everything else to a
# loopback port where nothing listens. LISTENER holds the listener's own lines (indented server:
# options: the port kind, TLS files, threads).
write_unbound_conf() { # file work-dir port listener-lines
    cat >"$1" <<CONF
server:
    interface: 127.0.0.1@$3
$4
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "$2"
    pidfile: "$2/unbound.pid"
    use-syslog: no
    logfile: "$2/unbound.log"
    verbosity: 0
    access-control: 127.0.0.0/8 allow
    do-not-query-localhost: no
    module-config: "iterator"
    msg-cache-size: 64m
    rrset-cache-size: 64m
stub-zone:
    name: "hd.test"
    stub-addr: 127.0.0.1@$DNS_PORT
forward-zone:
    name: "."
    forward-addr: 127.0.0.1@9
remote-control:
    control-enable: no
CONF
}

# One RFC 8484 GET target per line of NAMES-FILE ("name type" lines, dnsperf's format): PREFIX
# followed by /dns-query?dns= and the base64url of an A query with ID 0, for h2load -i.
doh_get_targets() { # names-file prefix [edns|padded]: an OPT record, or one padded to 128 bytes (RFC 8467)
    /usr/bin/python3 - "$1" "$2" "${3:-}" <<'PY'
import base64, struct, sys
form = sys.argv[3]
for line in open(sys.argv[1]):
    name = line.split()[0]
    question = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0\0\1\0\1"
    wire = struct.pack(">HHHHHH", 0, 0x0100, 1, 0, 0, 1 if form else 0) + question
    if form:
        # OPT: root owner, payload 1232, no flags; with "padded", a Padding option to 128 bytes.
        padding = (128 - (len(wire) + 11 + 4) % 128) % 128
        options = struct.pack(">HH", 12, padding) + bytes(padding) if form == "padded" else b""
        wire += b"\0" + struct.pack(">HHIH", 41, 1232, 0, len(options)) + options
    print(sys.argv[2] + "/dns-query?dns=" + base64.urlsafe_b64encode(wire).rstrip(b"=").decode())
PY
}
