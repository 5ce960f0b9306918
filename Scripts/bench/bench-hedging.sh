#!/usr/bin/env bash
# Misses to the stub over UDP: a build against another (before and after), and hedging's cost with
# two upstreams (BENCHMARKS.md, "Issue 48's re-cut").
#
#   BEFORE_BIN=/path/to/old/resolve Scripts/bench/bench-hedging.sh [ROUNDS] [NAMES]   defaults 5 and 20000
#   RESOLVE_BIN=/path/to/resolve …    measures that build as "after" instead of building one
#
# Servers, each `resolve daemon` on CPU 0 with BIND's DoH as its upstream (doh-a.test; doh-b.test as
# the second): before-1up (BEFORE_BIN; left out when unset), after-1up, after-2up-hedge (the default
# `hedging: true`), after-2up-nohedge. Each round asks NAMES names never asked before (a wildcard in
# BIND's zone), dnsperf on CPU 1 with 64 in flight, the servers in a rotating order. Prints
# "round server q/s lost avg-latency-ms" per run, then min/median/max per server.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
rounds=${1:-5}
names=${2:-20000}

need_build_packages
need_packages dnsperf python3
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
after=$(bench_resolve)
use_testenv

work=$(mktemp -d)
ca="$root/.testenv/ca/ca.pem"
declare -A port=([before-1up]=18601 [after-1up]=18603 [after-2up-hedge]=18605 [after-2up-nohedge]=18607)
declare -A bin=([before-1up]=${BEFORE_BIN:-} [after-1up]=$after [after-2up-hedge]=$after [after-2up-nohedge]=$after)
servers=(after-1up after-2up-hedge after-2up-nohedge)
[ -n "${BEFORE_BIN:-}" ] && servers=(before-1up "${servers[@]}")
pids=()
for server in "${servers[@]}"; do
    second="" hedge=""
    case $server in
        after-2up-*) second="  - {doh: \"https://doh-b.test:$DOH_PORT_B/dns-query\", bootstrap: [127.0.0.1]}" ;;
    esac
    [ "$server" = after-2up-nohedge ] && hedge="hedging: false"
    cat >"$work/$server.yaml" <<YAML
upstreams:
  - {doh: "https://doh-a.test:$DOH_PORT/dns-query", bootstrap: [127.0.0.1]}
$second
$hedge
ca_file: $ca
allow_private: true
system_dns: ["127.0.0.9:9"]
listen: "127.0.0.1:$((${port[$server]} + 1))"
dns_listen: "127.0.0.1:${port[$server]}"
cache: {prefetch: false}
YAML
    taskset -c 0 "${bin[$server]}" daemon --config "$work/$server.yaml" --log-level warning 2>"$work/$server.log" &
    pids+=($!)
done
on_exit "kill ${pids[*]} 2>/dev/null; rm -rf $work"
taskset -a -p -c 0 "$(cat .testenv/named-a/named.pid)" >/dev/null
for server in "${servers[@]}"; do
    for _ in $(seq 1 50); do
        dig +short +tries=1 +time=1 -p "${port[$server]}" @127.0.0.1 warm.bench.hd.test A 2>/dev/null | grep -q . && break
        sleep 0.2
    done
done
count=${#servers[@]}
for round in $(seq 1 "$rounds"); do
    for k in $(seq 0 $((count - 1))); do
        server=${servers[$(((k + round) % count))]}
        for i in $(seq 1 "$names"); do echo "h$round-$i.$server.bench.hd.test A"; done >"$work/names.txt"
        taskset -c 1 timeout 120 dnsperf -s 127.0.0.1 -m udp -p "${port[$server]}" -c 1 -q 64 -t 5 -l 30 -d "$work/names.txt" -n 1 2>&1 |
            awk -v s="$server" -v r="$round" '/Queries per second/ {q=$4} /Queries lost/ {l=$3} /Average Latency/ && !lat {lat=$4} END {printf "%s %s %.0f %d %.3f\n", r, s, q, l, lat*1000}'
    done
done | tee "$work/results.txt"
echo "server: q/s min / median / max"
for server in "${servers[@]}"; do
    awk -v s="$server" '$2 == s {print $3}' "$work/results.txt" | sort -n |
        awk -v s="$server" '{v[NR]=$1} END {printf "%s: %d / %d / %d\n", s, v[1], v[int((NR+1)/2)], v[NR]}'
done
