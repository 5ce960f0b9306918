#!/usr/bin/env bash
# `resolve daemon` under load against named peers in the same run (BENCHMARKS.md).
#
#   Scripts/bench/bench-daemon.sh [SOAK_SECONDS] [ROUNDS] [SECONDS]   defaults 600, 3, 10; SOAK 0 skips the soak
#   RESOLVE_BIN=/path/to/resolve Scripts/bench/bench-daemon.sh …        measures that build instead of building one
#
# DoH, cached names (1,000 names the servers have answered before), one HTTP/2 connection with 64
# queries in flight, against five servers in turn: the daemon, BIND 9.18's own DoH endpoint (the
# daemon's upstream, answering from its zone), and three peers in the daemon's own role in front of
# the same BIND — unbound 1.17 serving DoH as a caching forwarder, dnsdist 1.7 (DoH frontend, packet
# cache, BIND as its backend; security polling off) and Knot Resolver 5.6 (`kresd`, `doh2`, hd.test
# stubbed to BIND; no trust anchor, no priming). Each of these clients, ROUNDS x SECONDS per server,
# rounds interleaved: dnsperf -m doh GET, dnsperf -m doh POST, h2load GET. Then the DNS stub against
# BIND's plain DNS over UDP and over TCP (dnsperf), and the soak: DoH 300 q/s plus the stub over UDP
# 100 q/s for SOAK_SECONDS over 2,000 names with a 300-s TTL (errors; RSS every 10 s).
#
# Method: each server is pinned to CPU 0 and each client to CPU 1 (taskset), so client and server
# never share a core and rounds do not swing with the scheduler; server CPU time per query is read
# from /proc/PID/stat around each round (utime+stime), as a second, client-independent measure.
# dnsperf and h2load do not verify certificates (they are load generators); they talk only to the
# loopback servers started here. The daemon verifies its upstream with the test CA.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
soak=${1:-600}
rounds=${2:-3}
seconds=${3:-10}
port=18496
dns_port=18497
unbound_port=18445
dnsdist_port=18449
kresd_port=18450

need_build_packages
need_packages dnsperf nghttp2-client unbound dnsdist knot-resolver curl python3
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
bin=$(bench_resolve)   # RESOLVE_BIN=/path/to/resolve measures another build
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
taskset -c 0 "$bin" daemon --config "$work/daemon.yaml" --log-level warning 2>"$work/daemon.log" &
daemon=$!
# unbound: DoH on 127.0.0.1:$unbound_port, forwarding hd.test to BIND's plain DNS; everything else
# to a loopback port where nothing listens (nothing leaves the machine).
write_unbound_conf "$work/unbound.conf" "$work" "$unbound_port" "    https-port: $unbound_port
    tls-service-key: \"$root/.testenv/ca/doh-a.test.key\"
    tls-service-pem: \"$root/.testenv/ca/doh-a.test.pem\"
    http-endpoint: \"/dns-query\"
    http-max-streams: 1024
    num-threads: 2"
taskset -c 0 unbound -d -c "$work/unbound.conf" 2>"$work/unbound.stderr" &
unbound=$!
# dnsdist: a DoH frontend with a packet cache, BIND's plain DNS as the only backend. Security polling
# (a DNS query to the vendor) is off, so is every other outside contact; health checks go to BIND.
write_dnsdist_conf "$work/dnsdist.conf" "addDOHLocal(\"127.0.0.1:$dnsdist_port\", \"$root/.testenv/ca/doh-a.test.pem\", \"$root/.testenv/ca/doh-a.test.key\", \"/dns-query\")"
taskset -c 0 dnsdist --supervised --disable-syslog -C "$work/dnsdist.conf" >"$work/dnsdist.log" 2>&1 &
dnsdist=$!
# Knot Resolver: DoH over HTTP/2 (doh2), hd.test stubbed to BIND, everything else refused; no trust
# anchor and none of the modules that reach the root (priming, time-skew detection, RFC 5011).
mkdir -p "$work/kresd"
write_kresd_conf "$work/kresd.conf" "$kresd_port" doh2 "$root/.testenv/ca/doh-a.test.pem" "$root/.testenv/ca/doh-a.test.key"
(cd "$work/kresd" && exec taskset -c 0 kresd -n -c "$work/kresd.conf" . >"$work/kresd.log" 2>&1) &
kresd=$!
on_exit "kill $daemon $unbound $dnsdist $kresd 2>/dev/null || true; rm -rf '$work'"
pin_bind
for _ in $(seq 1 100); do
    curl -sf --max-time 5 --cacert "$ca" "https://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    sleep 0.1
done
wait_for_port 127.0.0.1 "$unbound_port"
wait_for_port 127.0.0.1 "$dnsdist_port" || { cat "$work/dnsdist.log" >&2; exit 1; }
wait_for_port 127.0.0.1 "$kresd_port" || { cat "$work/kresd.log" >&2; exit 1; }
rss() { echo $(( $(ps -o rss= -p "$daemon") / 1024 )); }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
idle_rss=$(rss)

for i in $(seq 0 999); do echo "w$i.bench.hd.test A"; done >"$work/cached.txt"
for i in $(seq 0 1999); do echo "s$i.bench.hd.test A"; done >"$work/soak.txt"
# One GET target per name for h2load.
doh_get_targets "$work/cached.txt" "" >"$work/h2load-paths.txt"

servers=(daemon bind unbound dnsdist kresd)
declare -A url=([daemon]="https://127.0.0.1:$port/dns-query" [bind]="https://127.0.0.1:$DOH_PORT/dns-query"
                [unbound]="https://127.0.0.1:$unbound_port/dns-query" [dnsdist]="https://127.0.0.1:$dnsdist_port/dns-query"
                [kresd]="https://127.0.0.1:$kresd_port/dns-query")
declare -A dport=([daemon]=$port [bind]=$DOH_PORT [unbound]=$unbound_port [dnsdist]=$dnsdist_port [kresd]=$kresd_port)
declare -A spid=([daemon]=$daemon [bind]=$bind_pid [unbound]=$unbound [dnsdist]=$dnsdist [kresd]=$kresd)

# Warm every server's cache with every name.
for server in "${servers[@]}"; do
    dnsperf -m doh -s 127.0.0.1 -p "${dport[$server]}" -O doh-uri="${url[$server]}" -c 1 -q 64 -d "$work/cached.txt" -n 2 >/dev/null 2>&1
done

results="$work/results.txt"
: >"$results"
run_client() { # client server -> appends "client server qps latency_ms cpu_us_per_query lost"
    local client=$1 server=$2 out before after
    before=$(cpu_ticks "${spid[$server]}")
    case "$client" in
        dnsperf-get|dnsperf-post)
            local method=GET; [ "$client" = dnsperf-post ] && method=POST
            out=$(taskset -c 1 dnsperf -m doh -s 127.0.0.1 -p "${dport[$server]}" -O doh-uri="${url[$server]}" -O doh-method=$method \
                  -c 1 -q 64 -d "$work/cached.txt" -l "$seconds" 2>&1)
            after=$(cpu_ticks "${spid[$server]}")
            echo "$out" | awk -v c="$client" -v s="$server" -v t=$((after - before)) '
                # The first "Average Latency" is the query latency; the second (Connection Statistics) is TLS set-up.
                /Queries completed/ {n=$3} /Queries lost/ {l=$3} /Queries per second/ {q=$4} /Average Latency/ && lat == "" {lat=$4}
                END {printf "%s %s %.0f %.3f %.1f %d\n", c, s, q, lat*1000, (n > 0 ? t*10000/n : 0), l}' >>"$results" ;;
        h2load-get)
            sed "s|^|https://127.0.0.1:${dport[$server]}|" "$work/h2load-paths.txt" >"$work/h2load-$server.txt"
            out=$(taskset -c 1 h2load -c 1 -m 64 -D "$seconds" -i "$work/h2load-$server.txt" 2>&1)
            after=$(cpu_ticks "${spid[$server]}")
            echo "$out" | awk -v c="$client" -v s="$server" -v t=$((after - before)) '
                /^finished in/ {q=$4; gsub(",", "", q)} /^requests:/ {n=$8; f=$10+$12+$14}
                /^time for request:/ {m=$6; lat=(m ~ /us$/ ? m/1000 : (m ~ /ms$/ ? m+0 : m*1000))}
                END {printf "%s %s %.0f %.3f %.1f %d\n", c, s, q, lat, (n > 0 ? t*10000/n : 0), f}' >>"$results" ;;
    esac
}
for client in dnsperf-get dnsperf-post h2load-get; do
    for _ in $(seq 1 "$rounds"); do
        for server in "${servers[@]}"; do run_client "$client" "$server"; done
    done
done
loaded_rss=$(rss)

# The DNS stub against BIND's plain DNS, UDP and TCP, same names, interleaved.
stub_results="$work/stub.txt"
: >"$stub_results"
for mode in udp tcp; do
    for _ in $(seq 1 "$rounds"); do
        for target in "stub $dns_port $daemon" "bind $DNS_PORT $bind_pid"; do
            read -r name p pid <<<"$target"
            before=$(cpu_ticks "$pid")
            q=$(taskset -c 1 dnsperf -m "$mode" -s 127.0.0.1 -p "$p" -c 1 -q 64 -d "$work/cached.txt" -l "$seconds" 2>&1 \
                | awk '/Queries per second/ {print $4}')
            echo "$mode $name $q $(( $(cpu_ticks "$pid") - before ))" >>"$stub_results"
        done
    done
done

soak_line="(skipped)"
if [ "$soak" -gt 0 ]; then
    taskset -c 1 dnsperf -m doh -s 127.0.0.1 -p "$port" -O doh-uri="https://127.0.0.1:$port/dns-query" -c 1 -q 32 -Q 300 \
        -d "$work/soak.txt" -l "$soak" >"$work/soak-doh.txt" 2>&1 &
    doh_load=$!
    taskset -c 1 dnsperf -s 127.0.0.1 -p "$dns_port" -c 1 -q 32 -Q 100 -d "$work/soak.txt" -l "$soak" >"$work/soak-udp.txt" 2>&1 &
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
errors = udp[2] + doh[2] + doh[3] + udp[3] + doh[5]
print(f"{seconds} s: {doh[0]:,} DoH ({doh[4]:,} HTTP 200) + {udp[0]:,} UDP queries: {errors} errors "
      f"(lost DoH {doh[2]} / UDP {udp[2]}, non-NOERROR {doh[3] + udp[3]}, HTTP non-200 {doh[5]}); "
      f"RSS {base} MiB after 1 min -> {rss[-1]} MiB at the end ({growth:+.1f} %), peak {max(rss)} MiB")
PY
)
fi
alive=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' --cacert "$ca" "https://127.0.0.1:$port/healthz")

PYTHONPATH="$root/Scripts/bench" python3 - "$results" "$stub_results" "$idle_rss" "$loaded_rss" "$soak_line" "$alive" "$rounds" "$seconds" <<'PY'
import sys
from stats import median, median_range, ratio_range
rows = [line.split() for line in open(sys.argv[1])]
stub = [line.split() for line in open(sys.argv[2])]
idle, loaded, soak, alive, rounds, seconds = sys.argv[3:]
print(f"DoH, cached names, 1 connection, 64 in flight, {rounds} x {seconds} s per client and server, rounds interleaved; "
      "median (min-max). Ratio: the daemon's median over the faster peer's median (its min over the peer's max, max over min).\n")
servers = ("daemon", "bind", "unbound", "dnsdist", "kresd")
print("| client | resolve daemon q/s | BIND 9.18 q/s | unbound 1.17 q/s | dnsdist 1.7 q/s | kresd 5.6 q/s | ratio vs the fastest peer | avg latency ms (daemon / BIND / unbound / dnsdist / kresd) | server CPU µs/query (same order) | lost or failed (same order) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for client in ("dnsperf-get", "dnsperf-post", "h2load-get"):
    by = {s: [r for r in rows if r[0] == client and r[1] == s] for s in servers}
    q = {s: [float(r[2]) for r in by[s]] for s in by}
    lat = {s: median(float(r[3]) for r in by[s]) for s in by}
    cpu = {s: median(float(r[4]) for r in by[s]) for s in by}
    lost = {s: sum(int(r[5]) for r in by[s]) for s in by}
    peer = max(servers[1:], key=lambda s: median(q[s]))
    ratio, worst, best = ratio_range(q["daemon"], q[peer])
    print(f"| {client} | " + " | ".join(median_range(q[s]) for s in servers) + f" | **{ratio:.2f}x** vs {peer} ({worst:.2f}-{best:.2f}) "
          f"| {' / '.join(f'{lat[s]:.2f}' for s in servers)} | {' / '.join(f'{cpu[s]:.1f}' for s in servers)} | {' / '.join(str(lost[s]) for s in servers)} |")
print()
print("| DNS stub (dnsperf, 64 in flight) | resolve daemon q/s | BIND 9.18 q/s | ratio |")
print("|---|---|---|---|")
for mode in ("udp", "tcp"):
    ours = [float(r[2]) for r in stub if r[0] == mode and r[1] == "stub"]
    bind = [float(r[2]) for r in stub if r[0] == mode and r[1] == "bind"]
    ratio, worst, best = ratio_range(ours, bind)
    print(f"| {mode.upper()} | {median_range(ours)} | {median_range(bind)} | **{ratio:.2f}x** ({worst:.2f}-{best:.2f}) |")
print()
print(f"| soak, DoH 300 q/s + UDP stub 100 q/s | {soak} |")
print(f"|---|---|")
print(f"| idle RSS / after the DoH rounds | {idle} MiB / {loaded} MiB |")
print(f"| /healthz after everything | {alive} |")
PY
