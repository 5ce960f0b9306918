#!/usr/bin/env bash
# Interceptor benchmarks against named peers, in one run (Benchmarks/InterceptorBenchmark):
#
#   Scripts/bench/bench-interceptor.sh [COUNT] [ROUNDS]     defaults 1000 and 3
#
# (1) COUNT sequential small GETs to the local nginx origin, per stack, ROUNDS rounds in rotating
#     order (medians of the rounds' means are compared):
#     (a) URLSession with HTTPDNSURLProtocol, http://origin.hd.test (name resolved via local DoH)
#     (b) plain URLSession, http://127.0.0.4 (the same server by IP: the system resolver must not be asked)
#     (c) one reused libcurl easy handle with CURLOPT_RESOLVE, http://origin.hd.test: the floor
#     (d) HTTPDNSClient.data(for:) without URLSession, http://origin.hd.test (our own cost over (c))
#     and over HTTPS (a) vs (c) (plain URLSession cannot trust the test CA for a name without DNS).
# (2) Peak RSS growth (VmHWM) while a 64 MiB body arrives, each in a fresh process: to a file
#     (HTTPDNSClient.download), streamed (HTTPDNSClient.stream), through a URLSession data delegate.
# Only loopback traffic, to servers Scripts/env/testenv.sh starts (and stops again if it started them).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
count=${1:-1000}
rounds=${2:-3}

need_build_packages
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
bench=$(release_product InterceptorBenchmark)
use_testenv

doh="https://doh-a.test:$DOH_PORT/dns-query"
ca="$root/.testenv/ca/ca.pem"
out=$(mktemp)
"$bench" gets "$doh" "$ca" "$count" "$rounds" | tee -a "$out"
for how in download stream delegate; do
    "$bench" memory "$doh" "$ca" "$how" | tee -a "$out"
done

PYTHONPATH="$root/Scripts/bench" python3 - "$out" "$count" <<'PY'
import json, sys
from stats import median
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
gets = {}
for row in rows:
    if row["mode"] == "gets":
        gets.setdefault(row["stack"], []).append(row)
def med(stack, key): return median(r[key] for r in gets[stack])
print()
print(f"| {sys.argv[2]} sequential GETs | mean | p50 | p99 |")
print("|---|---|---|---|")
for stack in sorted(gets):
    print(f"| {stack} | {med(stack,'mean_s')*1e6:,.0f} µs | {med(stack,'p50_s')*1e6:,.0f} µs | {med(stack,'p99_s')*1e6:,.0f} µs |")
a, b, c = med("a_urlsession_httpdns_http", "mean_s"), med("b_urlsession_plain_http_by_ip", "mean_s"), med("c_curl_easy_resolve_http", "mean_s")
at, ct = med("a_urlsession_httpdns_https", "mean_s"), med("c_curl_easy_resolve_https", "mean_s")
print()
print(f"(a)/(b) http: {a/b:.2f}  (goal <= 1.0)")
print(f"(a)/(c) http: {a/c:.2f}  (goal <= 1.5)")
print(f"(a)/(c) https: {at/ct:.2f}")
print(f"(d)/(c) http: {med('d_httpdns_client_http', 'mean_s')/c:.2f}  (HTTPDNSClient without URLSession)")
print()
print("| 64 MiB body | bytes | peak RSS growth |")
print("|---|---|---|")
for row in rows:
    if row["mode"] == "memory":
        print(f"| {row['how']} | {row['bytes']:,} | {row['peak_growth']/1048576:.1f} MiB |")
PY
