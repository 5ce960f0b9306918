"""Failover on a hostile network (issue 48): namespaces joined by veth pairs — a client (the daemon
under test and its load), a router that drops, resets or blocks, and a server with two DoH resolvers
(and DoT on the primary) — with addresses that exist only inside them and no route anywhere else.
Run by Scripts/test.sh inside its loopback-only namespace.

Each scenario holds a steady load of cache misses (distinct names, UDP to the daemon's stub) for
15 s; the router turns on the primary's failure after 3 s. Asserted: every query answered; no
lookup that started more than a second after the failure took more than 250 ms; the first answer
after the failure within the hedge delay plus a round trip (well under the primary's share of the
3 s budget). With DoT blocked from the start, the daemon's first answer (the "2.8 s" case).

    /usr/bin/python3 Tests/Failover/failover.py RESOLVE_BINARY [--seconds 15] [--rate 40]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import dns.message
import dns.query
import dns.rcode

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Fakes"))
from resolve_daemon import ResolveDaemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CA = os.path.join(ROOT, ".testenv/ca/ca.pem")
CERT, KEY = os.path.join(ROOT, ".testenv/ca/daemon.test.pem"), os.path.join(ROOT, ".testenv/ca/daemon.test.key")
SUFFIX = str(os.getpid())
CLIENT, ROUTER, SERVER = f"fo-c-{SUFFIX}", f"fo-r-{SUFFIX}", f"fo-s-{SUFFIX}"
SERVER_IP, ROUTER_C, ROUTER_S, CLIENT_IP = "10.77.1.2", "10.77.0.1", "10.77.1.1", "10.77.0.2"
PRIMARY, SECONDARY, DOT = 18543, 18544, 853
STUB = 18794
NAMES = 2000


def sh(*args, namespace=None, check=True):
    command = (["ip", "netns", "exec", namespace] if namespace else []) + list(args)
    return subprocess.run(command, check=check, capture_output=True, text=True)


def build_network():
    for namespace in (CLIENT, ROUTER, SERVER):
        sh("ip", "netns", "add", namespace)
        sh("ip", "link", "set", "lo", "up", namespace=namespace)
    sh("ip", "link", "add", "fo-c", "netns", CLIENT, "type", "veth", "peer", "name", "fo-rc", "netns", ROUTER)
    sh("ip", "link", "add", "fo-s", "netns", SERVER, "type", "veth", "peer", "name", "fo-rs", "netns", ROUTER)
    for namespace, device, address in ((CLIENT, "fo-c", CLIENT_IP), (ROUTER, "fo-rc", ROUTER_C), (ROUTER, "fo-rs", ROUTER_S), (SERVER, "fo-s", SERVER_IP)):
        sh("ip", "addr", "add", address + "/24", "dev", device, namespace=namespace)
        sh("ip", "link", "set", device, "up", namespace=namespace)
    # Only the two links' subnets: no default route anywhere, so nothing can leave.
    sh("ip", "route", "add", "10.77.1.0/24", "via", ROUTER_C, namespace=CLIENT)
    sh("ip", "route", "add", "10.77.0.0/24", "via", ROUTER_S, namespace=SERVER)
    sh("sysctl", "-qw", "net.ipv4.ip_forward=1", namespace=ROUTER)


def enter(namespace):
    """Moves this process (its later threads and sockets) into `namespace`: the load and the first
    queries are sent from the client's side, where the daemon's stub listens."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/run/netns/{namespace}") as handle:
        if libc.setns(handle.fileno(), 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), f"setns {namespace}")


def can_make_namespaces(label):
    """Whether this process may create network namespaces; says it skips when it may not (a user
    namespace — the test command without root — cannot mount /run/netns)."""
    probe = sh("ip", "netns", "add", f"fo-probe-{SUFFIX}", check=False)
    if probe.returncode != 0 and ("Permission denied" in probe.stderr or "not permitted" in probe.stderr):
        print(f"{label}: skipped — creating network namespaces needs root ({probe.stderr.strip()})")
        return False
    sh("ip", "netns", "del", f"fo-probe-{SUFFIX}", check=False)
    return True


def report(label, failures):
    """Prints each failure and the verdict, and exits 1 when anything failed."""
    for failure in failures:
        print("FAIL " + failure)
    print(f"{label}: {'all passed' if not failures else f'{len(failures)} failed'}")
    sys.exit(1 if failures else 0)


def tear_down():
    for namespace in (CLIENT, ROUTER, SERVER):
        sh("ip", "netns", "del", namespace, check=False)


def router(rule):
    """Adds an iptables rule to the router's FORWARD chain (what the path does to the primary)."""
    sh("iptables", "-I", "FORWARD", *rule, namespace=ROUTER)


def router_clear():
    sh("iptables", "-F", "FORWARD", namespace=ROUTER)


def in_namespace(namespace, binary, directory):
    """A wrapper that runs `binary` in `namespace`: what ResolveDaemon starts."""
    path = os.path.join(directory, f"resolve-in-{namespace}")
    with open(path, "w") as file:
        file.write(f"#!/bin/sh\nexec ip netns exec {namespace} {binary} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def server_config(port, dot):
    records = "".join(f'  - "n{i}.fo.test 300 A 198.18.{i // 250}.{i % 250 + 1}"\n' for i in range(NAMES))
    return f"""upstreams:
  - {{doh: "https://unused.test:9/dns-query", bootstrap: [127.0.0.9]}}
ca_file: {CA}
allow_private: true
system_dns: ["127.0.0.9:9"]
listen: "{SERVER_IP}:{port}"
{f'dot_listen: "{SERVER_IP}:{DOT}"' if dot else ''}
tls: {{cert: {CERT}, key: {KEY}}}
records:
{records}"""


def client_config(primary, hedging=True):
    return f"""hedging: {"true" if hedging else "false"}
upstreams:
  - {primary}
  - {{doh: "https://daemon.test:{SECONDARY}/dns-query", bootstrap: [{SERVER_IP}]}}
ca_file: {CA}
allow_private: true
system_dns: ["127.0.0.9:9"]
listen: "127.0.0.1:18793"
dns_listen: "127.0.0.1:{STUB}"
readiness: {{probe: n0.fo.test}}
"""


class Load:
    """A steady stream of distinct names to the stub, one thread per query (bounded by the rate and
    the 3 s timeout), each latency recorded with its start time."""

    def __init__(self, first_name):
        self.next_name = first_name
        self.results = []  # (start, latency or None, rcode)
        self.lock = threading.Lock()

    def one(self, name):
        started = time.monotonic()
        query = dns.message.make_query(name, "A")
        try:
            response = dns.query.udp(query, "127.0.0.1", port=STUB, timeout=3)
            outcome = (started, time.monotonic() - started, dns.rcode.to_text(response.rcode()))
        except Exception as error:  # a timeout: no answer
            outcome = (started, None, type(error).__name__)
        with self.lock:
            self.results.append(outcome)

    def run(self, seconds, rate, at=None):
        """Sends `rate` queries a second for `seconds`; `at(t)` is called at each second mark."""
        threads = []
        start = time.monotonic()
        interval = 1.0 / rate
        marks = 0
        for count in range(int(seconds * rate)):
            target = start + count * interval
            while time.monotonic() < target:
                time.sleep(min(0.002, max(0, target - time.monotonic())))
            if at and int(time.monotonic() - start) >= marks:
                at(marks)
                marks += 1
            name = f"n{self.next_name % NAMES}.fo.test"
            self.next_name += 1
            thread = threading.Thread(target=self.one, args=(name,), daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(5)
        return start


def quantiles(values):
    values = sorted(values)
    if not values:
        return "none"
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return f"p50 {pick(0.5) * 1000:.1f} ms, p99 {pick(0.99) * 1000:.1f} ms, max {values[-1] * 1000:.1f} ms"


def scenario(label, binary, directory, primary, rule, seconds, rate, failures, hedging=True):
    """Runs the load; applies `rule` on the router 3 s in; checks and reports the latencies (only
    reports them with hedging off: what a lookup pays without it)."""
    daemon = ResolveDaemon(in_namespace(CLIENT, binary, directory), client_config(primary, hedging), prefix=f"failover-{label}-")
    try:
        load = Load(first_name=hash(label) % NAMES)
        failed_at = []

        def at(second):
            if second == 3:
                router(rule)
                failed_at.append(time.monotonic())

        load.run(seconds, rate, at)
        answered = [r for r in load.results if r[1] is not None and r[2] == "NOERROR"]
        unanswered = [r for r in load.results if r[1] is None or r[2] != "NOERROR"]
        t0 = failed_at[0]
        after = [r for r in answered if r[0] >= t0]
        settled = [r[1] for r in answered if r[0] >= t0 + 1.0]
        first_after = min(after, key=lambda r: r[0])[1] if after else None
        print(f"  {label:>8}: {len(load.results)} queries, {len(unanswered)} unanswered; before the failure {quantiles([r[1] for r in answered if r[0] < t0])}; "
              f"from 1 s after it {quantiles(settled)}; the first answer after it {first_after * 1000 if first_after else -1:.1f} ms; "
              f"worst in the first second {max([r[1] for r in after if r[0] < t0 + 1.0] or [0]) * 1000:.1f} ms")
        if unanswered:
            failures.append(f"{label}: {len(unanswered)} queries unanswered ({unanswered[:3]})")
        if not hedging:
            return
        if settled and max(settled) > 0.25:
            failures.append(f"{label}: a lookup more than 1 s after the failure took {max(settled) * 1000:.0f} ms (> 250 ms)")
        if first_after is None or first_after > 0.45:
            failures.append(f"{label}: the first answer after the failure took {first_after} s (> hedge delay + a round trip)")
    finally:
        daemon.stop()
        router_clear()


def first_answer(label, binary, directory, primary, rule, failures):
    """The daemon starts with the primary already blocked: its first answer's latency."""
    router(rule)
    daemon = ResolveDaemon(in_namespace(CLIENT, binary, directory), client_config(primary), prefix=f"failover-{label}-")
    try:
        started = time.monotonic()
        response = dns.query.udp(dns.message.make_query("n1999.fo.test", "A"), "127.0.0.1", port=STUB, timeout=5)
        took = time.monotonic() - started
        print(f"  {label:>8}: the daemon's first answer with the primary blocked from the start: "
              f"{dns.rcode.to_text(response.rcode())} in {took * 1000:.1f} ms")
        if response.rcode() != dns.rcode.NOERROR or took > 0.6:
            failures.append(f"{label}: first answer {dns.rcode.to_text(response.rcode())} in {took:.2f} s (> 0.6 s)")
    finally:
        daemon.stop()
        router_clear()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rate", type=float, default=40)
    arguments = parser.parse_args()
    binary = os.path.abspath(arguments.binary)
    if shutil.which("iptables") is None:
        sys.exit("failover: iptables is needed (the router's drop and reset rules)")
    if not can_make_namespaces("failover"):
        return
    directory = tempfile.mkdtemp(prefix="failover-")
    failures = []
    build_network()
    servers = []
    try:
        servers.append(ResolveDaemon(in_namespace(SERVER, binary, directory), server_config(PRIMARY, dot=True), prefix="failover-primary-"))
        servers.append(ResolveDaemon(in_namespace(SERVER, binary, directory), server_config(SECONDARY, dot=False), prefix="failover-secondary-"))
        enter(CLIENT)
        # How the path misbehaves: this kernel has no sch_netem; the router uses iptables (drop, and
        # REJECT with a TCP reset), which the machine has.
        print(f"Failover on a hostile network: client {CLIENT_IP} -> router -> server {SERVER_IP} (veth, no other route); "
              f"{arguments.rate:.0f} q/s of cache misses for {arguments.seconds:.0f} s each, the primary failing 3 s in")
        doh_primary = f'{{doh: "https://daemon.test:{PRIMARY}/dns-query", bootstrap: [{SERVER_IP}]}}'
        dot_primary = f'{{dot: "{SERVER_IP}:{DOT}", tls_name: daemon.test}}'
        drop = ["-p", "tcp", "-d", SERVER_IP, "--dport", str(PRIMARY), "-j", "DROP"]
        reset = ["-p", "tcp", "-d", SERVER_IP, "--dport", str(PRIMARY), "-j", "REJECT", "--reject-with", "tcp-reset"]
        block853 = ["-p", "tcp", "-d", SERVER_IP, "--dport", str(DOT), "-j", "DROP"]
        scenario("drop", binary, directory, doh_primary, drop, arguments.seconds, arguments.rate, failures)
        scenario("reset", binary, directory, doh_primary, reset, arguments.seconds, arguments.rate, failures)
        scenario("853", binary, directory, dot_primary, block853, arguments.seconds, arguments.rate, failures)
        scenario("no hedge", binary, directory, doh_primary, drop, arguments.seconds, arguments.rate, failures, hedging=False)
        first_answer("853", binary, directory, dot_primary, block853, failures)
        first_answer("drop", binary, directory, doh_primary, drop, failures)
    finally:
        for server in servers:
            server.stop()
        tear_down()
        shutil.rmtree(directory, ignore_errors=True)
    report("failover", failures)


if __name__ == "__main__":
    main()
