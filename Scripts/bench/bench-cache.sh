#!/usr/bin/env bash
# Engine benchmarks against named peers, in one run (Benchmarks/CacheBenchmark):
#
#   Scripts/bench/bench-cache.sh [SECONDS] [ZIPF_SECONDS]     defaults 3 and 60
#
# (a) cache-hit lookup, 1 and 2 threads, p50/p99 and throughput: HTTPDNSResolver's engine
#     (cachedResolution, and resolve() from a task) vs glibc getaddrinfo("localhost") answered from
#     /etc/hosts vs c-ares 1.18 ares_getaddrinfo("www.hd.test") asking the loopback dnsmasq.
# (b) memory: RSS delta per cached name (A + AAAA) with 100,000 names.
# (c) Zipf(1.0) over 10,000 names, TTLs 2-300 s, 1 ms fake upstream: hit ratio after a 5 s warm-up.
# Prints JSON lines and a Markdown table. Only loopback traffic: the script refuses to run when
# glibc would ask DNS for "localhost" (nsswitch must list files first and /etc/hosts must have it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
seconds=${1:-3}
zipf_seconds=${2:-60}

need_build_packages
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
grep -Eq '^hosts:[[:space:]]+files' /etc/nsswitch.conf || { echo "nsswitch does not consult /etc/hosts first; refusing (getaddrinfo could leave the machine)" >&2; exit 1; }
grep -Eq '^127\.0\.0\.1[[:space:]]+localhost' /etc/hosts || { echo "/etc/hosts has no 127.0.0.1 localhost; refusing" >&2; exit 1; }

bench=$(release_product CacheBenchmark)
use_testenv

out=$(mktemp)
"$bench" hits "$seconds" "127.0.0.1:$SYSTEM_DNS_PORT" | tee -a "$out"
"$bench" memory 100000 | tee -a "$out"
"$bench" zipf "$zipf_seconds" 10000 | tee -a "$out"

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
hits = {(r["what"], r.get("threads")): r for r in rows if "p50_ns" in r and "threads" in r}
ours = "swift-httpdns cachedResolution"
print("\n| cache-hit lookup | threads | p50 | p99 | lookups/s | p50 ratio to ours |")
print("|---|---|---|---|---|---|")
for (what, threads), r in sorted(hits.items(), key=lambda kv: (kv[0][1], kv[1]["p50_ns"])):
    base = hits[(ours, threads)]["p50_ns"]
    print(f"| {what} | {threads} | {r['p50_ns']} ns | {r['p99_ns']} ns | {r['ops_per_s']:,.0f} | {r['p50_ns'] / base:.1f}x |")
for r in rows:
    if r["what"] == "timer_overhead":
        print(f"\n(timing overhead per sample, included above: {r['p50_ns']} ns)")
    if r["what"] == "memory":
        print(f"\nmemory: {r['names']:,} names, {r['entries']:,} entries, {r['bytes_per_name']:.0f} B per name "
              f"({r['bytes_per_entry']:.0f} B per (name, type) entry)")
    if r["what"] == "zipf":
        print(f"zipf: {r['names']:,} names, {r['lookups']:,} lookups in {r['seconds_after_warmup']:.0f} s after warm-up, "
              f"hit ratio {100 * r['hit_ratio']:.2f} %, {r['upstream_queries_per_s']:.1f} upstream queries/s, "
              f"by source {r['by_source']}")
PY
rm -f "$out"
