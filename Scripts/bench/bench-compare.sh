#!/usr/bin/env bash
# Hijack detection at scale (Benchmarks/CompareBenchmark): `resolve compare`'s engine over many hosts.
#
#   Scripts/bench/bench-compare.sh [HOSTS] [ROUNDS]     defaults 100 and 5
#
# Each host (hN.cmp.hd.test) is answered differently by the trusted DoH server (127.0.0.4) and the
# system DNS (dnsmasq: 127.0.0.10), both genuine nginx nodes, so each costs two TLS probes.
# Per round: every host at once (wall time; the slowest probe inside that run; connections opened),
# the peer: the same comparisons one host after another, and one probe alone on an idle machine.
# Goal: concurrent wall time < 2x the slowest single probe (fully concurrent).
# Only loopback traffic, to servers Scripts/env/testenv.sh starts (and stops again if it started them).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
hosts=${1:-100}
rounds=${2:-5}

need_build_packages
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
bench=$(release_product CompareBenchmark)
use_testenv

out=$(mktemp)
"$bench" "https://doh-a.test:$DOH_PORT/dns-query" "$root/.testenv/ca/ca.pem" "127.0.0.1:$SYSTEM_DNS_PORT" \
    "$ORIGIN_PORT" "$hosts" "$rounds" | tee "$out"

PYTHONPATH="$root/Scripts/bench" python3 - "$out" <<'PY'
import json, sys
from stats import median as med
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
def pick(mode): return [r for r in rows if r["mode"] == mode]
conc, seq, alone = pick("concurrent"), pick("sequential"), pick("isolated")
wall = med(r["wall_s"] for r in conc)
slowest = med(r["slowest_probe_s"] for r in conc)
ratios = [r["wall_s"] / r["slowest_probe_s"] for r in conc]
print()
print(f"| {conc[0]['hosts']} hosts, {len(conc)} rounds (medians) | value |")
print("|---|---|")
print(f"| concurrent wall time | {wall*1000:.0f} ms |")
print(f"| slowest probe inside that run | {slowest*1000:.0f} ms |")
print(f"| wall / slowest probe | {med(ratios):.2f} (rounds: {', '.join(f'{x:.2f}' for x in ratios)}; goal < 2) |")
print(f"| sequential wall time (peer) | {med(r['wall_s'] for r in seq)*1000:.0f} ms |")
print(f"| sequential / concurrent | {med(r['wall_s'] for r in seq)/wall:.2f} |")
print(f"| one probe alone (connect + handshake) | {med(r['setup_s'] for r in alone)*1000:.2f} ms |")
print(f"| probes per run | {conc[0]['probes']} |")
print(f"| connections opened per run | {med(r['connections'] for r in conc):.0f} |")
print(f"| verdicts | {conc[0]['verdicts']} |")
PY
