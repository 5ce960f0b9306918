#!/usr/bin/env bash
# What the resolver features cost on the daemon's cached path (BENCHMARKS.md):
#
#   Scripts/bench/bench-features.sh [ROUNDS] [SECONDS]     defaults 3 and 10
#
# Three daemons from one release build, each with the same upstream and 1,000 cached names:
#   base      no local data, no query log
#   querylog  base + query_log (a JSON line per question, on the same disk)
#   blocklist base + a block list of 1,000,000 names and 1,000 local records (every question is
#             checked against them; the asked names are in neither)
#   ratelimit base + rate_limit with a rate no client reaches (every question takes a token)
#   proxied   base + trusted_proxies naming another address: what the PROXY v2 setting costs the
#             clients that are not proxies (every datagram's source checked, a pass-through handler
#             first in every connection's pipeline)
# and, on base, the same names with an OPT record (base-edns) and with one padded to 128 bytes
# (base-padded, its ratio against base-edns): what EDNS padding costs (RFC 8467; DoH answers padded
# to 468 bytes, UDP answers never).
# With COMPARE_BIN=another/resolve, three more daemons from that build (old-base, old-querylog,
# old-ratelimit) run beside them, interleaved in the same rounds: a before/after in one run.
# Clients, rounds interleaved, ROUNDS x SECONDS each: h2load GET (DoH, 1 connection, 64 streams) and
# dnsperf over the UDP stub (64 in flight). Servers on CPU 0, clients on CPU 1. Prints q/s min /
# median / max per daemon and the ratio of medians to base.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
rounds=${1:-3}
seconds=${2:-10}

need_build_packages
need_packages dnsperf nghttp2-client python3
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
bin=$(bench_resolve)   # RESOLVE_BIN=/path/to/resolve measures another build
use_testenv

work=$(mktemp -d)
ca="$root/.testenv/ca/ca.pem"
python3 - "$work" <<'PY'
import random, sys
work = sys.argv[1]
rng = random.Random(7)
with open(f"{work}/block.txt", "w") as out:
    for i in range(1_000_000):
        out.write(f"{rng.getrandbits(40):x}-{i % 1000}.ads-{i % 5000}.test\n")
with open(f"{work}/records.yaml", "w") as out:
    out.write("records:\n")
    for i in range(1000):
        out.write(f'  - "host{i}.home.test A 192.168.{i // 250}.{i % 250 + 1}"\n')
PY
declare -A port=([base]=18521 [querylog]=18523 [blocklist]=18525 [ratelimit]=18527 [proxied]=18529 [old-base]=18531 [old-querylog]=18533 [old-ratelimit]=18535)
daemons=(base querylog blocklist ratelimit proxied)
if [ -n "${COMPARE_BIN:-}" ]; then daemons+=(old-base old-querylog old-ratelimit); fi
declare -A pid_of
pids=()
for name in "${daemons[@]}"; do
    p=${port[$name]}
    cat >"$work/$name.yaml" <<YAML
upstreams:
  - {doh: "https://doh-a.test:$DOH_PORT/dns-query", bootstrap: [127.0.0.1]}
ca_file: $ca
allow_private: true
system_dns: ["127.0.0.1:$SYSTEM_DNS_PORT"]
listen: "127.0.0.1:$p"
dns_listen: "127.0.0.1:$((p + 1))"
tls: {cert: $root/.testenv/ca/daemon.test.pem, key: $root/.testenv/ca/daemon.test.key}
limits: {max_concurrent_requests: 4096}
YAML
    case $name in
        querylog | old-querylog) echo "query_log: {file: $work/$name.jsonl, max_bytes: 1000000000}" >>"$work/$name.yaml" ;;
        blocklist) { echo "block: {lists: [$work/block.txt]}"; cat "$work/records.yaml"; } >>"$work/$name.yaml" ;;
        ratelimit | old-ratelimit) echo "rate_limit: {queries_per_second: 10000000, burst: 10000000}" >>"$work/$name.yaml" ;;
        proxied) echo "trusted_proxies: [127.0.0.99/32, \"10.0.0.0/8\"]" >>"$work/$name.yaml" ;;
    esac
    daemon_bin=$bin
    case $name in old-*) daemon_bin=$COMPARE_BIN ;; esac
    taskset -c 0 "$daemon_bin" daemon --config "$work/$name.yaml" --log-level warning 2>"$work/$name.log" &
    pids+=($!)
    pid_of[$name]=$!
done
on_exit "kill ${pids[*]} 2>/dev/null || true; rm -rf '$work'"
for name in "${daemons[@]}"; do wait_for_port 127.0.0.1 "${port[$name]}" || { cat "$work/$name.log" >&2; exit 1; }; done

for i in $(seq 0 999); do echo "w$i.bench.hd.test A"; done >"$work/cached.txt"
doh_get_targets "$work/cached.txt" "" >"$work/paths.txt"
doh_get_targets "$work/cached.txt" "" edns >"$work/paths-edns.txt"
doh_get_targets "$work/cached.txt" "" padded >"$work/paths-padded.txt"
for name in "${daemons[@]}"; do
    dnsperf -s 127.0.0.1 -p "$((${port[$name]} + 1))" -c 1 -q 64 -d "$work/cached.txt" -n 2 >/dev/null 2>&1
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
results="$work/results.txt"
: >"$results"
for _ in $(seq 1 "$rounds"); do
    for name in "${daemons[@]}"; do
        sed "s|^|https://127.0.0.1:${port[$name]}|" "$work/paths.txt" >"$work/h2load-$name.txt"
        # q/s from the client; the daemon's CPU time per answered query from /proc (utime+stime,
        # clock ticks of 10 ms), a second measure that the client's own noise does not move.
        before=$(cpu_ticks "${pid_of[$name]}")
        read -r q n < <(taskset -c 1 h2load -c 1 -m 64 -D "$seconds" -i "$work/h2load-$name.txt" 2>&1 \
            | awk '/^finished in/ {q=$4; gsub(",", "", q)} /^requests:/ {n=$8} END {print q, n}')
        echo "h2load-doh $name $q $(( ($(cpu_ticks "${pid_of[$name]}") - before) * 10000000 / (n > 0 ? n : 1) ))" >>"$results"
        before=$(cpu_ticks "${pid_of[$name]}")
        read -r q n < <(taskset -c 1 dnsperf -s 127.0.0.1 -p "$((${port[$name]} + 1))" -c 1 -q 64 -d "$work/cached.txt" -l "$seconds" 2>&1 \
            | awk '/Queries per second/ {q=$4} /Queries completed/ {n=$3} END {print q, n}')
        echo "dnsperf-udp $name $q $(( ($(cpu_ticks "${pid_of[$name]}") - before) * 10000000 / (n > 0 ? n : 1) ))" >>"$results"
    done
    # EDNS padding (RFC 8467) on the base daemon: the same cached names asked with an OPT record,
    # without and with a Padding option (DoH answers then padded to 468 bytes; UDP answers never).
    for form in edns padded; do
        sed "s|^|https://127.0.0.1:${port[base]}|" "$work/paths-$form.txt" >"$work/h2load-$form.txt"
        before=$(cpu_ticks "${pid_of[base]}")
        read -r q n < <(taskset -c 1 h2load -c 1 -m 64 -D "$seconds" -i "$work/h2load-$form.txt" 2>&1 \
            | awk '/^finished in/ {q=$4; gsub(",", "", q)} /^requests:/ {n=$8} END {print q, n}')
        echo "h2load-doh base-$form $q $(( ($(cpu_ticks "${pid_of[base]}") - before) * 10000000 / (n > 0 ? n : 1) ))" >>"$results"
        option=()
        [ "$form" = padded ] && option=(-E "12:$(printf '0%.0s' $(seq 1 160))")
        before=$(cpu_ticks "${pid_of[base]}")
        read -r q n < <(taskset -c 1 dnsperf -s 127.0.0.1 -p "$((${port[base]} + 1))" -c 1 -q 64 -e "${option[@]}" -d "$work/cached.txt" -l "$seconds" 2>&1 \
            | awk '/Queries per second/ {q=$4} /Queries completed/ {n=$3} END {print q, n}')
        echo "dnsperf-udp base-$form $q $(( ($(cpu_ticks "${pid_of[base]}") - before) * 10000000 / (n > 0 ? n : 1) ))" >>"$results"
    done
done
lines=$(wc -l <"$work/querylog.jsonl" 2>/dev/null || echo 0)
PYTHONPATH="$root/Scripts/bench" python3 - "$results" "$rounds" "$seconds" "$lines" <<'PY'
import sys
from stats import median, spread
rows = [line.split() for line in open(sys.argv[1])]
print(f"cached path, {sys.argv[2]} x {sys.argv[3]} s per client and daemon, rounds interleaved; query log lines written: {sys.argv[4]}")
print("\n| client | daemon | q/s min | median | max | median / base | CPU ns/query median | CPU / base |")
print("|---|---|---|---|---|---|---|---|")
for client in ("h2load-doh", "dnsperf-udp"):
    for name in ("base", "base-edns", "base-padded", "querylog", "blocklist", "ratelimit", "proxied", "old-base", "old-querylog", "old-ratelimit"):
        values = [float(r[2]) for r in rows if r[0] == client and r[1] == name]
        if not values:
            continue
        reference = "old-base" if name.startswith("old-") else "base-edns" if name == "base-padded" else "base"
        base = median(float(r[2]) for r in rows if r[0] == client and r[1] == reference)
        base_cpu = median(float(r[3]) for r in rows if r[0] == client and r[1] == reference)
        cpu = median(float(r[3]) for r in rows if r[0] == client and r[1] == name)
        low, mid, high = spread(values)
        print(f"| {client} | {name} | {low:,.0f} | {mid:,.0f} | {high:,.0f} | {mid / base:.3f} | {cpu:,.0f} | {cpu / base_cpu:.3f} |")
PY
