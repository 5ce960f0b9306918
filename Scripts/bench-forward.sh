#!/usr/bin/env bash
# The daemon as a forwarder on misses, against dnsdist 1.7 in the same role (BENCHMARKS.md, issue 31).
#
#   Scripts/bench-forward.sh [ROUNDS] [NAMES]     defaults 3 and 20000
#   RESOLVE_BIN=/path/to/resolve Scripts/bench-forward.sh …   measures that build
#
# Every query is a miss: each round asks NAMES names never asked before (rN-i.bench.hd.test, a
# wildcard in BIND's zone), once each, over the DNS stub (UDP), dnsperf with 64 in flight. Servers:
#   daemon-doh   resolve daemon, upstream BIND's DoH (doh-a.test)
#   dnsdist-doh  dnsdist 1.7, a DoH backend (tls="openssl", dohPath) to the same BIND, no packet cache
#   daemon-dot   resolve daemon, upstream BIND's DoT
#   dnsdist-dot  dnsdist 1.7, a DoT backend to the same BIND, no packet cache
# Both verify BIND's certificate with the test CA; dnsdist's security polling is off. Servers (and
# BIND) on CPU 0, dnsperf on CPU 1. Reports q/s and lost queries per round, min/median/max.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. Scripts/lib.sh
rounds=${1:-3}
names=${2:-20000}

need_build_packages
need_packages dnsperf dnsdist python3
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
if [ -n "${RESOLVE_BIN:-}" ]; then
    bin=$RESOLVE_BIN
else
    swift build -c release --product resolve 2>&1 | grep -E "error|warning: " | grep -v distributed-tracing || true
    bin="$(swift build -c release --show-bin-path)/resolve"
fi
use_testenv

work=$(mktemp -d)
ca="$root/.testenv/ca/ca.pem"
declare -A port=([daemon-doh]=18529 [dnsdist-doh]=18531 [daemon-dot]=18532 [dnsdist-dot]=18534)
servers=(daemon-doh dnsdist-doh daemon-dot dnsdist-dot)
pids=()
declare -A pid_of
for server in daemon-doh daemon-dot; do
    case $server in
        daemon-doh) upstream="{doh: \"https://doh-a.test:$DOH_PORT/dns-query\", bootstrap: [127.0.0.1]}" ;;
        daemon-dot) upstream="{dot: \"127.0.0.1:$DOT_PORT\", tls_name: doh-a.test}" ;;
    esac
    cat >"$work/$server.yaml" <<YAML
upstreams:
  - $upstream
ca_file: $ca
allow_private: true
listen: "127.0.0.1:$((${port[$server]} + 1))"
dns_listen: "127.0.0.1:${port[$server]}"
cache: {prefetch: false}
YAML
    taskset -c 0 "$bin" daemon --config "$work/$server.yaml" --log-level warning 2>"$work/$server.log" &
    pids+=($!)
    pid_of[$server]=$!
done
for server in dnsdist-doh dnsdist-dot; do
    case $server in
        dnsdist-doh) backend="newServer({address=\"127.0.0.1:$DOH_PORT\", tls=\"openssl\", subjectName=\"doh-a.test\", dohPath=\"/dns-query\", validateCertificates=true, caStore=\"$ca\", name=\"bind-doh\"})" ;;
        dnsdist-dot) backend="newServer({address=\"127.0.0.1:$DOT_PORT\", tls=\"openssl\", subjectName=\"doh-a.test\", validateCertificates=true, caStore=\"$ca\", name=\"bind-dot\"})" ;;
    esac
    cat >"$work/$server.conf" <<CONF
setSecurityPollSuffix("")
setACL({"127.0.0.0/8"})
addLocal("127.0.0.1:${port[$server]}")
$backend
CONF
    taskset -c 0 dnsdist --supervised --disable-syslog -C "$work/$server.conf" >"$work/$server.log" 2>&1 &
    pids+=($!)
    pid_of[$server]=$!
done
on_exit "kill ${pids[*]} 2>/dev/null || true; rm -rf '$work'"
bind_pid=$(cat "$root/.testenv/named-a/named.pid")
taskset -a -p -c 0 "$bind_pid" >/dev/null
on_exit "taskset -a -p -c 0-$(( $(nproc) - 1 )) $bind_pid >/dev/null 2>&1 || true"
for server in "${servers[@]}"; do
    wait_for_port 127.0.0.1 "${port[$server]}" 20 || { cat "$work/$server.log" >&2; exit 1; }
done
# Each server answers one name first (connections to BIND open, dnsdist's health check passes).
for server in "${servers[@]}"; do
    for _ in $(seq 1 50); do
        dig +short +tries=1 +time=1 -p "${port[$server]}" @127.0.0.1 "warm.bench.hd.test" A 2>/dev/null | grep -q . && break
        sleep 0.2
    done
done

results="$work/results.txt"
: >"$results"
for round in $(seq 1 "$rounds"); do
    for server in "${servers[@]}"; do
        for i in $(seq 1 "$names"); do echo "r$round-$i.$server.bench.hd.test A"; done >"$work/names.txt"
        taskset -c 1 dnsperf -s 127.0.0.1 -p "${port[$server]}" -c 1 -q 64 -t 5 -d "$work/names.txt" -n 1 2>&1 \
            | awk -v s="$server" '/Queries per second/ {q=$4} /Queries lost/ {l=$3} /Average Latency/ && !lat {lat=$4}
                END {printf "%s %.0f %d %.3f\n", s, q, l, lat*1000}' >>"$results"
    done
done

python3 - "$results" "$rounds" "$names" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print(f"Misses over the DNS stub (UDP), {sys.argv[3]} new names per round, dnsperf 64 in flight, {sys.argv[2]} rounds.\n")
print("| server | q/s median (min-max) | lost (all rounds) | avg latency ms |")
print("|---|---|---|---|")
q = {}
for server in ("daemon-doh", "dnsdist-doh", "daemon-dot", "dnsdist-dot"):
    values = sorted(float(r[1]) for r in rows if r[0] == server)
    q[server] = values
    lost = sum(int(r[2]) for r in rows if r[0] == server)
    lat = statistics.median(float(r[3]) for r in rows if r[0] == server)
    print(f"| {server} | {statistics.median(values):,.0f} ({values[0]:,.0f}-{values[-1]:,.0f}) | {lost} | {lat:.2f} |")
print()
for ours, peer in (("daemon-doh", "dnsdist-doh"), ("daemon-dot", "dnsdist-dot")):
    a, b = q[ours], q[peer]
    print(f"{ours} / {peer}: **{statistics.median(a) / statistics.median(b):.2f}x** ({a[0] / b[-1]:.2f}-{a[-1] / b[0]:.2f})")
PY
