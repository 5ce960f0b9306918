#!/usr/bin/env bash
# Vendor HTTPDNS benchmark: the loopback fakes of the Alibaba, Tencent and Baidu APIs, with BIND 9.18's
# DoH (doh-a.test) as the peer in the same run.
#
#   Scripts/bench/bench-vendor.sh [REPEATS]     default 5; min / median / max of the repeats are reported
#
# Per vendor mode (Benchmarks/VendorBenchmark, release build):
#   pre-resolve 100 distinct names (A and AAAA) with the batch API vs one request per name (batch_size 1):
#     requests the fake served, wall time;
#   latency: 500 sequential A lookups of distinct names on a warm connection, median (vs BIND's DoH).
# The fakes are Python and ask BIND for every name, so their latency is the fake's, not a vendor's:
# the ratio to BIND says what this client adds on top of a slower server, not how fast a vendor is.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
repeats=${1:-5}

need_build_packages
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
bench=$(release_product VendorBenchmark)
trap 'bash Scripts/env/testenv.sh stop >/dev/null 2>&1 || true' EXIT
bash Scripts/env/testenv.sh start >/dev/null

out=$(mktemp) curlcfg=$(mktemp)
chmod 600 "$curlcfg"
# The peer client on the same fake: curl 7.88 sending the tencent-token requests our client sends, one
# connection, one at a time (the token stays in a config file, never in argv).
curl_run() { # run-number -> median seconds per request
    local token
    token=$(cat .testenv/vendor/tencent.token)
    for i in $(seq 0 499); do
        printf 'url = "https://127.0.0.1:%s/d?dn=c%s-%s.bench.hd.test&token=%s&ttl=1&clientip=1&query=1"\noutput = "/dev/null"\n' \
            "$VENDOR_PORT" "$1" "$i" "$token"
    done >"$curlcfg"
    curl -s --max-time 30 --cacert .testenv/ca/ca.pem -K "$curlcfg" -w '%{time_total}\n' | python3 Scripts/bench/stats.py lower-median
}
for run in $(seq 1 "$repeats"); do
    "$bench" .testenv/vendor .testenv/ca/ca.pem "https://127.0.0.1:$VENDOR_PORT" "http://127.0.0.1:$VENDOR_PLAIN_PORT" \
        "https://doh-a.test:$DOH_PORT/dns-query" 100 500 >>"$out"
    printf '{"mode":"curl-tencent-token","latency":{"median_s":%s}}\n' "$(curl_run "$run")" >>"$out"
done
rm -f "$curlcfg"
PYTHONPATH="$root/Scripts/bench" python3 - "$out" "$repeats" <<'PY'
import json, sys
from stats import min_median_max, run_ratios
rows = [json.loads(line) for line in open(sys.argv[1])]
n = int(sys.argv[2])
curl = [r["latency"]["median_s"] for r in rows if r["mode"] == "curl-tencent-token"]
rows = [r for r in rows if r["mode"] != "curl-tencent-token"]
def spread(values, scale=1.0, fmt="{:.2f}"):  # scaled before the median is taken, as this table always was
    return min_median_max([v * scale for v in values], fmt)
bind = [r["latency"]["median_s"] for r in rows if r["mode"] == "bind-doh"]
print(f"min/median/max of {n} runs; 100 names pre-resolved (A+AAAA); latency = median of 500 sequential A lookups")
print()
print("| mode | batch: requests | batch: wall ms | one per name: requests | one per name: wall ms | latency ms | latency / BIND DoH |")
print("|---|---|---|---|---|---|---|")
for mode in dict.fromkeys(r["mode"] for r in rows):
    if mode == "bind-doh":
        continue
    mine = [r for r in rows if r["mode"] == mode]
    b = [r["batch"] for r in mine]; s = [r["single"] for r in mine]
    assert all(x["failures"] == 0 for x in b + s), f"{mode}: failures"
    lat = [r["latency"]["median_s"] for r in mine]
    ratios = run_ratios(lat, bind)
    print(f"| {mode} | {spread([x['requests'] for x in b], fmt='{:.0f}')} | {spread([x['wall_s'] for x in b], 1e3, '{:.0f}')} "
          f"| {spread([x['requests'] for x in s], fmt='{:.0f}')} | {spread([x['wall_s'] for x in s], 1e3, '{:.0f}')} "
          f"| {spread(lat, 1e3, '{:.3f}')} | {spread(ratios, fmt='{:.2f}')}x |")
print(f"| BIND 9.18 DoH (peer) | | | | | {spread(bind, 1e3, '{:.3f}')} | 1.00x |")
token = [r["latency"]["median_s"] for r in rows if r["mode"] == "tencent-token"]
print()
print(f"Same fake, same requests (tencent-token, one connection, sequential): swift-httpdns lookup "
      f"{spread(token, 1e3, '{:.3f}')} ms vs curl 7.88 request {spread(curl, 1e3, '{:.3f}')} ms: "
      f"{spread(run_ratios(token, curl))}x")
PY
rm -f "$out"
