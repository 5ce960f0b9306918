#!/usr/bin/env bash
# Two builds of the library's cache-hit paths, alternating in one run (BENCHMARKS.md, "Cache hits
# and memory"): `CacheBenchmark ours SECONDS` from each build in turn, the order swapped every round,
# pinned to one CPU. Prints each round's p50 and lookups/s per path, then min/median/max per build.
#
#   Scripts/bench/bench-cache-ab.sh BEFORE_BINARY AFTER_BINARY [ROUNDS] [SECONDS]   defaults 10 and 1
#
# The binaries are CacheBenchmark release builds; build the "before" one from a worktree of the old
# revision with this tree's Benchmarks/CacheBenchmark/main.swift copied in, so both run the same
# benchmark code. No network is used (in-process fake upstreams); run in its own namespace anyway.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
before=$1 after=$2 rounds=${3:-10} seconds=${4:-1}
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
out=$(mktemp)
on_exit "rm -f '$out'"
for round in $(seq 1 "$rounds"); do
    order="before after"
    [ $((round % 2)) -eq 0 ] && order="after before"
    for build in $order; do
        binary=$before
        [ "$build" = after ] && binary=$after
        taskset -c 1 "$binary" ours "$seconds" | sed "s/^{/{\"build\":\"$build\",\"round\":$round,/" >>"$out"
    done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
paths = [
    ("swift-httpdns cachedResolution", "engine cachedResolution"),
    ("swift-httpdns resolveBlocking (hit)", "HTTPDNSResolver resolveBlocking"),
    ("swift-httpdns await resolve (in a task, hit)", "engine await resolve"),
    ("swift-httpdns HTTPDNSResolver await resolve (in a task, hit)", "HTTPDNSResolver await resolve"),
]
print("| path (1 thread) | build | p50 min / median / max | lookups/s min / median / max |")
print("|---|---|---|---|")
for what, label in paths:
    for build in ("before", "after"):
        got = [r for r in rows if r["what"] == what and r.get("threads") == 1 and r["build"] == build]
        if not got:
            continue
        p50 = sorted(r["p50_ns"] for r in got)
        ops = sorted(r["ops_per_s"] for r in got)
        print(f"| {label} | {build} | {p50[0]} / {statistics.median(p50):.0f} / {p50[-1]} ns "
              f"| {ops[0] / 1e6:.2f}M / {statistics.median(ops) / 1e6:.2f}M / {ops[-1] / 1e6:.2f}M |")
print(f"\n({len({r['round'] for r in rows})} rounds, each build once per round, order alternating)")
PY
