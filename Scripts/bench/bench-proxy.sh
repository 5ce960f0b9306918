#!/usr/bin/env bash
# Forward-proxy benchmark: `resolve proxy` (release build) against direct connections (curl --resolve)
# and against the peer tinyproxy 1.11 (Debian), which resolves the same trusted answers through
# /etc/hosts in a mount namespace of its own; and, as a reference for what the extra hop alone costs,
# a splicing TCP forwarder with no proxy protocol (HAProxy 2.6, mode tcp, splice both ways) that
# the clients dial for the origin's name (path "hop"). All on loopback, against the nginx HTTPS origin.
#
#   Scripts/bench/bench-proxy.sh [REPEATS]     default 5; min / median / max of the repeats are reported
#   RESOLVE_BIN=/path/to/resolve Scripts/bench/bench-proxy.sh   the same with another build (no build step)
#   DOWNLOADS=N   64 MiB downloads per path in a run (default 25)
#
# Each run measures every path interleaved (direct, ours, tinyproxy, hop, direct, ...), so a slow
# moment of the machine falls on all four, and the ratios are taken run by run:
# (a) a 64 MiB HTTPS download (unthrottled /big-fast) through each path, DOWNLOADS a run, the median
#     counting: MB/s. One download lasts about 100 ms, and on this 2-vCPU VM the time nginx needs
#     to encrypt and send the same 64 MiB varies from one download to the next by up to 2x (its
#     on-CPU time from /proc/PID/schedstat, with no time spent waiting for a CPU), which moves every
#     path alike (a pure CPU loop's time per unit of work varies as much); with 5 downloads a run
#     the ratio of two paths' medians swung by +-15 % from run to run, with 25 by about +-7 %;
# (b) 1,000 small HTTPS requests, each on a new tunnel (HTTP/1.1 with Connection: close), in 10
#     blocks of 100 per path: requests/s, and the median time to first byte;
# (c) CONNECT to `200`: 500 sequential CONNECTs from a Python client, the median in microseconds;
# (d) RSS per idle tunnel: 200 CONNECTs held open, the proxy's RSS before and after;
# (e) a second client, Python `requests` (Scripts/bench/bench-proxy-requests.py): (a) and (b) again, the
#     same counts, in a mount namespace whose /etc/hosts gives the direct path the trusted address;
# (f) a third client, headless Chromium (Scripts/bench/bench-proxy-chromium.py): (a) and (b) again, the
#     same counts, from a page of the origin (fetch), the direct path by --host-resolver-rules.
#     A goal counts only if it holds with every client. The hop carries no goal: "hop / direct" is
#     what one relayed loopback hop costs each client here when a mature relay does nothing else,
#     and "resolve proxy / hop" sets our whole proxy (hop, CONNECT, resolution) against it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
repeats=${1:-5}
downloads=${DOWNLOADS:-25}
proxy_port=18661 peer_port=18662 api_port=18663
hop_address=127.0.0.20 # the forwarder listens there on the origin's port

need_build_packages
need_packages tinyproxy haproxy curl util-linux python3-requests chromium libnss3-tools
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
bin=$(bench_resolve)   # RESOLVE_BIN=/path/to/resolve measures another build
work=$(mktemp -d)
cleanup() {
    [ -n "${ours:-}" ] && kill "$ours" 2>/dev/null || true
    [ -n "${peer:-}" ] && kill "$peer" 2>/dev/null || true
    [ -n "${hop:-}" ] && kill "$hop" 2>/dev/null || true
    bash Scripts/env/testenv.sh stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
bash Scripts/env/testenv.sh start >/dev/null
ca=.testenv/ca/ca.pem
origin="origin.hd.test:$ORIGIN_PORT"

cat >"$work/resolve.yaml" <<CONF
upstreams:
  - {doh: "https://doh-a.test:$DOH_PORT/dns-query", bootstrap: [127.0.0.1]}
ca_file: $root/$ca
allow_private: true
listen: "127.0.0.1:$api_port"
proxy_listen: "127.0.0.1:$proxy_port"
proxy: {connect_ports: [$ORIGIN_PORT], allow_private_destinations: true, limits: {max_connections: 4096}}
CONF
"$bin" proxy --config "$work/resolve.yaml" --log-level warning 2>"$work/resolve.log" &
ours=$!
# tinyproxy and the requests client resolve with getaddrinfo. Each runs in a mount namespace of its
# own where /etc/hosts gives the origin's trusted answer (127.0.0.4) and the hosts file is the whole
# name service ("hosts: files"), with a loopback nameserver behind it should anything read
# resolv.conf: the names a browser asks a proxy for in the background (clients2.google.com,
# accounts.google.com, update.googleapis.com: seen in tinyproxy's strace) fail there instead of
# reaching this machine's resolver, which is off-machine. The machine's files stay as they are.
printf '127.0.0.1 localhost\n127.0.0.4 origin.hd.test\n' >"$work/hosts"
sed 's/^hosts:.*/hosts: files/' /etc/nsswitch.conf >"$work/nsswitch.conf"
grep -q '^hosts: files$' "$work/nsswitch.conf" || echo 'hosts: files' >>"$work/nsswitch.conf"
echo 'nameserver 127.0.0.1' >"$work/resolv.conf"
hosts_only() { # command [args...]: becomes it (exec: called as `&` or in a pipeline, so $! is its pid)
    exec unshare -m sh -c "mount --bind '$work/hosts' /etc/hosts && mount --bind '$work/nsswitch.conf' /etc/nsswitch.conf &&
        mount --bind '$work/resolv.conf' /etc/resolv.conf && exec \"\$@\"" sh "$@"
}
cat >"$work/tinyproxy.conf" <<CONF
Port $peer_port
Listen 127.0.0.1
Timeout 600
MaxClients 4096
Allow 127.0.0.1
ConnectPort $ORIGIN_PORT
LogLevel Critical
CONF
hosts_only tinyproxy -d -c "$work/tinyproxy.conf" 2>"$work/tinyproxy.log" &
peer=$!
# The hop: every connection to hop_address is spliced to the origin's trusted address, bytes
# untouched (TLS end to end, as through a CONNECT tunnel). HAProxy splices only when told to
# (splice-auto left it copying with recvfrom/sendto here: strace).
cat >"$work/haproxy.cfg" <<CONF
global
  maxconn 4096
  nbthread 2
defaults
  mode tcp
  timeout connect 10s
  timeout client 60s
  timeout server 60s
  option splice-request
  option splice-response
listen hop
  bind $hop_address:$ORIGIN_PORT
  server origin 127.0.0.4:$ORIGIN_PORT
CONF
haproxy -db -f "$work/haproxy.cfg" 2>"$work/haproxy.log" &
hop=$!
wait_for_port 127.0.0.1 "$proxy_port"
wait_for_port 127.0.0.1 "$peer_port"
wait_for_port "$hop_address" "$ORIGIN_PORT"

paths=(direct ours peer hop)
via() { # path -> curl options
    case "$1" in
        direct) echo "--resolve $origin:127.0.0.4" ;;
        ours) echo "-x http://127.0.0.1:$proxy_port" ;;
        peer) echo "-x http://127.0.0.1:$peer_port" ;;
        hop) echo "--resolve $origin:$hop_address" ;;
    esac
}
for i in $(seq 1 100); do printf 'url = "https://%s/echo?n=%s"\noutput = "/dev/null"\n' "$origin" "$i"; done >"$work/small.cfg"

out="$work/results"
connect_us() { # proxy-port -> median microseconds from sending CONNECT to reading the 200
    PYTHONPATH="$root/Scripts/bench" /usr/bin/python3 - "$1" "$origin" <<'PY'
import socket, sys, time
from stats import median
port, target = int(sys.argv[1]), sys.argv[2]
request = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
samples = []
for _ in range(500):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    started = time.perf_counter()
    s.sendall(request)
    assert s.recv(100).split(b" ")[1] == b"200", "no tunnel"
    samples.append(time.perf_counter() - started)
    s.close()
print(f"{median(samples) * 1e6:.0f}")
PY
}

for run in $(seq 1 "$repeats"); do
    # Interleaved, so that a slow moment of this 2-core machine falls on every path alike: rounds
    # of one download per path, then ten rounds of 100 requests per path.
    declare -A speeds=() seconds=() ttfbs=()
    for _ in $(seq 1 "$downloads"); do
        for path in "${paths[@]}"; do
            # shellcheck disable=SC2046
            speeds[$path]+="$(curl -s --max-time 60 --cacert "$ca" $(via "$path") -o /dev/null -w '%{speed_download}' "https://$origin/big-fast") "
        done
    done
    for _ in $(seq 1 10); do
        for path in "${paths[@]}"; do
            start=$(date +%s.%N)
            # shellcheck disable=SC2046
            ttfbs[$path]+="$(curl -s --max-time 60 --http1.1 -H 'Connection: close' --cacert "$ca" $(via "$path") -K "$work/small.cfg" \
                -w '%{time_starttransfer} ') "
            seconds[$path]+="$(echo "$(date +%s.%N) - $start" | bc) "
        done
    done
    # The second client, the same workloads (its own interleaving of the four paths).
    hosts_only /usr/bin/python3 Scripts/bench/bench-proxy-requests.py "$origin" "$ca" $proxy_port $peer_port "$downloads" 10 \
        "$hop_address" | sed "s/^/$run /" >>"$out.requests"
    # The third client, a browser: the direct path by its own resolver rules, no namespace needed.
    /usr/bin/python3 Scripts/bench/bench-proxy-chromium.py "$origin" "$ca" $proxy_port $peer_port "$downloads" 10 "$hop_address" |
        sed "s/^/$run /" >>"$out.chromium"
    declare -A connects=([ours]=$(connect_us "$proxy_port") [peer]=$(connect_us "$peer_port") [direct]=0 [hop]=0)
    for path in "${paths[@]}"; do
        speed=$(echo "${speeds[$path]}" | /usr/bin/python3 Scripts/bench/stats.py lower-median)
        echo "run $run $path downloads MB/s: $(for s in ${speeds[$path]}; do printf '%.0f ' "$(echo "$s / 1000000" | bc -l)"; done)"
        wall=$(echo "${seconds[$path]}" | tr ' ' '\n' | grep . | paste -sd+ | bc)
        ttfb=$(echo "${ttfbs[$path]}" | /usr/bin/python3 Scripts/bench/stats.py lower-median)
        echo "$run $path $speed $wall $ttfb ${connects[$path]}" >>"$out"
    done
done

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
idle_rss() { # proxy-port pid -> KiB per idle tunnel over 200
    local before after
    before=$(rss "$2")
    /usr/bin/python3 - "$1" "$origin" <<'PY' &
import socket, sys, time
port, target = int(sys.argv[1]), sys.argv[2]
held = []
for _ in range(200):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert s.recv(100).startswith(b"HTTP/1."), "no answer"
    held.append(s)
time.sleep(3)
PY
    local holder=$!
    sleep 2
    after=$(rss "$2")
    wait "$holder"
    echo "scale=1; ($after - $before) / 200" | bc
}
peer_pid=$(pgrep -n -f "tinyproxy -d -c $work/tinyproxy.conf")
ours_rss=$(idle_rss "$proxy_port" "$ours")
peer_rss=$(idle_rss "$peer_port" "$peer_pid")

PYTHONPATH="$root/Scripts/bench" /usr/bin/python3 - "$out" "$repeats" "$ours_rss" "$peer_rss" "$downloads" <<'PY'
import sys
from stats import min_median_max, run_ratios
rows = [line.split() for line in open(sys.argv[1])]
n = int(sys.argv[2])
data = {}
for run, path, speed, wall, ttfb, connect in rows:
    data.setdefault(path, []).append((float(speed), 1000 / float(wall), float(ttfb), float(connect)))
def ratios(a, b, index, rows=None):
    """Run by run, path a's figure over path b's (curl's rows unless others are given)."""
    rows = rows or data
    return run_ratios([x[index] for x in rows[a]], [y[index] for y in rows[b]])
def goals(rows):
    """The two goal lines of one client's rows."""
    print(f"- download: resolve proxy / direct {min_median_max(ratios('ours', 'direct', 0, rows), '{:.2f}')}x (goal >= 0.9), "
          f"/ tinyproxy {min_median_max(ratios('ours', 'peer', 0, rows), '{:.2f}')}x (goal >= 1.0)")
    print(f"- new tunnels: resolve proxy / direct {min_median_max(ratios('ours', 'direct', 1, rows), '{:.2f}')}x, "
          f"/ tinyproxy {min_median_max(ratios('ours', 'peer', 1, rows), '{:.2f}')}x (goal >= 1.0)")
    print(f"- the bare hop (HAProxy splicing, no proxy protocol): download / direct {min_median_max(ratios('hop', 'direct', 0, rows), '{:.2f}')}x; "
          f"resolve proxy / hop: download {min_median_max(ratios('ours', 'hop', 0, rows), '{:.2f}')}x, "
          f"new tunnels {min_median_max(ratios('ours', 'hop', 1, rows), '{:.2f}')}x")
# The other clients' rows: run path MB/s requests/s.
clients = {"requests": "Python requests", "chromium": "headless Chromium"}
others = {}
for client in clients:
    rows = others[client] = {}
    for run, path, speed, rate in (line.split() for line in open(f"{sys.argv[1]}.{client}")):
        rows.setdefault(path, []).append((float(speed) * 1e6, float(rate)))
for run in range(n):
    line = []
    for client, rows in [("curl", data)] + list(others.items()):
        d, o, p, h = (rows[path][run] for path in ("direct", "ours", "peer", "hop"))
        line.append(f"{client}: download ours/direct {o[0] / d[0]:.2f}x (hop/direct {h[0] / d[0]:.2f}x), "
                    f"new tunnels ours/tinyproxy {o[1] / p[1]:.2f}x")
    print(f"run {run + 1}: " + "; ".join(line))
print(f"min/median/max of {n} runs")
print()
print(f"| path | 64 MiB download, MB/s (median of {sys.argv[5]} a run) | 1,000 requests, new tunnel each: req/s | median time to first byte, ms | CONNECT to 200, median us |")
print("|---|---|---|---|---|")
names = {"direct": "direct (curl --resolve)", "ours": "resolve proxy", "peer": "tinyproxy 1.11 (peer)",
         "hop": "hop: HAProxy 2.6 splicing TCP forwarder (curl --resolve)"}
for path in names:
    rows = data[path]
    print(f"| {names[path]} | {min_median_max([r[0] / 1e6 for r in rows], '{:.0f}')} | {min_median_max([r[1] for r in rows], '{:.0f}')} "
          f"| {min_median_max([r[2] * 1e3 for r in rows], '{:.2f}')} | {min_median_max([r[3] for r in rows], '{:.0f}') if path in ('ours', 'peer') else '-'} |")
print()
goals(data)
print(f"- CONNECT to 200: resolve proxy / tinyproxy time {min_median_max(ratios('ours', 'peer', 3), '{:.2f}')}x (lower is faster)")
added = [o[2] - d[2] for o, d in zip(data["ours"], data["direct"])]
print(f"- added time to first byte (resolve proxy - direct): {min_median_max([a * 1e3 for a in added], '{:.2f}')} ms")
print(f"- RSS per idle tunnel (200 held): resolve proxy {float(sys.argv[3]):.1f} KiB, tinyproxy {float(sys.argv[4]):.1f} KiB")
for client, title in clients.items():
    print()
    print(f"{title}, the same workloads:")
    print()
    print(f"| path | 64 MiB download, MB/s (median of {sys.argv[5]} a run) | 1,000 requests, new connection or tunnel each: req/s |")
    print("|---|---|---|")
    direct = "/etc/hosts" if client == "requests" else "--host-resolver-rules"
    hop = "its address dialled for the name" if client == "requests" else "--host-resolver-rules"
    for path in names:
        rows = others[client][path]
        print(f"| {names[path].replace('curl --resolve', hop if path == 'hop' else direct)} | {min_median_max([r[0] / 1e6 for r in rows], '{:.0f}')} | {min_median_max([r[1] for r in rows], '{:.0f}')} |")
    print()
    goals(others[client])
PY
