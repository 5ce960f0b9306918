#!/usr/bin/env bash
# DNSSEC validation benchmarks, against named peers in the same run:
#
#   Scripts/bench/bench-dnssec.sh [RUNS] [SAMPLES]      defaults 3 and 20
#
# Over the signed tree under sig.test that Scripts/env/testenv.sh serves from BIND (one DS anchor):
#   cold, chain not cached   ours (library: a fresh resolver, its DoH connection already up; and the
#                            `resolve lookup --dnssec report` process) vs `delv` (a process, plain DNS
#                            to the same BIND) vs unbound (freshly started, its first query), all for
#                            www.rsa.sig.test (two zones below the anchor)
#   chain cached, new name   ours (library) vs unbound (warm): distinct x<i>.wild.sig.test, each a
#                            miss that goes to BIND and is validated with cached keys
#   cache hit                ours, dnssec report vs off (ns per lookup, alternating slices)
# Each figure is the median of SAMPLES; the table gives min / median / max of those over RUNS runs.
# Only loopback traffic: BIND and unbound are the test environment's (unbound iterates to BIND only).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh
runs=${1:-3}
samples=${2:-20}

need_build_packages
need_packages bind9-dnsutils unbound python3-dnspython
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
for product in DNSSECBenchmark resolve; do swift build -c release --product "$product" 2>&1 | grep -E "error|warning: " || true; done
bin="$(swift build -c release --show-bin-path)"
use_testenv
anchors="$root/.testenv/sig.test.anchors"
work=$(mktemp -d)
on_exit "rm -rf '$work'"
out="$work/results.jsonl"

for run in $(seq 1 "$runs"); do
    echo "== run $run" >&2
    "$bin/DNSSECBenchmark" cold "$samples" "$anchors" | sed "s/^{/{\"run\":$run,/" >>"$out"
    "$bin/DNSSECBenchmark" warm "$((samples * 10))" "$anchors" | sed "s/^{/{\"run\":$run,/" >>"$out"
    "$bin/DNSSECBenchmark" hits 10 "$anchors" | sed "s/^{/{\"run\":$run,/" >>"$out"
    PYTHONPATH="$root/Scripts/bench" /usr/bin/python3 - "$run" "$samples" "$anchors" "$bin/resolve" "$work" "$DNS_PORT" "$DOH_PORT" "$VALIDATOR_DNS_PORT" >>"$out" <<'PY'
import json, os, signal, subprocess, sys, time
import dns.message, dns.query
from stats import spread

run, samples, anchors, resolve, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
dns_port, doh_port, unbound_port = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
root = os.getcwd()
ds = open(anchors).read().split()  # sig.test. IN DS tag alg digest-type HEX
delv_anchors = os.path.join(work, "delv.conf")
with open(delv_anchors, "w") as f:
    f.write('trust-anchors { %s static-ds %s %s %s "%s"; };\n' % (ds[0], ds[3], ds[4], ds[5], "".join(ds[6:])))

def emit(what, values, unit="ms"):
    low, mid, high = spread(values)
    print(json.dumps({"run": run, "what": what, "n": len(values), "min_" + unit: low,
                      "median_" + unit: mid, "max_" + unit: high}))

def wall(command, check):
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = (time.perf_counter() - start) * 1000
    if not check(done):
        sys.exit("unexpected result of %s: %s %s" % (command[0], done.stdout, done.stderr))
    return elapsed

ours = [resolve, "lookup", "--doh", "https://doh-a.test:%d/dns-query" % doh_port, "--bootstrap", "doh-a.test=127.0.0.1",
        "--ca-file", root + "/.testenv/ca/ca.pem", "--allow-private", "--type", "a", "--json"]
emit("ours CLI process, validated", [wall(ours + ["--dnssec", "report", "--trust-anchors", anchors, "www.rsa.sig.test"],
     lambda d: '"dnssec":"secure"' in d.stdout) for _ in range(samples)])
emit("ours CLI process, unvalidated", [wall(ours + ["www.rsa.sig.test"], lambda d: d.returncode == 0) for _ in range(samples)])
emit("delv process, validated", [wall(["delv", "-a", delv_anchors, "@127.0.0.1", "-p", str(dns_port), "www.rsa.sig.test", "A",
     "+root=sig.test"], lambda d: "fully validated" in d.stdout) for _ in range(samples)])

# unbound, started fresh for each sample: the first query validates the whole chain.
conf = open(root + "/.testenv/unbound/unbound.conf").read()
fresh_port = 18058
conf = "\n".join(line for line in conf.splitlines() if "interface:" not in line and "https-port" not in line and "tls-service" not in line
                 and "http-endpoint" not in line)
conf = conf.replace("server:", "server:\n    interface: 127.0.0.1@%d" % fresh_port, 1)
conf = conf.replace('pidfile: "%s/.testenv/unbound/unbound.pid"' % root, 'pidfile: "%s/unbound.pid"' % work)
conf = conf.replace('logfile: "%s/.testenv/unbound/unbound.log"' % root, 'logfile: "%s/unbound.log"' % work)
conf = conf.replace("do-daemonize: yes", "do-daemonize: no")
open(os.path.join(work, "unbound.conf"), "w").write(conf)

def query(port, name):
    q = dns.message.make_query(name, "A", want_dnssec=True)
    start = time.perf_counter()
    r = dns.query.udp(q, "127.0.0.1", port=port, timeout=5)
    elapsed = (time.perf_counter() - start) * 1000
    if not (r.flags & dns.flags.AD):
        sys.exit("unbound did not validate %s: %s" % (name, r))
    return elapsed

cold = []
for _ in range(samples):
    server = subprocess.Popen(["unbound", "-d", "-c", os.path.join(work, "unbound.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                dns.query.udp(dns.message.make_query("ready.hd.test", "A"), "127.0.0.1", port=fresh_port, timeout=0.2)
                break
            except Exception:
                time.sleep(0.05)
        cold.append(query(fresh_port, "www.rsa.sig.test"))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
emit("unbound cold, chain not cached (validated)", cold)
query(unbound_port, "www.rsa.sig.test")
query(unbound_port, "www.sig.test")
emit("unbound chain cached, new name (validated)",
     [query(unbound_port, "u%d-%d.%d.wild.sig.test" % (run, i, os.getpid())) for i in range(samples * 10)])
PY
done

PYTHONPATH="$root/Scripts/bench" /usr/bin/python3 - "$out" <<'PY'
import json, sys
from stats import median, median_range
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
def medians(what, unit):
    return [r["median_" + unit] for r in rows if r["what"] == what]
def cell(what, unit="ms"):
    return median_range(medians(what, unit), "{:.3f}" if unit == "ms" else "{:.0f}", dash="–")
print("\n| measure | ours | peer | ratio ours/peer (median) |")
print("|---|---|---|---|")
pairs = [
    ("cold, chain not cached, in process (ms)", "ours cold, chain not cached (validated)", "unbound cold, chain not cached (validated)", "unbound, fresh start, first query"),
    ("cold, a process per lookup (ms)", "ours CLI process, validated", "delv process, validated", "delv"),
    ("chain cached, new name (ms)", "ours chain cached, new name (validated)", "unbound chain cached, new name (validated)", "unbound, warm"),
]
for title, ours, peer, name in pairs:
    ratio = median(medians(ours, "ms")) / median(medians(peer, "ms"))
    print("| %s | %s | %s: %s | %.2f |" % (title, cell(ours), name, cell(peer), ratio))
print("\n| reference | ours |\n|---|---|")
for what in ["ours cold, unvalidated", "ours new name, unvalidated", "ours CLI process, unvalidated"]:
    print("| %s (ms) | %s |" % (what, cell(what)))
off, on = median(medians("cache hit, dnssec off", "ns")), median(medians("cache hit, dnssec report", "ns"))
print("\n| cache hit (ns/lookup) | dnssec off | dnssec report | report/off (median) |\n|---|---|---|---|")
print("| resolve() | %s | %s | %.3f |" % (cell("cache hit, dnssec off", "ns"), cell("cache hit, dnssec report", "ns"), on / off))
PY
