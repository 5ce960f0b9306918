#!/usr/bin/env bash
# DNS over TLS serving: `resolve daemon`'s dot_listen against the peers' DoT listeners (BENCHMARKS.md).
#
#   Scripts/bench/bench-dot.sh [ROUNDS] [SECONDS]     defaults 3 and 10
#   RESOLVE_BIN=/path/to/resolve Scripts/bench/bench-dot.sh …   measures that build
#
# One client, dnsperf -m dot (one TLS connection, 64 queries in flight), over 1,000 cached names, against:
#   daemon   resolve daemon (upstream: BIND's DoH), answering from its cache
#   bind     BIND 9.18's own DoT listener (doh-a of the test environment, answering from its zone)
#   unbound  unbound 1.17 as a caching forwarder with a DoT listener (hd.test stubbed to BIND)
#   dnsdist  dnsdist 1.7 with a DoT frontend (addTLSLocal) and a packet cache, BIND as its backend
#   kresd    Knot Resolver 5.6 with a DoT listener (kind 'tls'), hd.test stubbed to BIND
# Rounds interleaved, ROUNDS x SECONDS per server. Servers pinned to CPU 0, the client to CPU 1;
# server CPU time per query from /proc/PID/stat. dnsperf does not verify certificates (a load
# generator, talking only to the loopback servers started here).
#
# Then the library's DoT upstream (DoHBenchmark with a tls:// URL, certificate verified with the test
# CA) against dnsperf -m dot as clients of BIND's DoT listener, ROUNDS times each: latency with one
# query in flight (1,000 names) and throughput with 64 in flight (5,000 names).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
rounds=${1:-3}
seconds=${2:-10}
port=18496
dot_port=18528
unbound_port=18445
dnsdist_port=18449
kresd_port=18450

need_build_packages
need_packages dnsperf unbound dnsdist knot-resolver curl python3
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
bin=$(bench_resolve)   # RESOLVE_BIN=/path/to/resolve measures another build
client_bench=$(release_product DoHBenchmark)
use_testenv

work=$(mktemp -d)
ca="$root/.testenv/ca/ca.pem"
cert="$root/.testenv/ca/doh-a.test.pem"
key="$root/.testenv/ca/doh-a.test.key"
cat >"$work/daemon.yaml" <<YAML
upstreams:
  - {doh: "https://doh-a.test:$DOH_PORT/dns-query", bootstrap: [127.0.0.1]}
ca_file: $ca
allow_private: true
system_dns: ["127.0.0.1:$SYSTEM_DNS_PORT"]
listen: "127.0.0.1:$port"
dot_listen: "127.0.0.1:$dot_port"
tls: {cert: $root/.testenv/ca/daemon.test.pem, key: $root/.testenv/ca/daemon.test.key}
YAML
taskset -c 0 "$bin" daemon --config "$work/daemon.yaml" --log-level warning 2>"$work/daemon.log" &
daemon=$!
write_unbound_conf "$work/unbound.conf" "$work" "$unbound_port" "    tls-port: $unbound_port
    tls-service-key: \"$key\"
    tls-service-pem: \"$cert\"
    num-threads: 1
    incoming-num-tcp: 1024"
taskset -c 0 unbound -d -c "$work/unbound.conf" 2>"$work/unbound.stderr" &
unbound=$!
write_dnsdist_conf "$work/dnsdist.conf" "addTLSLocal(\"127.0.0.1:$dnsdist_port\", \"$cert\", \"$key\")"
taskset -c 0 dnsdist --supervised --disable-syslog -C "$work/dnsdist.conf" >"$work/dnsdist.log" 2>&1 &
dnsdist=$!
mkdir -p "$work/kresd"
write_kresd_conf "$work/kresd.conf" "$kresd_port" tls "$cert" "$key"
(cd "$work/kresd" && exec taskset -c 0 kresd -n -c "$work/kresd.conf" . >"$work/kresd.log" 2>&1) &
kresd=$!
on_exit "kill $daemon $unbound $dnsdist $kresd 2>/dev/null || true; rm -rf '$work'"
pin_bind
wait_for_port 127.0.0.1 "$dot_port" 20 || { cat "$work/daemon.log" >&2; exit 1; }
wait_for_port 127.0.0.1 "$unbound_port" || { cat "$work/unbound.stderr" >&2; exit 1; }
wait_for_port 127.0.0.1 "$dnsdist_port" || { cat "$work/dnsdist.log" >&2; exit 1; }
wait_for_port 127.0.0.1 "$kresd_port" || { cat "$work/kresd.log" >&2; exit 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for i in $(seq 0 999); do echo "w$i.bench.hd.test A"; done >"$work/cached.txt"
servers=(daemon bind unbound dnsdist kresd)
declare -A dport=([daemon]=$dot_port [bind]=$DOT_PORT [unbound]=$unbound_port [dnsdist]=$dnsdist_port [kresd]=$kresd_port)
declare -A spid=([daemon]=$daemon [bind]=$bind_pid [unbound]=$unbound [dnsdist]=$dnsdist [kresd]=$kresd)
for server in "${servers[@]}"; do   # warm every cache with every name
    dnsperf -m dot -s 127.0.0.1 -p "${dport[$server]}" -c 1 -q 64 -d "$work/cached.txt" -n 2 >/dev/null 2>&1
done

results="$work/results.txt"
: >"$results"
for _ in $(seq 1 "$rounds"); do
    for server in "${servers[@]}"; do
        before=$(cpu_ticks "${spid[$server]}")
        out=$(taskset -c 1 dnsperf -m dot -s 127.0.0.1 -p "${dport[$server]}" -c 1 -q 64 -d "$work/cached.txt" -l "$seconds" 2>&1)
        after=$(cpu_ticks "${spid[$server]}")
        echo "$out" | awk -v s="$server" -v t=$((after - before)) '
            /Queries completed/ {n=$3} /Queries lost/ {l=$3} /Queries per second/ {q=$4} /Average Latency/ && lat == "" {lat=$4}
            END {printf "%s %.0f %.3f %.1f %d\n", s, q, lat*1000, (n > 0 ? t*10000/n : 0), l}' >>"$results"
    done
done

# The library as a DoT client, against dnsperf as one (both of BIND's DoT listener, both on CPU 1).
for i in $(seq 0 999); do echo "p$i.bench.hd.test A"; done >"$work/latency.txt"
for i in $(seq 0 4999); do echo "q$i.bench.hd.test A"; done >"$work/throughput.txt"
client_results="$work/client.txt"
: >"$client_results"
for _ in $(seq 1 "$rounds"); do
    taskset -c 1 "$client_bench" latency "tls://127.0.0.1:$DOT_PORT#doh-a.test" 127.0.0.1 "$ca" 1000 \
        | python3 -c 'import json,sys; print("ours-latency", json.load(sys.stdin)["median_s"])' >>"$client_results"
    taskset -c 1 dnsperf -m dot -s 127.0.0.1 -p "$DOT_PORT" -c 1 -q 1 -d "$work/latency.txt" -n 1 2>&1 \
        | awk '/Average Latency/ && !l {l=$4} END {print "peer-latency", l}' >>"$client_results"
    taskset -c 1 "$client_bench" throughput "tls://127.0.0.1:$DOT_PORT#doh-a.test" 127.0.0.1 "$ca" 5000 64 \
        | python3 -c 'import json,sys; d=json.load(sys.stdin); print("ours-qps", d["qps"], d["failures"])' >>"$client_results"
    taskset -c 1 dnsperf -m dot -s 127.0.0.1 -p "$DOT_PORT" -c 1 -q 64 -d "$work/throughput.txt" -n 1 2>&1 \
        | awk '/Queries per second/ {q=$4} /Queries lost/ {l=$3} END {print "peer-qps", q, l}' >>"$client_results"
done

PYTHONPATH="$root/Scripts/bench" python3 - "$results" "$rounds" "$seconds" "$client_results" <<'PY'
import sys
from stats import median, median_range, ratio_range
rows = [line.split() for line in open(sys.argv[1])]
rounds, seconds, client_file = sys.argv[2:]
servers = ("daemon", "bind", "unbound", "dnsdist", "kresd")
names = {"daemon": "resolve daemon", "bind": "BIND 9.18", "unbound": "unbound 1.17", "dnsdist": "dnsdist 1.7", "kresd": "kresd 5.6"}
q = {s: [float(r[1]) for r in rows if r[0] == s] for s in servers}
print(f"DNS over TLS, cached names, dnsperf -m dot, 1 connection, 64 in flight, {rounds} x {seconds} s per server, rounds interleaved.\n")
print("| server | q/s median (min-max) | avg latency ms | server CPU µs/query | lost |")
print("|---|---|---|---|---|")
for s in servers:
    lat = median(float(r[2]) for r in rows if r[0] == s)
    cpu = median(float(r[3]) for r in rows if r[0] == s)
    lost = sum(int(r[4]) for r in rows if r[0] == s)
    print(f"| {names[s]} | {median_range(q[s])} | {lat:.2f} | {cpu:.1f} | {lost} |")
print()
for peer in servers[1:]:
    ratio, worst, best = ratio_range(q["daemon"], q[peer])
    print(f"daemon / {names[peer]}: **{ratio:.2f}x** ({worst:.2f}-{best:.2f})")
print()
client = [line.split() for line in open(client_file)]
def values(key, index=1):
    return [float(r[index]) for r in client if r[0] == key]
ol, pl, oq, pq = values("ours-latency"), values("peer-latency"), values("ours-qps"), values("peer-qps")
failures = sum(int(r[2]) for r in client if r[0] == "ours-qps")
lost = sum(int(float(r[2])) for r in client if r[0] == "peer-qps" and len(r) > 2)
print(f"The library's DoT upstream vs dnsperf -m dot, both clients of BIND's DoT listener, {rounds} runs each.\n")
print("| measure | swift-httpdns median (min-max) | dnsperf 2.10 median (min-max) | ratio of medians |")
print("|---|---|---|---|")
print(f"| latency, 1 in flight, 1,000 names | {median_range(ol, '{:.3f}', 1e3, ' ms')} | {median_range(pl, '{:.3f}', 1e3, ' ms')} | {median(ol)/median(pl):.2f}x |")
print(f"| throughput, 64 in flight, 5,000 names | {median_range(oq, unit=' q/s')} | {median_range(pq, unit=' q/s')} | {median(oq)/median(pq)*100:.0f} % |")
print(f"\nfailed lookups (ours): {failures}; lost (dnsperf): {lost}")
PY
