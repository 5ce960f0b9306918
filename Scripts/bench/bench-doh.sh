#!/usr/bin/env bash
# DoH client benchmark against the named peer dnsperf 2.10 (`-m doh`), same server, same run.
#
#   Scripts/bench/bench-doh.sh [REPEATS]      default 3; the median of the repeats is reported
#
# (a) latency: 1,000 distinct names, one query in flight, warm HTTP/2 connection.
#     Latency: the average per lookup, ours (HTTPDNSResolver.resolve(type: .a)) and dnsperf's.
# (b) throughput: 5,000 distinct names, 64 in flight, one connection, both GET.
# Target: doh-a.test (BIND 9.18 named) on loopback, started here, on CPU 0; both clients on CPU 1.
# Prints a Markdown table: medians, with the lowest and highest run in brackets.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
repeats=${1:-3}

need_build_packages
need_packages dnsperf
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
bench=$(release_product DoHBenchmark)
trap 'bash Scripts/env/testenv.sh stop >/dev/null 2>&1 || true' EXIT
bash Scripts/env/testenv.sh start >/dev/null

url="https://doh-a.test:$DOH_PORT/dns-query"
ca=.testenv/ca/ca.pem
work=$(mktemp -d)
for i in $(seq 0 999); do echo "p$i.bench.hd.test A"; done >"$work/latency.txt"
for i in $(seq 0 4999); do echo "q$i.bench.hd.test A"; done >"$work/throughput.txt"

dnsperf_run() { # queries-file in-flight -> "avg_latency_s qps"
    taskset -c 1 dnsperf -m doh -s 127.0.0.1 -p "$DOH_PORT" -O doh-uri="$url" -O doh-method=GET -c 1 -q "$2" \
        -d "$1" -n 1 -e 2>&1 | awk '/Queries per second/ {q=$4} /Average Latency/ && !l {l=$4} END {print l, q}'
}
json() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
# A run with a failed lookup measures nothing: stop and show it.
checked() {
    local result
    result="$("$@")"
    [ "$(python3 -c "import json,sys; print(json.loads(sys.argv[1]).get('failures', 0))" "$result")" = 0 ] \
        || { echo "bench-doh: lookups failed: $result" >&2; exit 1; }
    echo "$result"
}

pin_bind
ours_lat=(); ours_qps=(); peer_lat=(); peer_qps=()
for _ in $(seq 1 "$repeats"); do
    ours_lat+=("$(json "$(checked taskset -c 1 "$bench" latency "$url" 127.0.0.1 "$ca" 1000)" mean_s)")
    read -r l _ < <(dnsperf_run "$work/latency.txt" 1); peer_lat+=("$l")
    ours_qps+=("$(json "$(checked taskset -c 1 "$bench" throughput "$url" 127.0.0.1 "$ca" 5000 64)" qps)")
    read -r _ q < <(dnsperf_run "$work/throughput.txt" 64); peer_qps+=("$q")
done
rm -rf "$work"

PYTHONPATH="$root/Scripts/bench" python3 - "$repeats" "${ours_lat[*]}" "${peer_lat[*]}" "${ours_qps[*]}" "${peer_qps[*]}" <<'PY'
import sys
from stats import median_range, ratio_range
n = int(sys.argv[1])
ol, pl, oq, pq = ([float(v) for v in arg.split()] for arg in sys.argv[2:6])
print(f"| measure ({n} runs: median (min-max)) | swift-httpdns | dnsperf 2.10 | ratio of medians (worst-best pairing) | goal |")
print("|---|---|---|---|---|")
lat, worst, best = ratio_range(ol, pl)
print(f"| (a) latency, 1 in flight, 1,000 names | {median_range(ol, '{:,.3f}', 1e3)} ms average | {median_range(pl, '{:,.3f}', 1e3)} ms average "
      f"| {lat:.2f}x ({worst:.2f}-{best:.2f}) | <= 1.2x |")
thr, worst, best = ratio_range(oq, pq)
print(f"| (b) throughput, 64 in flight, 5,000 names | {median_range(oq)} q/s | {median_range(pq)} q/s "
      f"| {thr * 100:.0f} % ({worst * 100:.0f}-{best * 100:.0f} %) | >= 60 % |")
PY
