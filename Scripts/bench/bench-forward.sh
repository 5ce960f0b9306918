#!/usr/bin/env bash
# The daemon as a forwarder on misses, against dnsdist 1.7 in the same role (BENCHMARKS.md).
#
#   Scripts/bench/bench-forward.sh [ROUNDS] [NAMES]     defaults 3 and 20000 (names per round and transport)
#   RESOLVE_BIN=/path/to/resolve Scripts/bench/bench-forward.sh …   measures that build
#
# Every query is a miss: each round asks NAMES names never asked before (rN-i.bench.hd.test, a
# wildcard in BIND's zone), once each, dnsperf with 64 in flight, over each of the servers' client
# transports: the DNS stub over UDP and over TCP (dnsperf), and DoH (h2load, one GET per name; the
# daemon's `listen` with TLS, dnsdist's addDOHLocal, both with a certificate of the test CA). Servers:
#   daemon-doh   resolve daemon, upstream BIND's DoH (doh-a.test)
#   dnsdist-doh  dnsdist 1.7, a DoH backend (tls="openssl", dohPath) to the same BIND, no packet cache
#   daemon-dot   resolve daemon, upstream BIND's DoT
#   dnsdist-dot  dnsdist 1.7, a DoT backend to the same BIND, no packet cache
# Both verify BIND's certificate with the test CA; dnsdist's security polling is off. Servers (and
# BIND) on CPU 0, dnsperf on CPU 1. Reports q/s and lost queries per round, min/median/max.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
rounds=${1:-3}
names=${2:-20000}

need_build_packages
need_packages dnsperf dnsdist nghttp2-client python3
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
bin=$(bench_resolve)   # RESOLVE_BIN=/path/to/resolve measures another build
use_testenv

work=$(mktemp -d)
ca="$root/.testenv/ca/ca.pem"
declare -A port=([daemon-doh]=18529 [dnsdist-doh]=18531 [daemon-dot]=18533 [dnsdist-dot]=18535)
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
tls: {cert: $root/.testenv/ca/daemon.test.pem, key: $root/.testenv/ca/daemon.test.key}
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
addDOHLocal("127.0.0.1:$((${port[$server]} + 1))", "$root/.testenv/ca/doh-a.test.pem", "$root/.testenv/ca/doh-a.test.key", "/dns-query")
$backend
CONF
    taskset -c 0 dnsdist --supervised --disable-syslog -C "$work/$server.conf" >"$work/$server.log" 2>&1 &
    pids+=($!)
    pid_of[$server]=$!
done
on_exit "kill ${pids[*]} 2>/dev/null || true; rm -rf '$work'"
pin_bind
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
modes=(udp tcp doh)
for round in $(seq 1 "$rounds"); do
    for mode in "${modes[@]}"; do
        for server in "${servers[@]}"; do
            for i in $(seq 1 "$names"); do echo "r$round-$mode-$i.$server.bench.hd.test A"; done >"$work/names.txt"
            if [ "$mode" = doh ]; then
                # h2load, not dnsperf: dnsperf 2.10 loses dnsdist 1.7's DoH answers that share a TLS
                # record (BENCHMARKS.md). Each name one GET (RFC 8484 dns= of a query with ID 0).
                doh_get_targets "$work/names.txt" "https://127.0.0.1:$((${port[$server]} + 1))" >"$work/uris.txt"
                taskset -c 1 timeout 120 h2load -c 1 -m 64 -n "$names" -i "$work/uris.txt" 2>&1 \
                    | awk -v s="$server" '/^finished in/ {q=$4} /^requests:/ {l=$2-$8} /^time for request:/ {lat=$6; unit=$6}
                        END {sub(/[0-9.]+/, "", unit); v=lat+0; if (unit=="us") v/=1000; if (unit=="s") v*=1000
                             printf "doh %s %.0f %d %.3f\n", s, q, l, v}' >>"$results"
                continue
            fi
            taskset -c 1 timeout 120 dnsperf -s 127.0.0.1 -m "$mode" -p "${port[$server]}" -c 1 -q 64 -t 5 -l 30 -d "$work/names.txt" -n 1 2>&1 \
                | awk -v s="$server" -v m="$mode" '/Queries per second/ {q=$4} /Queries lost/ {l=$3} /Average Latency/ && !lat {lat=$4}
                    END {printf "%s %s %.0f %d %.3f\n", m, s, q, l, lat*1000}' >>"$results"
        done
    done
done

PYTHONPATH="$root/Scripts/bench" python3 - "$results" "$rounds" "$names" <<'PY'
import sys
from stats import median, median_range, ratio_range
rows = [line.split() for line in open(sys.argv[1])]
print(f"Misses, {sys.argv[3]} new names per round and client transport, dnsperf 64 in flight, {sys.argv[2]} rounds.\n")
print("| client transport | server | q/s median (min-max) | lost (all rounds) | avg latency ms |")
print("|---|---|---|---|---|")
q = {}
for mode in ("udp", "tcp", "doh"):
    for server in ("daemon-doh", "dnsdist-doh", "daemon-dot", "dnsdist-dot"):
        mine = [r for r in rows if r[0] == mode and r[1] == server]
        values = [float(r[2]) for r in mine]
        q[mode, server] = values
        lost = sum(int(r[3]) for r in mine)
        lat = median(float(r[4]) for r in mine)
        print(f"| {mode} | {server} | {median_range(values)} | {lost} | {lat:.2f} |")
print()
for mode in ("udp", "tcp", "doh"):
    for ours, peer in (("daemon-doh", "dnsdist-doh"), ("daemon-dot", "dnsdist-dot")):
        a, b = q[mode, ours], q[mode, peer]
        if min(a + b) <= 0:
            print(f"{mode}: {ours} / {peer}: no ratio (a round answered nothing)")
            continue
        ratio, worst, best = ratio_range(a, b)
        print(f"{mode}: {ours} / {peer}: **{ratio:.2f}x** ({worst:.2f}-{best:.2f})")
PY
