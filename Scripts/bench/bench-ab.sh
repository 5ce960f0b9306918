#!/usr/bin/env bash
# Two builds of `resolve daemon` side by side on the cached path, in one run (BENCHMARKS.md, "Issue
# 48's re-cut"): both daemons up at once with the same config (BIND's DoH as the upstream, 1,000
# names warmed), then per round h2load GET (one connection, 64 in flight) and dnsperf over UDP
# (64 in flight) against each in turn, the order alternating by round. Prints q/s and the server's
# CPU µs per query (utime+stime from /proc around each run) per round and build.
#
#   Scripts/bench/bench-ab.sh BEFORE_BINARY AFTER_BINARY [ROUNDS] [SECONDS]   defaults 5 and 10
#
# Servers on CPU 0, clients on CPU 1, only loopback (its own namespace).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
before=$1 after=$2 rounds=${3:-5} seconds=${4:-10}
need_packages dnsperf nghttp2-client curl
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
use_testenv
work=$(mktemp -d)
ca="$root/.testenv/ca/ca.pem"
declare -A port=([before]=18496 [after]=18506) bin=([before]=$before [after]=$after) pid=()
for s in before after; do
cat >"$work/$s.yaml" <<YAML
upstreams:
  - {doh: "https://doh-a.test:$DOH_PORT/dns-query", bootstrap: [127.0.0.1]}
ca_file: $ca
allow_private: true
system_dns: ["127.0.0.1:$SYSTEM_DNS_PORT"]
listen: "127.0.0.1:${port[$s]}"
dns_listen: "127.0.0.1:$((${port[$s]} + 1))"
tls: {cert: $root/.testenv/ca/daemon.test.pem, key: $root/.testenv/ca/daemon.test.key}
limits: {max_concurrent_requests: 4096}
YAML
taskset -c 0 "${bin[$s]}" daemon --config "$work/$s.yaml" --log-level warning 2>"$work/$s.log" &
pid[$s]=$!
done
on_exit "kill ${pid[before]} ${pid[after]} 2>/dev/null || true; rm -rf '$work'"
pin_bind
for s in before after; do
  for _ in $(seq 1 100); do curl -sf --max-time 5 --cacert "$ca" "https://127.0.0.1:${port[$s]}/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
done
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for i in $(seq 0 999); do echo "w$i.bench.hd.test A"; done >"$work/cached.txt"
doh_get_targets "$work/cached.txt" "" >"$work/paths.txt"
for s in before after; do
  dnsperf -m doh -s 127.0.0.1 -p "${port[$s]}" -O doh-uri="https://127.0.0.1:${port[$s]}/dns-query" -c 1 -q 64 -d "$work/cached.txt" -n 2 >/dev/null 2>&1
  sed "s|^|https://127.0.0.1:${port[$s]}|" "$work/paths.txt" >"$work/h2-$s.txt"
done
for r in $(seq 1 "$rounds"); do
  order="before after"; [ $((r % 2)) = 0 ] && order="after before"
  for s in $order; do
    b=$(cpu_ticks "${pid[$s]}")
    out=$(taskset -c 1 h2load -c 1 -m 64 -D "$seconds" -i "$work/h2-$s.txt" 2>&1)
    a=$(cpu_ticks "${pid[$s]}")
    echo "$out" | awk -v s="$s" -v r="$r" -v t=$((a - b)) '/^finished in/ {q=$4; gsub(",", "", q)} /^requests:/ {n=$8} END {printf "h2load %s %s %.0f q/s %.2f us/q\n", r, s, q, (n>0 ? t*10000/n : 0)}'
    b=$(cpu_ticks "${pid[$s]}")
    out=$(taskset -c 1 dnsperf -m udp -s 127.0.0.1 -p $((${port[$s]} + 1)) -c 1 -q 64 -d "$work/cached.txt" -l "$seconds" 2>&1)
    a=$(cpu_ticks "${pid[$s]}")
    echo "$out" | awk -v s="$s" -v r="$r" -v t=$((a - b)) '/Queries completed/ {n=$3} /Queries per second/ {q=$4} END {printf "udp %s %s %.0f q/s %.2f us/q\n", r, s, q, (n>0 ? t*10000/n : 0)}'
  done
done
