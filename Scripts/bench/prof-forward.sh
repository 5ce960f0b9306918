#!/usr/bin/env bash
# Where a miss's CPU goes (BENCHMARKS.md, "The daemon as a forwarder on misses"): one daemon
# forwarding to BIND's DoT or DoH, 5 s of unique-name misses over the UDP stub (dnsperf, 64 in flight),
# per-thread CPU ticks and voluntary context switches from /proc, and a perf profile of the daemon.
#
#   Scripts/bench/prof-forward.sh [dot|doh]      PERF_OUT=file (default .build/prof-forward.data)
#   BIN=/path/to/resolve                   that build (default: the release build, built first)
#   PREFIX="chrt -b 0"                     start the daemon under a command (the SCHED_BATCH experiment)
#   BATCH_THREADS=REGEX                    switch the daemon's threads whose name matches to SCHED_BATCH
# Daemon and BIND on CPU 0, dnsperf on CPU 1. Needs perf (linux-perf) for the profile.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
isolate_network "${BASH_SOURCE[0]}" "$@"
use_testenv
if [ -z "${BIN:-}" ]; then
    swift build -c release --product resolve 2>&1 | grep -E "error|warning: " | grep -v distributed-tracing || true
fi
bin=${BIN:-$(swift build -c release --show-bin-path)/resolve}
out=${PERF_OUT:-$root/.build/prof-forward.data}
work=$(mktemp -d)
ca="$root/.testenv/ca/ca.pem"
up=${1:-dot}
if [ "$up" = dot ]; then upstream="{dot: \"127.0.0.1:$DOT_PORT\", tls_name: doh-a.test}"; else upstream="{doh: \"https://doh-a.test:$DOH_PORT/dns-query\", bootstrap: [127.0.0.1]}"; fi
cat >"$work/d.yaml" <<YAML
upstreams:
  - $upstream
ca_file: $ca
allow_private: true
listen: "127.0.0.1:18536"
dns_listen: "127.0.0.1:18537"
cache: {prefetch: false}
YAML
${PREFIX:-} taskset -c 0 "$bin" daemon --config "$work/d.yaml" --log-level warning 2>"$work/d.log" &
pid=$!
on_exit "kill $pid 2>/dev/null || true; rm -rf '$work'"
bind_pid=$(cat "$root/.testenv/named-a/named.pid")
taskset -a -p -c 0 "$bind_pid" >/dev/null
wait_for_port 127.0.0.1 18537
dig +short -p 18537 @127.0.0.1 warm.bench.hd.test >/dev/null
if [ -n "${BATCH_THREADS:-}" ]; then for t in /proc/$pid/task/*; do if grep -qE "$BATCH_THREADS" $t/comm; then chrt -b -p 0 $(basename $t); echo "batch: $(cat $t/comm)"; fi; done; fi
for i in $(seq 1 30000); do echo "m$i.$RANDOM.bench.hd.test A"; done >"$work/names.txt"
perf record -F 1000 -g -p $pid -o "$out" -- sleep 4 >/dev/null 2>&1 &
pp=$!
before=$(awk '{print $14+$15}' /proc/$pid/stat); bb=$(awk '{print $14+$15}' /proc/$bind_pid/stat)
(sleep 4; for t in /proc/$pid/task/*; do echo "MID $(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done | sort -k3 -n -r | head -6) &
taskset -c 1 dnsperf -s 127.0.0.1 -p 18537 -c 1 -q 64 -d "$work/names.txt" -n 1 -l 5 2>&1 | grep -E "per second|lost"
echo "daemon ticks $(( $(awk '{print $14+$15}' /proc/$pid/stat) - before )) bind ticks $(( $(awk '{print $14+$15}' /proc/$bind_pid/stat) - bb ))"
wait $pp || true
for t in /proc/$pid/task/*; do echo "$(cat $t/comm) $(awk "{print \$14+\$15}" $t/stat) vol=$(grep -E "^voluntary_ctxt" $t/status | awk "{print \$2}")"; done | sort -k2 -n -r | head -20
taskset -a -p -c 0-1 "$bind_pid" >/dev/null
