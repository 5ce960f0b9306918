"""A lossy, slow link (issue 48): 10 % loss and 80 ms of delay each way between a DoT forwarder and
its upstream, built from the same namespaces as failover.py (client -> router -> server, veth
pairs, addresses only inside them, no other route). The router drops with iptables' `statistic`
match and delays with an NFQUEUE program of this file's own (this kernel has no sch_netem).

Two forwarders in the client namespace ask the same DoT upstream (a `resolve daemon` serving
local records on the server) through the router: unbound (`forward-tls-upstream: yes`) and
`resolve daemon`. Each is sent the same stream of distinct names over UDP on loopback (open loop,
RATE a second, one try each with a 5 s client timeout): how many are answered, and p50/p99/max.

    /usr/bin/python3 Tests/Failover/lossy.py RESOLVE_BINARY [--names 200] [--rate 20] [--rounds 3]
        [--loss 0.1] [--delay-ms 80] [--check]

With --check, it fails unless the daemon answers every name in every round and its median p99
over the rounds is no worse than unbound's (the test command runs three rounds so).
"""
import argparse
import heapq
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import dns.message
import dns.query
import dns.rcode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import failover  # noqa: E402
from failover import CA, CLIENT, ROUTER, SERVER, SERVER_IP, ResolveDaemon, in_namespace  # noqa: E402

DOT = failover.DOT
UNBOUND_PORT, DAEMON_PORT = 18795, 18794
QUEUE = 7

# nfnetlink_queue (linux/netfilter/nfnetlink_queue.h), spoken directly over a netlink socket.
NETLINK_NETFILTER, NFNL_SUBSYS_QUEUE = 12, 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQNL_CFG_CMD_BIND, NFQNL_COPY_META = 1, 1
NLM_F_REQUEST, NLM_F_ACK, NLMSG_ERROR = 1, 4, 2
NF_ACCEPT = 1


def _attribute(kind, payload):
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind, attributes, flags=NLM_F_REQUEST, sequence=0):
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", QUEUE) + b"".join(attributes)
    return struct.pack("=IHHII", 16 + len(body), NFNL_SUBSYS_QUEUE << 8 | kind, flags, sequence, 0) + body


class Delayer:
    """Holds every packet of queue QUEUE for `delay` seconds, then accepts it (in arrival order: one
    delay for all). Runs on a thread in the router's namespace: the socket is opened after the thread
    entered it."""

    def __init__(self, delay):
        self.delay = delay
        self.ready = threading.Event()
        self.error = None
        self.held = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.ready.wait(5) or self.error:
            raise RuntimeError(f"the NFQUEUE delayer did not start: {self.error}")

    def _config(self, sock, sequence, attribute):
        sock.send(_message(NFQNL_MSG_CONFIG, [attribute], NLM_F_REQUEST | NLM_F_ACK, sequence))
        reply = sock.recv(65536)
        _, kind = struct.unpack_from("=IH", reply)
        if kind == NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", reply, 16)
            if error != 0:
                raise OSError(-error, f"nfqueue config {sequence}: {os.strerror(-error)}")

    def _run(self):
        try:
            failover.enter(ROUTER)
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            sock.bind((0, 0))
            self._config(sock, 1, _attribute(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET)))
            self._config(sock, 2, _attribute(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META)))
            self._config(sock, 3, _attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("=I", 4096)))
        except Exception as error:  # reported by the constructor
            self.error = error
            self.ready.set()
            return
        self.ready.set()
        pending = []  # (release time, arrival order, packet id)
        order = 0
        while not self.stopped:
            timeout = max(0.0, pending[0][0] - time.monotonic()) if pending else 0.2
            readable, _, _ = select.select([sock], [], [], timeout)
            if readable:
                data = sock.recv(1 << 20)
                offset = 0
                while offset + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, offset)
                    if length < 16:
                        break
                    if kind == NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET:
                        position = offset + 20  # after nlmsghdr and nfgenmsg
                        while position + 4 <= offset + length:
                            size, attribute = struct.unpack_from("=HH", data, position)
                            if size < 4:
                                break
                            if attribute & 0x7FFF == NFQA_PACKET_HDR:
                                (packet,) = struct.unpack_from(">I", data, position + 4)
                                heapq.heappush(pending, (time.monotonic() + self.delay, order, packet))
                                order += 1
                                self.held += 1
                            position += (size + 3) & ~3
                    offset += (length + 3) & ~3
            now = time.monotonic()
            while pending and pending[0][0] <= now:
                _, _, packet = heapq.heappop(pending)
                sock.send(_message(NFQNL_MSG_VERDICT, [_attribute(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet))]))
        sock.close()

    def stop(self):
        self.stopped = True
        self.thread.join(2)


def unbound_config(directory):
    return f"""server:
    interface: 127.0.0.1@{UNBOUND_PORT}
    port: {UNBOUND_PORT}
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "{directory}"
    pidfile: ""
    use-syslog: no
    logfile: "{directory}/unbound.log"
    verbosity: 1
    num-threads: 1
    module-config: "iterator"
    qname-minimisation: no
    do-not-query-localhost: no
    access-control: 127.0.0.0/8 allow
    local-zone: "test." nodefault
    tls-cert-bundle: "{CA}"
remote-control:
    control-enable: no
forward-zone:
    name: "."
    forward-tls-upstream: yes
    forward-addr: {SERVER_IP}@{DOT}#daemon.test
"""


def daemon_config():
    return f"""upstreams:
  - {{dot: "{SERVER_IP}:{DOT}", tls_name: daemon.test}}
ca_file: {CA}
allow_private: true
system_dns: ["127.0.0.9:9"]
listen: "127.0.0.1:18793"
dns_listen: "127.0.0.1:{DAEMON_PORT}"
readiness: {{probe: n0.fo.test}}
"""


def ask_all(port, names, rate):
    """Each name once, RATE a second (open loop), one UDP try with a 5 s timeout: [(latency or None)],
    and what came instead of an answer: {"SERVFAIL after 120 ms" or "no reply": count}."""
    results = [None] * len(names)
    misses = {}
    lock = threading.Lock()

    def one(index, name):
        started = time.monotonic()
        try:
            response = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=5)
            if response.rcode() == dns.rcode.NOERROR and response.answer:
                results[index] = time.monotonic() - started
                return
            outcome = f"{dns.rcode.to_text(response.rcode())}{'' if response.answer else ' (no answer records)'}"
            outcome += f" after ~{round((time.monotonic() - started) * 10) * 100} ms"
        except Exception:
            outcome = "no reply in 5 s"
        with lock:
            misses[outcome] = misses.get(outcome, 0) + 1

    threads = []
    start = time.monotonic()
    for index, name in enumerate(names):
        target = start + index / rate
        while time.monotonic() < target:
            time.sleep(min(0.002, max(0.0, target - time.monotonic())))
        thread = threading.Thread(target=one, args=(index, name), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(6)
    return results, misses


def warm(port, name="n0.fo.test"):
    """Asks `name` (one no round asks: a cached answer would not touch the connection) until it is
    answered."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=3).answer:
                return
        except Exception:
            time.sleep(0.2)
    raise RuntimeError(f"nothing on 127.0.0.1:{port} answered {name} in 30 s")


def tcp_timers():
    """Each forwarder's connections to the upstream as the kernel sees them after a round (`ss -tinp`):
    the retransmission timer (rto), the smoothed RTT and the retransmissions — the timers that set
    a DoT forwarder's tail on this link, measured."""
    out = subprocess.run(["ss", "-tinpH", "state", "established", "dst", SERVER_IP], capture_output=True, text=True).stdout
    lines, rows = out.splitlines(), []
    for head, info in zip(lines[::2], lines[1::2]):
        process = head.split('(("')[1].split('"')[0] if '(("' in head else "?"
        fields = dict(f.split(":", 1) for f in info.split() if ":" in f and f.split(":", 1)[0] in ("rto", "rtt", "retrans", "lost"))
        rows.append(f"{process}: rto {fields.get('rto', '-')} ms, rtt {fields.get('rtt', '-')} ms, retrans {fields.get('retrans', '0/0')}")
    return "; ".join(rows) or "no connection"


def summary(results):
    answered = sorted(r for r in results if r is not None)
    if not answered:
        return len(answered), None, None, None
    pick = lambda q: answered[min(len(answered) - 1, int(q * len(answered)))]  # noqa: E731
    return len(answered), pick(0.5), pick(0.99), answered[-1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--names", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loss", type=float, default=0.1)
    parser.add_argument("--delay-ms", type=float, default=80)
    parser.add_argument("--check", action="store_true")
    arguments = parser.parse_args()
    binary = os.path.abspath(arguments.binary)
    for tool in ("iptables", "unbound"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"lossy: {tool} is needed")
    if not failover.can_make_namespaces("lossy"):
        return
    directory = tempfile.mkdtemp(prefix="lossy-")
    failures = []
    failover.build_network()
    processes, delayer, unbound = [], None, None
    try:
        server = ResolveDaemon(in_namespace(SERVER, binary, directory), failover.server_config(failover.PRIMARY, dot=True), prefix="lossy-server-")
        processes.append(server)
        delayer = Delayer(arguments.delay_ms / 1000)
        # Every forwarded packet, both ways: a tenth dropped, the rest held DELAY before going on.
        failover.router(["-j", "NFQUEUE", "--queue-num", str(QUEUE)])
        failover.router(["-m", "statistic", "--mode", "random", "--probability", str(arguments.loss), "-j", "DROP"])
        print(f"Lossy link: client -> router -> server (veth, no other route), {arguments.loss * 100:.0f} % loss and "
              f"{arguments.delay_ms:.0f} ms delay each way (iptables statistic + an NFQUEUE delayer; no sch_netem here); "
              f"{arguments.names} distinct names at {arguments.rate:.0f}/s, one try each, 5 s client timeout")
        unbound_dir = tempfile.mkdtemp(prefix="lossy-unbound-", dir=directory)
        with open(os.path.join(unbound_dir, "unbound.conf"), "w") as file:
            file.write(unbound_config(unbound_dir))
        unbound = subprocess.Popen(["ip", "netns", "exec", CLIENT, "/usr/sbin/unbound", "-d", "-c", os.path.join(unbound_dir, "unbound.conf")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        daemon = ResolveDaemon(in_namespace(CLIENT, binary, directory), daemon_config(), prefix="lossy-daemon-")
        processes.append(daemon)
        failover.enter(CLIENT)
        try:
            for port in (UNBOUND_PORT, DAEMON_PORT):
                warm(port)  # each forwarder's connection to the upstream is up before the names are asked
        except RuntimeError:
            with open(os.path.join(unbound_dir, "unbound.log")) as log:
                print("unbound's log:\n" + log.read()[-3000:])
            print(f"the delayer held {delayer.held} packets; its error: {delayer.error}")
            raise
        rows = {"unbound": [], "daemon": []}
        for round_number in range(arguments.rounds):
            for label, port in (("unbound", UNBOUND_PORT), ("daemon", DAEMON_PORT)) if round_number % 2 == 0 else (("daemon", DAEMON_PORT), ("unbound", UNBOUND_PORT)):
                # Each forwarder starts its round with its connection up (the daemon closes an
                # upstream connection idle for 10 s, unbound keeps it 60 s: the other's round
                # would otherwise make this one's first answers a handshake on the lossy link).
                warm(port, f"n{failover.NAMES - 1 - round_number * 2 - (label == 'daemon')}.fo.test")
                first = 200 + (round_number * 2 + (label == "daemon")) * arguments.names
                names = [f"n{(first + i) % failover.NAMES}.fo.test" for i in range(arguments.names)]
                results, misses = ask_all(port, names, arguments.rate)
                answered, p50, p99, worst = summary(results)
                rows[label].append((answered, p50, p99, worst))
                ms = lambda value: f"{value * 1000:.0f} ms" if value is not None else "-"  # noqa: E731
                print(f"  round {round_number + 1} {label:>8}: {answered}/{arguments.names} answered; p50 {ms(p50)}, p99 {ms(p99)}, max {ms(worst)}")
                if misses:
                    print("      instead of an answer: " + ", ".join(f"{count} x {what}" for what, count in sorted(misses.items())))
                print(f"      TCP to the upstream now: {tcp_timers()}")
        print(f"  the delayer held {delayer.held} packets")
        p99s = {label: sorted(row[2] for row in rows[label] if row[2] is not None) for label in rows}
        for label in ("unbound", "daemon"):
            if p99s[label]:
                values = p99s[label]
                print(f"  {label:>8}: p99 min / median / max over {len(values)} rounds: "
                      f"{values[0] * 1000:.0f} / {values[len(values) // 2] * 1000:.0f} / {values[-1] * 1000:.0f} ms")
        if arguments.check:
            for index, ours in enumerate(rows["daemon"]):
                if ours[0] < arguments.names:
                    failures.append(f"round {index + 1}: the daemon answered {ours[0]} of {arguments.names}")
            # One round's p99 is its second-worst answer: a single run of three lost segments in a
            # row moves it by a second for either forwarder. The medians over the rounds are compared.
            ours, theirs = p99s["daemon"], p99s["unbound"]
            if ours and theirs and ours[len(ours) // 2] > theirs[len(theirs) // 2]:
                failures.append(f"the daemon's median p99 {ours[len(ours) // 2] * 1000:.0f} ms > unbound's {theirs[len(theirs) // 2] * 1000:.0f} ms")
        if any(row[0] < arguments.names for row in rows["daemon"]) or failures:
            print("  the daemon's log, last lines:\n" + "\n".join("    " + line for line in daemon.text().splitlines()[-30:]))
    finally:
        if unbound:
            unbound.terminate()
            unbound.wait(10)
        for process in processes:
            process.stop()
        if delayer:
            delayer.stop()
        failover.tear_down()
        shutil.rmtree(directory, ignore_errors=True)
    failover.report("lossy", failures)


if __name__ == "__main__":
    main()
