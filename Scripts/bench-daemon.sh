#!/usr/bin/env bash
# `resolve daemon` under load, against named peers in the same run (BENCHMARKS.md).
#
#   Scripts/bench-daemon.sh [SOAK_SECONDS]     default 600 (the 10-minute soak); 0 skips it
#
# (a) DoH: dnsperf 2.10 -m doh (HTTP/2, GET, 1 connection, 64 in flight, 10 s) over 1,000 names
#     the daemon has cached, against the daemon's /dns-query and against BIND 9.18's own DoH
#     endpoint (the daemon's upstream, answering from its zone), alternating, 3 rounds, median.
# (b) /v1/resolve: wrk (2 threads, 32 connections, 10 s, HTTPS/1.1) for a cached name; the peer is
#     nginx answering a fixed string (`return 200`) over TLS on the same machine: the floor of
#     what an HTTPS endpoint costs here.
# (d) the DNS stub: dnsperf over UDP against BIND's own plain-DNS port, same names.
# (c) soak: SOAK_SECONDS of steady load: DoH 300 q/s and the DNS stub over UDP 100 q/s, over 2,000
#     names with a 300-s TTL (so the cache expires and refreshes underway); errors, and RSS every
#     10 s (growth from the end of the first minute to the end); idle RSS before any load.
# dnsperf and wrk do not verify certificates (they are load generators); they talk only to the
# loopback servers started here. The daemon itself verifies its upstream with the test CA.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. Scripts/lib.sh
soak=${1:-600}
port=18496
dns_port=18497

need_build_packages
need_packages dnsperf wrk curl
swift build -c release --product resolve 2>&1 | grep -E "error|warning: " || true
bin="$(swift build -c release --show-bin-path)/resolve"
use_testenv

work=$(mktemp -d)
ca="$root/.testenv/ca/ca.pem"
cat >"$work/daemon.yaml" <<YAML
upstreams:
  - {doh: "https://doh-a.test:$DOH_PORT/dns-query", bootstrap: [127.0.0.1]}
ca_file: $ca
allow_private: true
system_dns: ["127.0.0.1:$SYSTEM_DNS_PORT"]
listen: "127.0.0.1:$port"
dns_listen: "127.0.0.1:$dns_port"
tls: {cert: $root/.testenv/ca/daemon.test.pem, key: $root/.testenv/ca/daemon.test.key}
limits: {max_concurrent_requests: 4096}
YAML
"$bin" daemon --config "$work/daemon.yaml" --log-level warning 2>"$work/daemon.log" &
daemon=$!
on_exit "kill $daemon 2>/dev/null || true; rm -rf '$work'"
for _ in $(seq 1 100); do
    curl -sf --cacert "$ca" "https://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    sleep 0.1
done
rss() { echo $(( $(ps -o rss= -p "$daemon") / 1024 )); }
idle_rss=$(rss)

for i in $(seq 0 999); do echo "w$i.bench.hd.test A"; done >"$work/cached.txt"
for i in $(seq 0 1999); do echo "s$i.bench.hd.test A"; done >"$work/soak.txt"

doh_run() { # url port queries-file seconds [extra dnsperf args] -> "qps lost"
    dnsperf -m doh -s 127.0.0.1 -p "$2" -O doh-uri="$1" -O doh-method=GET -c 1 -q 64 -d "$3" -l "$4" "${@:5}" 2>&1 \
        | awk '/Queries per second/ {q=$4} /Queries lost/ {l=$3} END {print q, l}'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Warm the daemon's cache with every name of (a).
dnsperf -m doh -s 127.0.0.1 -p "$port" -O doh-uri="https://127.0.0.1:$port/dns-query" -c 1 -q 64 -d "$work/cached.txt" -n 1 >/dev/null 2>&1

ours=(); peer=(); lost_ours=0; lost_peer=0
for _ in 1 2 3; do
    read -r q l < <(doh_run "https://127.0.0.1:$port/dns-query" "$port" "$work/cached.txt" 10); ours+=("$q"); lost_ours=$((lost_ours + ${l:-0}))
    read -r q l < <(doh_run "https://doh-a.test:$DOH_PORT/dns-query" "$DOH_PORT" "$work/cached.txt" 10); peer+=("$q"); lost_peer=$((lost_peer + ${l:-0}))
done
loaded_rss=$(rss)

wrk_run() { # url -> "rps p99"
    wrk -t2 -c32 -d10s --latency "$1" 2>&1 | awk '/Requests\/sec/ {r=$2} $1 == "99%" {p=$2} END {print r, p}'
}
read -r api_rps api_p99 < <(wrk_run "https://127.0.0.1:$port/v1/resolve?host=w1.bench.hd.test&type=a")
# (d) the DNS stub over UDP against BIND's own plain DNS port, same names, 10 s each.
udp_run() { dnsperf -s 127.0.0.1 -p "$1" -c 1 -q 64 -d "$work/cached.txt" -l 10 2>&1 | awk '/Queries per second/ {print $4}'; }
stub_qps=$(udp_run "$dns_port"); bind_udp_qps=$(udp_run "$DNS_PORT")
read -r nginx_rps nginx_p99 < <(wrk_run "https://127.0.0.4:$ORIGIN_PORT/echo")
api_status=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$ca" "https://127.0.0.1:$port/v1/resolve?host=w1.bench.hd.test&type=a")

soak_line="(skipped)"
if [ "$soak" -gt 0 ]; then
    dnsperf -m doh -s 127.0.0.1 -p "$port" -O doh-uri="https://127.0.0.1:$port/dns-query" -c 1 -q 32 -Q 300 \
        -d "$work/soak.txt" -l "$soak" >"$work/soak-doh.txt" 2>&1 &
    doh_load=$!
    dnsperf -s 127.0.0.1 -p "$dns_port" -c 1 -q 32 -Q 100 -d "$work/soak.txt" -l "$soak" >"$work/soak-udp.txt" 2>&1 &
    udp_load=$!
    samples=()
    while kill -0 "$doh_load" 2>/dev/null || kill -0 "$udp_load" 2>/dev/null; do
        samples+=("$(rss)")
        sleep 10
    done
    wait "$doh_load" "$udp_load" || true
    soak_line=$(python3 - "$work/soak-doh.txt" "$work/soak-udp.txt" "$soak" "${samples[@]}" <<'PY'
import re, sys
def parse(path):
    text = open(path).read()
    get = lambda pattern: int(re.search(pattern, text).group(1)) if re.search(pattern, text) else 0
    sent, done, lost = get(r"Queries sent:\s+(\d+)"), get(r"Queries completed:\s+(\d+)"), get(r"Queries lost:\s+(\d+)")
    codes = dict((k, int(v)) for k, v in re.findall(r"(\w+) (\d+) \(", text.split("Response codes:")[1].splitlines()[0])) if "Response codes:" in text else {}
    http = dict(re.findall(r"(\d{3}): (\d+)", text.split("HTTP/2 return codes:")[1].splitlines()[0])) if "HTTP/2 return codes:" in text else {}
    return sent, done, lost, sum(v for k, v in codes.items() if k != "NOERROR"), sum(int(v) for k, v in http.items() if k == "200"), sum(int(v) for k, v in http.items() if k != "200")
doh, udp = parse(sys.argv[1]), parse(sys.argv[2])
seconds = int(sys.argv[3]); rss = [int(x) for x in sys.argv[4:]]
base = rss[min(6, len(rss) - 1)]  # after the first minute
growth = (rss[-1] - base) / base * 100
# Errors: UDP queries unanswered, non-NOERROR answers, HTTP statuses other than 200. dnsperf 2.10's
# DoH client also reports some queries as lost whose HTTP/2 200 response it counted (its "HTTP/2
# return codes" equal the queries sent): shown apart as "dnsperf-unmatched".
errors = udp[2] + doh[3] + udp[3] + doh[5]
print(f"{seconds} s: {doh[0]:,} DoH ({doh[4]:,} HTTP 200) + {udp[0]:,} UDP queries: {errors} errors "
      f"(UDP lost {udp[2]}, non-NOERROR {doh[3] + udp[3]}, HTTP non-200 {doh[5]}; dnsperf-unmatched DoH {doh[2]}); "
      f"RSS {base} MiB after 1 min -> {rss[-1]} MiB at the end ({growth:+.1f} %), peak {max(rss)} MiB")
PY
)
fi
alive=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$ca" "https://127.0.0.1:$port/healthz")

python3 - "$(median "${ours[@]}")" "$(median "${peer[@]}")" "$lost_ours" "$lost_peer" "$api_rps" "$api_p99" "$nginx_rps" "$nginx_p99" \
    "$api_status" "$idle_rss" "$loaded_rss" "$soak_line" "$alive" "$stub_qps" "$bind_udp_qps" <<'PY'
import sys
oq, pq = float(sys.argv[1]), float(sys.argv[2])
lo, lp, ar, ap, nr, np_, status, idle, loaded, soak, alive, sq, bq = sys.argv[3:]
print("| measure | resolve daemon | peer | ratio | goal |")
print("|---|---|---|---|---|")
print(f"| (a) DoH q/s, dnsperf -m doh, HTTP/2, 64 in flight, cached names (median of 3 x 10 s) | {oq:,.0f} q/s (lost {lo}) | BIND 9.18 DoH {pq:,.0f} q/s (lost {lp}) | {oq/pq:.2f}x | >= 1.0x |")
print(f"| (b) GET /v1/resolve, wrk 2 threads 32 connections 10 s, HTTPS/1.1 (status {status}) | {float(ar):,.0f} req/s, p99 {ap} | nginx `return 200` {float(nr):,.0f} req/s, p99 {np_} | {float(ar)/float(nr):.2f}x | (measured) |")
print(f"| (d) DNS stub, dnsperf UDP, 64 in flight, cached names, 10 s | {float(sq):,.0f} q/s | BIND 9.18 UDP {float(bq):,.0f} q/s | {float(sq)/float(bq):.2f}x | (measured) |")
print(f"| (c) soak, DoH 300 q/s + UDP stub 100 q/s | {soak} | | | 0 errors, RSS growth < 10 % |")
print(f"| idle RSS / after (a) | {idle} MiB / {loaded} MiB | | | |")
print(f"| /healthz after everything | {alive} | | | 200 |")
PY
