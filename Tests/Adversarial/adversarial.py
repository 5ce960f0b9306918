#!/usr/bin/python3
"""The daemon against hostile clients and failing upstreams: real client libraries (python3-h2's
hyperframe and hpack for raw HTTP/2 frames over TLS, dnspython and raw sockets for the DNS stub)
drive abusive traffic at a running `resolve daemon`, and each case asserts what the daemon did
(status, reset, close, drop), that a legitimate client was answered at once during and after, and
that the daemon's memory and descriptors stayed bounded.

    /usr/bin/python3 Tests/Adversarial/adversarial.py RESOLVE_BINARY [unittest arguments]

Needs Scripts/env/testenv.sh running (BIND on 127.0.0.1:18053/18443, the test CA). Every socket goes
to 127.0.0.1; every load is bounded in count and time.
"""
import json
import os
import random
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import hpack
import hyperframe.frame as hf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Fakes"))
from resolve_daemon import NotifySocket  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CA = os.path.join(ROOT, ".testenv/ca/ca.pem")
BINARY = None
HTTP_PORT, DNS_PORT = 18601, 18602
BIND_DNS = ("127.0.0.1", 18053)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def config(directory, http_port, dns_port, upstream="https://doh-a.test:18443/dns-query", extra="", dns_host="127.0.0.1"):
    return f"""upstreams:
  - {{doh: "{upstream}", bootstrap: [127.0.0.1]}}
ca_file: {CA}
allow_private: true
system_dns: ["127.0.0.1:18055"]
listen: "127.0.0.1:{http_port}"
dns_listen: "{dns_host}:{dns_port}"
tls: {{cert: {ROOT}/.testenv/ca/daemon.test.pem, key: {ROOT}/.testenv/ca/daemon.test.key}}
limits: {{max_body_bytes: 65535, request_timeout: 3, idle_timeout: 20, max_connections: 600}}
readiness: {{probe: www.hd.test, interval: 1}}
{extra}
"""


class Daemon:
    """`resolve daemon` as a process with its own config directory."""

    def __init__(self, http_port=HTTP_PORT, dns_port=DNS_PORT, upstream="https://doh-a.test:18443/dns-query", extra="", prefix=(),
                 dns_host="127.0.0.1"):
        self.directory = tempfile.mkdtemp(prefix="adversarial-")
        self.config = os.path.join(self.directory, "daemon.yaml")
        self.http_port, self.dns_port = http_port, dns_port
        with open(self.config, "w") as file:
            file.write(config(self.directory, http_port, dns_port, upstream, extra, dns_host))
        self.log = open(os.path.join(self.directory, "daemon.log"), "w+")
        # Up when it says READY=1 as it would to systemd: every listener bound (a port held by someone
        # else fails the start instead of passing for ours), the first readiness check done.
        self.notify = NotifySocket(self.directory)
        self.process = subprocess.Popen(list(prefix) + [BINARY, "daemon", "--config", self.config, "--log-level", "info"],
                                        stdout=subprocess.DEVNULL, stderr=self.log, env=self.notify.environment())
        try:
            self.notify.wait_ready(self.process, self.log_text)
        except RuntimeError:
            self.process.kill()
            self.process.wait()
            self.notify.close()
            raise

    def log_text(self):
        self.log.flush()
        with open(self.log.name) as file:
            return file.read()

    def rss_mb(self):
        with open(f"/proc/{self.process.pid}/status") as file:
            for line in file:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0

    def fds(self):
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def stop(self, timeout=15):
        """SIGTERM; returns (exit status, seconds taken)."""
        started = time.time()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = self.process.wait()
        self.notify.close()
        return status, time.time() - started


def tls_context(alpn=("h2",)):
    context = ssl.create_default_context(cafile=CA)
    context.set_alpn_protocols(list(alpn))
    return context


def query_wire(name="www.hd.test", rdtype="A", id=0):
    message = dns.message.make_query(name, rdtype)
    message.id = id
    return message.to_wire()


def dns_param(wire):
    import base64
    return base64.urlsafe_b64encode(wire).rstrip(b"=").decode()


class RawH2:
    """An HTTP/2 client that sends whatever frames it is told to, over TLS."""

    def __init__(self, port=HTTP_PORT, settings=None, timeout=5):
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.socket = tls_context().wrap_socket(raw, server_hostname="localhost")
        assert self.socket.selected_alpn_protocol() == "h2", self.socket.selected_alpn_protocol()
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.buffer = b""
        settings_frame = hf.SettingsFrame(0)
        for key, value in (settings or {}).items():
            settings_frame.settings[key] = value
        self.socket.sendall(PREFACE + settings_frame.serialize())

    def send(self, *frames):
        self.socket.sendall(b"".join(frame.serialize() if hasattr(frame, "serialize") else frame for frame in frames))

    def headers(self, stream_id, fields, end_stream=True, end_headers=True):
        frame = hf.HeadersFrame(stream_id)
        frame.data = self.encoder.encode(fields)
        for flag in (["END_STREAM"] if end_stream else []) + (["END_HEADERS"] if end_headers else []):
            frame.flags.add(flag)
        return frame

    @staticmethod
    def request(path, method="GET", extra=()):
        return [(":method", method), (":scheme", "https"), (":authority", "localhost"), (":path", path)] + list(extra)

    def read_frame(self, timeout=5):
        """The next frame, or None when the connection closed."""
        self.socket.settimeout(timeout)
        while True:
            if len(self.buffer) >= 9:
                frame, length = hf.Frame.parse_frame_header(memoryview(self.buffer[:9]))
                if len(self.buffer) >= 9 + length:
                    frame.parse_body(memoryview(self.buffer[9:9 + length]))
                    self.buffer = self.buffer[9 + length:]
                    if isinstance(frame, (hf.HeadersFrame, hf.ContinuationFrame)):
                        frame.decoded = self.decoder.decode(frame.data) if "END_HEADERS" in frame.flags else None
                    return frame
            try:
                data = self.socket.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                return None
            if not data:
                return None
            self.buffer += data

    def until(self, predicate, timeout=5):
        """Frames until one satisfies `predicate` (returned) or the connection ends (None)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                frame = self.read_frame(max(0.05, deadline - time.time()))
            except socket.timeout:
                return "timeout"
            if frame is None:
                return None
            if isinstance(frame, hf.SettingsFrame) and "ACK" not in frame.flags:
                try:
                    self.send(hf.SettingsFrame(0, flags=["ACK"]))
                except OSError:
                    # A write of ours the peer cut off (an oversized header list it refused) leaves
                    # the TLS object unable to write again (SSL BAD_LENGTH): the connection is over.
                    return None
            if predicate(frame):
                return frame
        return "timeout"

    def response(self, stream_id, timeout=5):
        """(status, body, reset code) of a stream."""
        status, body = None, b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            frame = self.until(lambda f: f.stream_id == stream_id or isinstance(f, hf.GoAwayFrame), deadline - time.time())
            if frame in (None, "timeout"):
                return status, body, frame
            if isinstance(frame, hf.GoAwayFrame):
                return status, body, ("goaway", frame.error_code)
            if isinstance(frame, hf.RstStreamFrame):
                return status, body, ("reset", frame.error_code)
            if isinstance(frame, hf.HeadersFrame):
                status = int(dict(frame.decoded)[":status"])
            if isinstance(frame, hf.DataFrame):
                body += frame.data
            if "END_STREAM" in frame.flags:
                return status, body, None
        return status, body, "timeout"

    def closed(self, timeout=5):
        """Whether the server closes the connection within `timeout` (GOAWAY first is fine)."""
        frame = self.until(lambda f: False, timeout)
        return frame is None

    def close(self):
        try:
            self.socket.close()
        except OSError:
            pass


def legit_doh(port=HTTP_PORT, name="www.hd.test"):
    """A fresh, well-behaved HTTP/2 client: (status, seconds)."""
    started = time.time()
    client = RawH2(port)
    client.send(client.headers(1, RawH2.request("/dns-query?dns=" + dns_param(query_wire(name)))))
    status, body, _ = client.response(1)
    client.close()
    if status == 200:
        assert dns.message.from_wire(body).answer, body
    return status, time.time() - started


def legit_udp(port=DNS_PORT, name="www.hd.test"):
    response = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=3)
    return response.rcode(), response


def closed_by_peer(sockets):
    """How many of `sockets` the server has closed (read EOF or reset, without waiting)."""
    closed = 0
    for sock in sockets:
        sock.settimeout(0.01)
        try:
            if sock.recv(1) == b"":
                closed += 1
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed += 1
    return closed


class AdversarialTestCase(unittest.TestCase):
    daemon = None

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon()
        try:
            # Warm the cache for the legitimate client.
            assert legit_doh()[0] == 200
            cls.baseline_rss = cls.daemon.rss_mb()
        except BaseException:
            cls.daemon.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        status, _ = cls.daemon.stop()
        assert status == 0, f"the daemon exited {status}: {cls.daemon.log_text()[-2000:]}"

    def assertLegitAnswered(self, within=1.0):
        status, seconds = legit_doh(self.daemon.http_port)
        self.assertEqual(status, 200)
        self.assertLess(seconds, within, f"a legitimate DoH query took {seconds:.2f} s")
        rcode, _ = legit_udp(self.daemon.dns_port)
        self.assertEqual(rcode, dns.rcode.NOERROR)

    def setUp(self):
        # Each test's memory bound is on what its own attack added: a test before it may have grown
        # the cache legitimately (3,000 names), which the allocator then keeps.
        self.test_baseline_rss = self.daemon.rss_mb()

    def assertBounded(self, rss_growth_mb=60):
        growth = self.daemon.rss_mb() - self.test_baseline_rss
        self.assertLess(growth, rss_growth_mb, f"RSS grew by {growth:.0f} MB")

    def assertSilentAndHalfHandshakenClosed(self, port, silent_count, held):
        """`silent_count` connections that send nothing and 20 that send half a ClientHello to
        `port`: at least `held` descriptors held while a legitimate client is answered, all closed after request_timeout (3 s)."""
        before = self.daemon.fds()
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(silent_count)]
        half = []
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(20))  # half a ClientHello
            half.append(sock)
        time.sleep(0.5)
        self.assertLegitAnswered()
        self.assertGreater(self.daemon.fds(), before + held)
        time.sleep(4.5)  # request_timeout 3 s
        for sock in silent + half:
            sock.settimeout(0.5)
            try:
                self.assertEqual(sock.recv(100), b"", "closed by the daemon")
            except (ConnectionResetError, socket.timeout) as error:
                self.assertIsInstance(error, ConnectionResetError, "still open after the timeout")
            sock.close()
        self.assertLess(self.daemon.fds(), before + 20)

    def during(self, attack, seconds):
        """Runs `attack` in a thread while a legitimate client checks in every 0.2 s."""
        errors = []
        thread = threading.Thread(target=lambda: errors.append(None) if attack() is None else None, daemon=True)
        thread.start()
        deadline = time.time() + seconds
        worst = 0
        while time.time() < deadline and thread.is_alive():
            status, took = legit_doh(self.daemon.http_port)
            self.assertEqual(status, 200)
            worst = max(worst, took)
            time.sleep(0.2)
        thread.join(seconds)
        self.assertLess(worst, 1.0, f"a legitimate query took {worst:.2f} s during the attack")


class HTTP2Attacks(AdversarialTestCase):
    def test_rapid_reset_is_cut_off_and_legit_clients_carry_on(self):
        def attack():
            for _ in range(5):
                client = RawH2()
                frames = []
                for index in range(1000):
                    stream = 2 * index + 1
                    frames += [client.headers(stream, RawH2.request("/dns-query?dns=" + dns_param(query_wire(f"r{index}.bench.hd.test")))),
                               hf.RstStreamFrame(stream, error_code=8)]
                try:
                    client.send(*frames)
                    client.closed(3)
                except OSError:
                    pass
                client.close()
        self.during(attack, 10)
        self.assertLegitAnswered()
        self.assertBounded()

    def test_made_you_reset_is_cut_off(self):
        """MadeYouReset (CVE-2025-8671; docs/threat-model.md F1): streams the client makes the server
        reset (WINDOW_UPDATE 0 on a stream) count as resets, so the connection ends with
        ENHANCE_YOUR_CALM instead of opening streams without bound; RSS stays bounded."""
        client = RawH2()
        frames = []
        for index in range(2000):
            stream = 2 * index + 1
            frames += [client.headers(stream, RawH2.request("/dns-query?dns=" + dns_param(query_wire(f"m{index}.bench.hd.test"))), end_stream=False),
                       hf.WindowUpdateFrame(stream, window_increment=0)]
        try:
            client.send(*frames)
        except OSError:
            pass
        frame = client.until(lambda f: isinstance(f, hf.GoAwayFrame), 10)
        self.assertIsInstance(frame, hf.GoAwayFrame, "the connection ends")
        self.assertEqual(frame.error_code, 11, "ENHANCE_YOUR_CALM")
        client.close()
        self.assertLegitAnswered()
        self.assertBounded()

    def test_h2spec_closed_stream_and_lower_stream_id_end_the_connection(self):
        """h2spec http2/5.1 #12 and 5.1.1 #2: HEADERS on a closed stream is GOAWAY STREAM_CLOSED; a
        stream identifier below one already used is GOAWAY PROTOCOL_ERROR, naming stream 5 as the last
        one taken (RFC 9113 §5.4.1: the connection closes after a connection error, so an answer not
        ready by then is not sent)."""
        client = RawH2()
        client.send(client.headers(1, RawH2.request("/healthz")))
        status, _, _ = client.response(1)
        self.assertEqual(status, 200)
        client.send(client.headers(1, RawH2.request("/healthz")))
        frame = client.until(lambda f: isinstance(f, (hf.GoAwayFrame, hf.RstStreamFrame)), 5)
        self.assertIsInstance(frame, hf.GoAwayFrame)
        self.assertEqual(frame.error_code, 5, "STREAM_CLOSED")
        client.close()
        client = RawH2()
        client.send(client.headers(5, RawH2.request("/healthz")), client.headers(3, RawH2.request("/healthz")))
        frame = client.until(lambda f: isinstance(f, (hf.GoAwayFrame, hf.RstStreamFrame)), 5)
        self.assertIsInstance(frame, hf.GoAwayFrame)
        self.assertEqual(frame.error_code, 1, "PROTOCOL_ERROR")
        self.assertEqual(frame.last_stream_id, 5)
        client.close()
        self.assertLegitAnswered()

    def test_continuation_flood_is_refused(self):
        client = RawH2()
        first = client.headers(1, RawH2.request("/healthz"), end_headers=False)
        frames = [first] + [hf.ContinuationFrame(1, data=b"") for _ in range(20000)]
        try:
            client.send(*frames)
        except OSError:
            pass
        self.assertTrue(client.closed(5), "the connection must be closed")
        self.assertLegitAnswered()

    def test_hpack_bombs_and_oversized_header_lists_are_refused(self):
        for fields in ([("x-big", "a" * 200_000)], [("x-%d" % i, "v" * 100) for i in range(2000)]):
            client = RawH2()
            try:
                client.send(client.headers(1, RawH2.request("/healthz") + fields))
            except OSError:
                pass
            status, _, reset = client.response(1)
            self.assertNotEqual(status, 200, "an oversized header list is never answered 200")
            client.close()
        # A table-size update to 1 GiB in a header block.
        client = RawH2()
        frame = hf.HeadersFrame(1, flags=["END_HEADERS", "END_STREAM"])
        frame.data = b"\x3f\xe1\xff\xff\xff\x03" + hpack.Encoder().encode(RawH2.request("/healthz"))
        client.send(frame)
        status, _, _ = client.response(1)
        self.assertNotEqual(status, 200)
        client.close()
        self.assertLegitAnswered()

    def test_settings_and_ping_floods_end_the_connection(self):
        for make in (lambda i: hf.PingFrame(0, opaque_data=struct.pack(">Q", i)), lambda i: hf.SettingsFrame(0)):
            client = RawH2()
            try:
                client.send(*[make(i) for i in range(20000)])
            except OSError:
                pass
            self.assertTrue(client.closed(5))
            client.close()
        self.assertLegitAnswered()

    def test_a_client_that_never_reads_holds_bounded_memory(self):
        clients = []
        for _ in range(20):
            client = RawH2(settings={hf.SettingsFrame.INITIAL_WINDOW_SIZE: 0})
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            frames = [client.headers(2 * i + 1, RawH2.request("/dns-query?dns=" + dns_param(query_wire()))) for i in range(90)]
            client.send(*frames)
            clients.append(client)
        time.sleep(1)
        self.assertLegitAnswered()
        self.assertBounded()
        for client in clients:
            client.close()

    def test_streams_beyond_the_concurrency_limit_are_refused(self):
        client = RawH2()
        # 101 requests whose bodies never end: the 101st stream is over the advertised 100.
        frames = [client.headers(2 * i + 1, RawH2.request("/dns-query", "POST", [("content-type", "application/dns-message")]), end_stream=False)
                  for i in range(101)]
        client.send(*frames)
        frame = client.until(lambda f: isinstance(f, (hf.GoAwayFrame, hf.RstStreamFrame)), 5)
        self.assertNotIn(frame, (None, "timeout"), "the 101st stream is refused")
        client.close()
        self.assertLegitAnswered()

    def test_malformed_header_blocks_are_reset_never_answered(self):
        base = [(":method", "GET"), (":scheme", "https"), (":authority", "localhost"), (":path", "/healthz")]
        cases = {
            "no :scheme": [(":method", "GET"), (":path", "/healthz")],
            "duplicate :method": [(":method", "GET")] + base,
            "duplicate :path": base + [(":path", "/readyz")],
            "unknown pseudo-header": base + [(":foo", "bar")],
            "pseudo after regular": [(":method", "GET"), ("accept", "*/*"), (":scheme", "https"), (":path", "/healthz")],
            "upper-case name": base + [("Accept", "*/*")],
            "connection": base + [("connection", "close")],
            "transfer-encoding": base + [("transfer-encoding", "chunked")],
            "te: gzip": base + [("te", "gzip")],
            "CR LF in a value": base + [("x-a", "b\r\nx-b: c")],
            "space in a name": base + [("x a", "b")],
            "method with spaces": [(":method", "G E T"), (":scheme", "https"), (":path", "/healthz")],
        }
        for what, fields in cases.items():
            client = RawH2()
            frame = hf.HeadersFrame(1, flags=["END_HEADERS", "END_STREAM"])
            frame.data = hpack.Encoder().encode(fields)
            client.send(frame)
            status, _, reset = client.response(1)
            self.assertIsNone(status, f"{what}: answered {status}")
            self.assertIn(reset, [("reset", 1), None], f"{what}: {reset}")
            client.close()
        self.assertLegitAnswered()

    def test_data_on_a_closed_stream_ends_the_connection(self):
        client = RawH2()
        client.send(client.headers(1, RawH2.request("/healthz")))
        self.assertEqual(client.response(1)[0], 200)
        client.send(hf.DataFrame(1, data=b"late", flags=["END_STREAM"]))
        frame = client.until(lambda f: isinstance(f, (hf.GoAwayFrame, hf.RstStreamFrame)), 5)
        self.assertNotIn(frame, (None, "timeout"))
        client.close()

    def test_oversized_bodies_get_413_at_once_with_or_without_content_length(self):
        import h2.config
        import h2.connection
        import h2.events
        import h2.exceptions
        for declared in (True, False):
            for size in (70_000, 200_000):
                sock = tls_context().wrap_socket(socket.create_connection(("127.0.0.1", self.daemon.http_port)), server_hostname="localhost")
                connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
                connection.initiate_connection()
                extra = [("content-type", "application/dns-message")] + ([("content-length", str(size))] if declared else [])
                connection.send_headers(1, RawH2.request("/dns-query", "POST", extra))
                sock.sendall(connection.data_to_send())
                started, sent, status = time.time(), 0, None
                sock.settimeout(0.05)
                while status is None and time.time() - started < 5:
                    # A client that respects flow control: as much as the windows allow.
                    room = min(connection.local_flow_control_window(1), size - sent) if sent < size else 0
                    if room > 0:
                        try:
                            chunk = min(room, 16384)
                            connection.send_data(1, b"\0" * chunk, end_stream=sent + chunk == size)
                            sent += chunk
                        except (h2.exceptions.StreamClosedError, h2.exceptions.FlowControlError):
                            pass
                    try:
                        sock.sendall(connection.data_to_send())
                        data = sock.recv(65536)
                    except socket.timeout:
                        continue
                    if not data:
                        break
                    for event in connection.receive_data(data):
                        if isinstance(event, h2.events.ResponseReceived):
                            status = int(dict(event.headers)[b":status"])
                self.assertEqual(status, 413, f"{size} bytes, content-length {declared}, {sent} sent")
                self.assertLess(time.time() - started, 2, "answered at once")
                sock.close()
        self.assertLegitAnswered()

    def test_a_body_slower_than_the_request_timeout_gets_408(self):
        client = RawH2()
        client.send(client.headers(1, RawH2.request("/dns-query", "POST", [("content-type", "application/dns-message")]), end_stream=False))
        started, status = time.time(), None
        # One byte and a PING every half second (the connection is never idle), from this thread
        # only (an SSL socket is not for two writers).
        while status is None and time.time() - started < 8:
            try:
                client.send(hf.DataFrame(1, data=b"\0"), hf.PingFrame(0, opaque_data=b"12345678"))
            except OSError:
                break
            frame = client.until(lambda f: f.stream_id == 1 and isinstance(f, hf.HeadersFrame), 0.5)
            if isinstance(frame, hf.HeadersFrame):
                status = int(dict(frame.decoded)[":status"])
        self.assertEqual(status, 408)
        self.assertLess(time.time() - started, 6, "request_timeout is 3 s")
        client.close()

    def test_unfinished_bodies_on_many_connections_hold_bounded_memory(self):
        clients = []
        for _ in range(40):
            client = RawH2()
            frames = []
            for index in range(50):
                stream = 2 * index + 1
                frames.append(client.headers(stream, RawH2.request("/dns-query", "POST", [("content-type", "application/dns-message")]), end_stream=False))
                frames += [hf.DataFrame(stream, data=b"\0" * 16000)] * 4
            try:
                client.socket.settimeout(2)
                client.send(*frames)
            except OSError:
                pass
            clients.append(client)
        self.assertLegitAnswered()
        self.assertBounded(80)
        for client in clients:
            client.close()
        time.sleep(1)
        self.assertBounded(80)

    def test_a_nagle_client_gets_posts_answered_without_delayed_ack_stalls(self):
        """HEADERS and DATA in separate writes with Nagle on: the DATA waits for the ACK of the
        HEADERS, which a server that sends nothing meanwhile delays by 40 ms."""
        client = RawH2()
        client.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
        client.until(lambda f: isinstance(f, hf.SettingsFrame) and "ACK" in f.flags, 2)
        latencies = []
        for index in range(30):
            stream = 2 * index + 1
            wire = query_wire()
            started = time.perf_counter()
            client.send(client.headers(stream, RawH2.request("/dns-query", "POST", [("content-type", "application/dns-message"),
                                                                                 ("content-length", str(len(wire)))]), end_stream=False))
            client.send(hf.DataFrame(stream, data=wire, flags=["END_STREAM"]))
            status, _, _ = client.response(stream)
            self.assertEqual(status, 200)
            latencies.append((time.perf_counter() - started) * 1000)
        latencies.sort()
        median = latencies[len(latencies) // 2]
        self.assertLess(median, 20, f"median {median:.1f} ms (a delayed-ACK stall is ~40 ms): {latencies}")
        client.close()


class ConnectionAttacks(AdversarialTestCase):
    def test_silent_and_half_handshaken_connections_are_closed_after_the_timeout(self):
        self.assertSilentAndHalfHandshakenClosed(self.daemon.http_port, 300, held=250)

    def test_connections_over_the_limit_are_closed_at_once(self):
        sockets = [socket.create_connection(("127.0.0.1", self.daemon.http_port)) for _ in range(650)]
        time.sleep(0.5)
        self.assertGreaterEqual(closed_by_peer(sockets), 40, "max_connections is 600")
        for sock in sockets:
            sock.close()
        time.sleep(0.5)
        self.assertLegitAnswered()

    def test_http1_pipelining_partial_requests_and_huge_lengths(self):
        context = tls_context(("http/1.1",))
        sock = context.wrap_socket(socket.create_connection(("127.0.0.1", self.daemon.http_port)), server_hostname="localhost")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n" * 200)
        received = b""
        sock.settimeout(5)
        while received.count(b"HTTP/1.1 200") < 200:
            data = sock.recv(65536)
            if not data:
                break
            received += data
        self.assertEqual(received.count(b"HTTP/1.1 200"), 200, "every pipelined request answered")
        sock.close()

        sock = context.wrap_socket(socket.create_connection(("127.0.0.1", self.daemon.http_port)), server_hostname="localhost")
        sock.sendall(b"POST /dns-query HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/dns-message\r\nContent-Length: 10000000000\r\n\r\n")
        sock.settimeout(3)
        self.assertTrue(sock.recv(100).startswith(b"HTTP/1.1 413"), "a declared length over the limit: 413 at once")
        sock.close()

        sock = context.wrap_socket(socket.create_connection(("127.0.0.1", self.daemon.http_port)), server_hostname="localhost")
        sock.sendall(b"POST /dns-query HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/dns-message\r\nContent-Length: 100\r\n\r\nabc")
        sock.settimeout(6)
        self.assertTrue(sock.recv(100).startswith(b"HTTP/1.1 408"), "a body that stops short: 408 after request_timeout")
        sock.close()

        sock = context.wrap_socket(socket.create_connection(("127.0.0.1", self.daemon.http_port)), server_hostname="localhost")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: loc")
        sock.settimeout(6)
        started = time.time()
        try:
            self.assertEqual(sock.recv(100), b"", "partial headers: closed")
        except ConnectionResetError:
            pass
        self.assertLess(time.time() - started, 5)
        sock.close()

    def test_at_the_descriptor_limit_it_refuses_instead_of_spinning(self):
        daemon = Daemon(18613, 18614, prefix=("prlimit", "--nofile=256"))
        try:
            self.assertIn("max_connections lowered", daemon.log_text())
            silent = [socket.create_connection(("127.0.0.1", port)) for port in (18613, 18614) for _ in range(150)]
            time.sleep(0.5)
            ticks = lambda: sum(int(x) for x in open(f"/proc/{daemon.process.pid}/stat").read().split()[13:15])
            before = ticks()
            time.sleep(2)
            self.assertLess((ticks() - before) / 2, 30, "the daemon is not spinning in accept (CPU % over 2 s)")
            self.assertEqual(legit_udp(18614)[0], dns.rcode.NOERROR, "UDP still answers")
            time.sleep(3)  # request_timeout: the silent connections are closed, slots free again
            self.assertEqual(legit_doh(18613)[0], 200)
            for sock in silent:
                sock.close()
            self.assertEqual(daemon.stop()[0], 0)
        finally:
            daemon.stop()

    def test_garbage_connections_do_not_flood_the_log(self):
        before = len(self.daemon.log_text())
        for index in range(300):
            sock = socket.create_connection(("127.0.0.1", self.daemon.http_port))
            sock.sendall(b"GET / HTTP/1.1\r\n\r\n" if index % 2 else os.urandom(64))
            sock.close()
        context = tls_context()
        for _ in range(100):
            sock = context.wrap_socket(socket.create_connection(("127.0.0.1", self.daemon.http_port)), server_hostname="localhost")
            sock.sendall(b"this is not the HTTP/2 preface at all\r\n")
            sock.close()
        time.sleep(0.5)
        self.assertLess(len(self.daemon.log_text()) - before, 2000, "failed connections are counted, not logged at info")
        self.assertLegitAnswered()

    def test_methods_a_path_does_not_take_get_405_with_allow(self):
        for method in ("HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", "PATCH"):
            client = RawH2()
            client.send(client.headers(1, RawH2.request("/dns-query", method)))
            status, _, _ = client.response(1)
            self.assertEqual(status, 405, f"{method} over HTTP/2")
            client.close()
            sock = tls_context(("http/1.1",)).wrap_socket(socket.create_connection(("127.0.0.1", self.daemon.http_port)), server_hostname="localhost")
            sock.sendall(f"{method} /dns-query HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            sock.settimeout(3)
            head = sock.recv(4096)
            self.assertTrue(head.startswith(b"HTTP/1.1 405"), f"{method} over HTTP/1.1: {head[:40]}")
            self.assertIn(b"allow: GET, POST", head.lower().replace(b"allow: get, post", b"allow: GET, POST"))
            sock.close()

    def test_sigterm_with_hostile_clients_still_exits_cleanly_and_saves_the_cache(self):
        daemon = Daemon(18611, 18612, extra=f"cache: {{persist: PERSIST}}".replace("PERSIST", "cache.bin"))
        try:
            self.assertEqual(legit_doh(18611)[0], 200)
            silent = socket.create_connection(("127.0.0.1", 18611))
            client = RawH2(18611)
            client.send(client.headers(1, RawH2.request("/dns-query", "POST", [("content-type", "application/dns-message")]), end_stream=False))
            plain = socket.create_connection(("127.0.0.1", 18612))
            plain.sendall(b"\x00\x40")  # a DNS-over-TCP length prefix, then silence
            time.sleep(0.3)
            status, seconds = daemon.stop(30)
            self.assertEqual(status, 0, daemon.log_text()[-2000:])
            # The unfinished stream gets 408 at request_timeout (3 s); its TLS close then waits at most
            # 1 s for a close_notify this client never sends (NIOSSL's default 5 s made the stop 7.7-8.7 s).
            self.assertLess(seconds, 6, "the drain is bounded")
            self.assertTrue(os.path.exists(os.path.join(daemon.directory, "cache.bin")), "the cache was written")
            silent.close()
            client.close()
            plain.close()
        finally:
            daemon.stop()


class StubAttacks(AdversarialTestCase):
    def udp(self, payload, timeout=1.0):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.settimeout(timeout)
        sock.sendto(payload, ("127.0.0.1", self.daemon.dns_port))
        try:
            return sock.recv(65535)
        except socket.timeout:
            return None
        finally:
            sock.close()

    def test_random_datagrams_never_hurt_it(self):
        generator = random.Random(7)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(3000):
            sock.sendto(bytes(generator.getrandbits(8) for _ in range(generator.randint(0, 600))), ("127.0.0.1", self.daemon.dns_port))
        sock.close()
        self.assertLegitAnswered()
        self.assertBounded()

    def test_malformed_queries_get_formerr_responses_get_nothing(self):
        header = lambda flags=0x0100, qd=1, an=0, ns=0, ar=0, id=0x4242: struct.pack(">HHHHHH", id, flags, qd, an, ns, ar)
        question = b"\x03www\x02hd\x04test\x00\x00\x01\x00\x01"
        self.assertIsNone(self.udp(b""))
        self.assertIsNone(self.udp(b"\x12"))
        self.assertIsNone(self.udp(header()[:11]))
        self.assertIsNone(self.udp(header(flags=0x8180) + question), "a response is never answered")
        for what, payload in {"QDCOUNT 0": header(qd=0), "QDCOUNT 2": header(qd=2) + question * 2,
                              "compression loop": header() + b"\xc0\x0c\x00\x01\x00\x01",
                              "pointer out of range": header() + b"\xc0\xff\x00\x01\x00\x01",
                              "trailing garbage": header() + question + b"\xde\xad",
                              "ARCOUNT without a record": header(ar=1) + question,
                              "two OPTs": header(ar=2) + question + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00" * 2}.items():
            reply = self.udp(payload)
            self.assertIsNotNone(reply, what)
            self.assertEqual(struct.unpack(">H", reply[:2])[0], 0x4242, what)
            self.assertEqual(reply[3] & 0x0f, 1, f"{what}: FORMERR")
        for opcode in (1, 2, 4, 5):
            reply = self.udp(header(flags=opcode << 11) + question)
            self.assertEqual(reply[3] & 0x0f, 4, f"opcode {opcode}: NOTIMP")

    def test_edns_is_answered_with_opt_badvers_and_sane_sizes(self):
        for size in (0, 1, 512, 4096, 65535):
            query = dns.message.make_query("www.hd.test", "A", use_edns=0, payload=size)
            response = dns.query.udp(query, "127.0.0.1", port=self.daemon.dns_port, timeout=3)
            self.assertEqual(response.rcode(), dns.rcode.NOERROR)
            self.assertEqual(response.edns, 0, f"EDNS {size}: an OPT record in the answer")
        # EDNS version 1 (dnspython cannot say 1, which it reads as True): written out.
        wire = struct.pack(">HHHHHH", 0x5151, 0x0100, 1, 0, 0, 1) + b"\x03www\x02hd\x04test\x00\x00\x01\x00\x01" \
            + b"\x00\x00\x29\x04\xd0\x00\x01\x00\x00\x00\x00"
        response = dns.message.from_wire(self.udp(wire))
        self.assertEqual(response.rcode(), dns.rcode.BADVERS)
        self.assertEqual(response.edns, 0, "BADVERS says which version it speaks")

    def test_the_question_keeps_its_letter_case(self):
        query = dns.message.make_query("WwW.Hd.TeSt", "A")
        wire = dns.query.udp(query, "127.0.0.1", port=self.daemon.dns_port, timeout=3).to_wire()
        self.assertIn(b"\x03WwW\x02Hd\x04TeSt\x00", wire)

    def test_no_answer_is_larger_than_binds_for_the_same_query(self):
        for name, rdtype, edns in (("big.hd.test", "A", 4096), ("big.hd.test", "A", 1232), ("big.hd.test", "A", None),
                                   ("www.hd.test", "A", None), ("www.hd.test", "TXT", 4096), ("hd.test", "MX", None)):
            kwargs = {"use_edns": 0, "payload": edns} if edns else {}
            query = dns.message.make_query(name, rdtype, **kwargs)
            ours = dns.query.udp(query, "127.0.0.1", port=self.daemon.dns_port, timeout=3)
            bind = dns.query.udp(query, BIND_DNS[0], port=BIND_DNS[1], timeout=3)
            ours_size, bind_size = len(ours.to_wire()), len(bind.to_wire())
            self.assertLessEqual(ours_size, max(bind_size, 512 if edns is None else min(edns, 1232)),
                                 f"{name} {rdtype} EDNS {edns}: ours {ours_size} B, BIND {bind_size} B")
            self.assertLessEqual(ours_size, 1232)

    def test_tcp_clients_that_never_read_hold_bounded_memory(self):
        query = query_wire("big.hd.test", id=7)
        framed = struct.pack(">H", len(query)) + query
        socks = []
        for _ in range(2):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", self.daemon.dns_port))
            sock.settimeout(5)
            sent = 0
            try:
                while sent < 100_000:
                    sock.sendall(framed * 1000)
                    sent += 1000
            except (socket.timeout, OSError):
                pass  # the daemon stopped reading: what backpressure looks like
            socks.append(sock)
        time.sleep(0.5)
        self.assertLegitAnswered()
        self.assertBounded(60)
        for sock in socks:
            sock.close()

    def test_a_burst_of_uncached_names_does_not_flood_the_upstream_with_connections(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for index in range(3000):
            sock.sendto(query_wire(f"burst{index}.bench.hd.test", id=index), ("127.0.0.1", self.daemon.dns_port))
        time.sleep(2)
        sock.close()
        listing = subprocess.run(["ss", "-tnpH", "state", "established", "( dport = :18443 )"], capture_output=True, text=True).stdout
        connections = sum(1 for line in listing.splitlines() if f"pid={self.daemon.process.pid}," in line)
        self.assertLessEqual(connections, 16, "at most 16 connections to one upstream")
        self.assertGreaterEqual(connections, 1)
        self.assertLegitAnswered()
        self.assertBounded(80)

    def test_tcp_prefix_then_silence_and_trickles_are_closed(self):
        started = time.time()
        silent = socket.create_connection(("127.0.0.1", self.daemon.dns_port))
        silent.sendall(b"\xff\xff")
        trickle = socket.create_connection(("127.0.0.1", self.daemon.dns_port))
        query = query_wire()
        framed = struct.pack(">H", len(query)) + query
        closed = {}
        trickle.settimeout(0.1)
        index = 0
        while time.time() - started < 14 and len(closed) < 2:
            if "trickle" not in closed and index < len(framed):
                try:
                    trickle.sendall(framed[index:index + 1])
                    index += 1
                except OSError:
                    closed["trickle"] = time.time() - started
            for name, sock in (("silent", silent), ("trickle", trickle)):
                if name in closed:
                    continue
                sock.settimeout(0.01)
                try:
                    if sock.recv(100) == b"":
                        closed[name] = time.time() - started
                except socket.timeout:
                    pass
                except ConnectionResetError:
                    closed[name] = time.time() - started
            time.sleep(0.4)
        self.assertIn("silent", closed)
        self.assertIn("trickle", closed, "a query trickled over more than 10 s is dropped")
        self.assertLess(closed["silent"], 13)
        silent.close()
        trickle.close()


class UpstreamFaults(unittest.TestCase):
    """A daemon whose only upstream is tests/fake_doh.py, which can die or misbehave."""

    port = 18620

    def start_upstream(self, mode="ok", ttl=2):
        self.upstream = subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "Tests/Adversarial/fake_doh.py"), "--port", str(self.port),
                                          "--cert", os.path.join(ROOT, ".testenv/ca/doh-a.test.pem"),
                                          "--key", os.path.join(ROOT, ".testenv/ca/doh-a.test.key"), "--mode", mode, "--ttl", str(ttl)],
                                         stdout=subprocess.PIPE)
        self.assertEqual(self.upstream.stdout.readline().strip(), b"ready")

    def tearDown(self):
        if getattr(self, "upstream", None) and self.upstream.poll() is None:
            self.upstream.kill()
            self.upstream.wait()

    def get(self, port, path):
        """GET `path` from the daemon's HTTP API (HTTPS, the test CA): status and body."""
        import http.client
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=tls_context(("http/1.1",)), timeout=5)
        connection.request("GET", path)
        response = connection.getresponse()
        status, body = response.status, response.read().decode()
        connection.close()
        return status, body

    def readyz(self, port):
        return self.get(port, "/readyz")[0]

    def metric(self, port, name):
        """The sum of the Prometheus samples whose line starts with `name`."""
        text = self.get(port, "/metrics")[1]
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))

    def test_a_burst_against_a_stalled_upstream_stops_at_1024_lookups(self):
        # Every lookup waits on the upstream, so the stub's budget fills: past 1,024 lookups at once
        # new queries are dropped and counted, and memory stays bounded (4,096 allowed grew it by
        # up to 100 MB for a 3,000-name burst).
        self.start_upstream(mode="slow")
        daemon = Daemon(18631, 18632, upstream=f"https://doh-a.test:{self.port}/dns-query", extra="timeout: 2")
        try:
            baseline = daemon.rss_mb()
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            for index in range(3000):
                sock.sendto(query_wire(f"stall{index}.fault.test", id=index), ("127.0.0.1", 18632))
            sock.close()
            time.sleep(0.5)
            received = self.metric(18631, 'httpdns_dns_stub_queries_total{transport="udp"}')
            dropped = self.metric(18631, 'httpdns_dns_stub_dropped_total{transport="udp"}')
            self.assertGreater(received, 1100, "the burst reached the stub past its budget")
            self.assertEqual(dropped, received - 1024, f"{received:.0f} received, {dropped:.0f} dropped")
            print(f"RSS growth {daemon.rss_mb() - baseline:.1f} MB", file=sys.stderr); self.assertLess(daemon.rss_mb() - baseline, 60, "memory stays bounded")
            self.assertEqual(daemon.stop()[0], 0)
        finally:
            daemon.stop()

    def test_the_only_upstream_dies_after_the_cache_is_warm(self):
        self.start_upstream(ttl=2)
        daemon = Daemon(18621, 18622, upstream=f"https://doh-a.test:{self.port}/dns-query",
                        extra="cache: {min_ttl: 0, stale_window: 6, stale_answer_delay: 0.2}\ntimeout: 1")
        try:
            rcode, response = legit_udp(18622, "warm.fault.test")
            self.assertEqual(rcode, dns.rcode.NOERROR)
            self.assertEqual(self.readyz(18621), 200)
            self.upstream.kill()
            self.upstream.wait()
            time.sleep(3)  # past the 2 s TTL
            rcode, response = legit_udp(18622, "warm.fault.test")
            self.assertEqual(rcode, dns.rcode.NOERROR, "a stale answer within the window")
            self.assertTrue(1 <= response.answer[0].ttl <= 30, f"a stale answer's TTL is at most 30 s (RFC 8767): {response.answer[0].ttl}")
            deadline = time.time() + 6
            while time.time() < deadline and self.readyz(18621) != 503:
                time.sleep(0.3)
            self.assertEqual(self.readyz(18621), 503, "readiness follows the upstream, not the cache")
            time.sleep(6)  # past the stale window
            rcode, _ = legit_udp(18622, "warm.fault.test")
            self.assertEqual(rcode, dns.rcode.SERVFAIL)
            self.assertEqual(daemon.stop()[0], 0)
        finally:
            daemon.stop()

    def test_garbage_slow_and_huge_upstreams_give_servfail_within_the_budget(self):
        self.start_upstream()
        daemon = Daemon(18623, 18624, upstream=f"https://doh-a.test:{self.port}/dns-query", extra="timeout: 2")
        try:
            import urllib.request
            for mode in ("garbage", "status500", "huge", "slow"):
                # The fake presents doh-a.test's certificate (its SANs include 127.0.0.1), checked with the test CA.
                urllib.request.urlopen(urllib.request.Request(f"https://127.0.0.1:{self.port}/mode", data=mode.encode()),
                                       context=tls_context(("http/1.1",))).read()
                started = time.time()
                rcode, _ = legit_udp(18624, f"{mode}.fault.test")
                self.assertEqual(rcode, dns.rcode.SERVFAIL, mode)
                self.assertLess(time.time() - started, 2.8, f"{mode}: within the 2 s budget")
            self.assertLess(daemon.rss_mb(), 200)
            self.assertEqual(daemon.stop()[0], 0)
        finally:
            daemon.stop()

    def test_an_answer_of_4000_addresses_is_served_bounded_and_the_daemon_lives(self):
        # docs/threat-model.md F5: the re-encoded answer outgrew 65,535 bytes and the stub's TCP length trapped
        # (SIGILL). Now the records that do not fit are left out, over TCP and DoH alike.
        self.start_upstream(mode="big")
        daemon = Daemon(18635, 18636, upstream=f"https://doh-a.test:{self.port}/dns-query", extra="timeout: 3")
        try:
            name = ".".join(["a" * 60] * 3) + ".big.test"
            query = dns.message.make_query(name, "A", use_edns=0, payload=1232)
            udp = dns.query.udp(query, "127.0.0.1", port=18636, timeout=5)
            self.assertTrue(udp.flags & dns.flags.TC, f"over UDP: TC, ask again over TCP: {udp}")
            tcp = dns.query.tcp(query, "127.0.0.1", port=18636, timeout=5)
            self.assertEqual(tcp.rcode(), dns.rcode.NOERROR)
            addresses = sum(len(rrset) for rrset in tcp.answer if rrset.rdtype == dns.rdatatype.A)
            self.assertGreater(addresses, 3000, "as many as fit")
            self.assertLessEqual(len(tcp.to_wire()), 65535)
            self.assertIsNone(daemon.process.poll(), "the daemon lives")
            status, _ = self.get(18635, f"/v1/resolve?host={name}&type=a")
            self.assertEqual(status, 200)
            self.assertEqual(legit_udp(18636, name)[0], dns.rcode.NOERROR, "and keeps answering")
            self.assertEqual(daemon.stop()[0], 0)
        finally:
            daemon.stop()

    def test_sighup_under_load_and_an_unwritable_cache(self):
        readonly = tempfile.mkdtemp(prefix="adversarial-ro-")
        os.chmod(readonly, 0o555)
        daemon = Daemon(18625, 18626, extra=f"cache: {{persist: {readonly}/sub/cache.bin, persist_interval: 1}}")
        try:
            stop = threading.Event()
            failures = []

            def load():
                index = 0
                while not stop.is_set():
                    try:
                        rcode, _ = legit_udp(18626, f"h{index % 50}.bench.hd.test")
                        if rcode != dns.rcode.NOERROR:
                            failures.append(rcode)
                    except Exception as error:  # a timeout is a failure
                        failures.append(error)
                    index += 1
            threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
            for thread in threads:
                thread.start()
            for _ in range(5):
                daemon.process.send_signal(signal.SIGHUP)
                time.sleep(0.4)
            stop.set()
            for thread in threads:
                thread.join()
            self.assertEqual(failures, [])
            self.assertIn("configuration reloaded", daemon.log_text())
            self.assertIn("cache not saved", daemon.log_text())
            status, _ = daemon.stop()
            self.assertEqual(status, 0)
        finally:
            daemon.stop()
            os.chmod(readonly, 0o755)

    def test_readiness_counts_stub_traffic_without_watched_hosts(self):
        daemon = Daemon(18627, 18628)
        try:
            rcode, _ = legit_udp(18628, "fresh.bench.hd.test")
            self.assertEqual(rcode, dns.rcode.NOERROR)
            self.assertEqual(self.readyz(18627), 200)
        finally:
            daemon.stop()

    def test_a_ca_file_that_is_not_pem_is_not_reloaded(self):
        daemon = Daemon(18629, 18630)
        try:
            with open(daemon.config) as file:
                text = file.read()
            with open(daemon.config, "w") as file:
                file.write(text.replace(f"ca_file: {CA}", "ca_file: /etc/hostname"))
            daemon.process.send_signal(signal.SIGHUP)
            deadline = time.time() + 5
            while "NOT reloaded" not in daemon.log_text() and time.time() < deadline:
                time.sleep(0.1)
            self.assertIn("NOT reloaded", daemon.log_text())
            self.assertIn("holds no PEM certificate", daemon.log_text())
            rcode, _ = legit_udp(18630, "after-reload.bench.hd.test")
            self.assertEqual(rcode, dns.rcode.NOERROR, "the old configuration keeps serving")
        finally:
            daemon.stop()


PROXY_HTTP, PROXY_DNS, PROXY_PORT = 18670, 18671, 18672
ORIGIN = "origin.hd.test:18480"


def proxy_tunnel(port=PROXY_PORT, target=ORIGIN, timeout=5):
    """A CONNECT through the proxy: the socket after `200`, or raises."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the answer")
        head += chunk
    if not head.startswith(b"HTTP/1.1 200"):
        sock.close()
        raise ConnectionError(head.split(b"\r\n")[0].decode())
    return sock


def legit_proxy(port=PROXY_PORT):
    """An HTTPS GET through a tunnel, TLS verified end to end: (body, seconds)."""
    started = time.time()
    sock = proxy_tunnel(port)
    context = ssl.create_default_context(cafile=CA)
    tls = context.wrap_socket(sock, server_hostname="origin.hd.test")
    tls.sendall(b"GET /echo HTTP/1.1\r\nHost: origin.hd.test\r\nConnection: close\r\n\r\n")
    body = b""
    while True:
        chunk = tls.recv(65536)
        if not chunk:
            break
        body += chunk
    tls.close()
    return body, time.time() - started


class ProxyAttacks(unittest.TestCase):
    """The forward proxy (`proxy_listen`) against slow, silent, flooding and never-reading clients."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(PROXY_HTTP, PROXY_DNS, extra=f"""proxy_listen: "127.0.0.1:{PROXY_PORT}"
proxy: {{connect_ports: [18480, 18481], allow_private_destinations: true, limits: {{max_connections: 400, idle_timeout: 30}}}}""")
        body, _ = legit_proxy()
        assert b"sni=origin.hd.test" in body, body
        cls.baseline_rss = cls.daemon.rss_mb()

    @classmethod
    def tearDownClass(cls):
        status, _ = cls.daemon.stop()
        assert status == 0, f"the daemon exited {status}: {cls.daemon.log_text()[-2000:]}"

    def setUp(self):
        self.test_baseline_rss = self.daemon.rss_mb()

    def assertLegitTunnel(self, within=1.5):
        body, seconds = legit_proxy()
        self.assertIn(b"sni=origin.hd.test", body)
        self.assertLess(seconds, within, f"a legitimate tunnel took {seconds:.2f} s")

    def test_silent_and_trickling_clients_are_closed_after_the_request_timeout(self):
        before = self.daemon.fds()
        silent = [socket.create_connection(("127.0.0.1", PROXY_PORT)) for _ in range(150)]
        trickling = [socket.create_connection(("127.0.0.1", PROXY_PORT)) for _ in range(100)]
        request = b"CONNECT origin.hd.test:18480 HTTP/1.1\r\nHost: x\r\n"
        for index in range(8):  # one byte each per 0.5 s: a head that never completes
            for sock in trickling:
                try:
                    sock.send(request[index:index + 1])
                except OSError:
                    pass
            if index == 2:
                self.assertLegitTunnel()
            time.sleep(0.5)
        time.sleep(0.5)  # request_timeout is 3 s
        closed = 0
        for sock in silent + trickling:
            sock.settimeout(0.5)
            try:
                if sock.recv(100) == b"":
                    closed += 1
            except ConnectionResetError:
                closed += 1
            except socket.timeout:
                pass
            sock.close()
        self.assertEqual(closed, 250, "every silent or trickling client is closed")
        time.sleep(0.3)
        self.assertLess(self.daemon.fds(), before + 20)
        self.assertLegitTunnel()

    def test_connections_over_the_limit_are_closed_at_once(self):
        sockets = [socket.create_connection(("127.0.0.1", PROXY_PORT)) for _ in range(450)]
        time.sleep(0.5)
        self.assertGreaterEqual(closed_by_peer(sockets), 40, "proxy max_connections is 400")
        for sock in sockets:
            sock.close()
        time.sleep(0.5)
        self.assertLegitTunnel()

    def test_a_flood_of_tunnels_to_a_dead_origin_gets_502s_and_costs_nothing(self):
        def attempt(_):
            try:
                proxy_tunnel(target="dead.hd.test:18480")
                return "opened"
            except ConnectionError as error:
                return str(error)
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(50) as pool:
            results = list(pool.map(attempt, range(500)))
        self.assertEqual(sum(1 for result in results if result.startswith("HTTP/1.1 502")), 500, set(results))
        self.assertLegitTunnel()
        self.assertLess(self.daemon.rss_mb() - self.test_baseline_rss, 40)

    def test_a_client_that_never_reads_a_large_download_holds_bounded_memory(self):
        # 64 MiB requested through tunnels whose clients never read: backpressure must hold the
        # origin, not the proxy's memory.
        held = []
        for _ in range(4):
            tls = ssl.create_default_context(cafile=CA).wrap_socket(proxy_tunnel(), server_hostname="origin.hd.test")
            tls.sendall(b"GET /big-fast HTTP/1.1\r\nHost: origin.hd.test\r\n\r\n")
            held.append(tls)
        time.sleep(3)
        growth = self.daemon.rss_mb() - self.test_baseline_rss
        self.assertLess(growth, 40, f"RSS grew by {growth:.0f} MB with 4 x 64 MiB unread")
        self.assertLegitTunnel()
        for tls in held:
            tls.close()

    def test_out_of_descriptors_the_relay_waits_instead_of_spinning(self):
        # 256 descriptors, max_connections 1,000: accept runs out of descriptors before the limit.
        port = PROXY_PORT + 10
        daemon = Daemon(18673, 18674, prefix=("prlimit", "--nofile=256"), extra=f"""proxy_listen: "127.0.0.1:{port}"
proxy: {{connect_ports: [18480], allow_private_destinations: true, limits: {{max_connections: 1000}}}}""")
        try:
            silent = []
            for _ in range(300):
                try:
                    silent.append(socket.create_connection(("127.0.0.1", port), timeout=2))
                except OSError:
                    break
            time.sleep(0.5)
            ticks = lambda: sum(int(x) for x in open(f"/proc/{daemon.process.pid}/stat").read().split()[13:15])
            before = ticks()
            time.sleep(2)
            self.assertLess((ticks() - before) / 2, 30, "the relay is not spinning in accept (CPU % over 2 s)")
            for sock in silent:
                sock.close()
            time.sleep(0.5)
            body, _ = legit_proxy(port)
            self.assertIn(b"sni=origin.hd.test", body, "descriptors back: tunnels again")
            self.assertEqual(daemon.stop()[0], 0)
        finally:
            daemon.stop()

    def test_sigterm_stops_accepting_and_lets_an_open_tunnel_finish(self):
        port = PROXY_PORT + 11
        daemon = Daemon(18675, 18676, extra=f"""proxy_listen: "127.0.0.1:{port}"
proxy: {{connect_ports: [18480], allow_private_destinations: true}}""")
        try:
            tls = ssl.create_default_context(cafile=CA).wrap_socket(proxy_tunnel(port), server_hostname="origin.hd.test")
            daemon.process.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            with self.assertRaises(OSError, msg="no new connections once SIGTERM arrived"):
                socket.create_connection(("127.0.0.1", port), timeout=1).recv(1)
            tls.sendall(b"GET /echo HTTP/1.1\r\nHost: origin.hd.test\r\nConnection: close\r\n\r\n")
            body = b""
            while chunk := tls.recv(65536):
                body += chunk
            self.assertIn(b"sni=origin.hd.test", body, "the open tunnel carries its exchange during the drain")
            tls.close()
            self.assertEqual(daemon.process.wait(timeout=10), 0)
        finally:
            daemon.stop()

    def test_bytes_sent_before_the_200_reach_the_origin_first(self):
        # A client that does not wait for the 200: what follows its head in the same write is the
        # origin's first bytes. Plain HTTP to the TLS origin makes nginx say so in its own words.
        sock = socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=5)
        sock.sendall(f"CONNECT {ORIGIN} HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n".encode()
                     + b"GET /echo HTTP/1.1\r\nHost: origin.hd.test\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        sock.close()
        self.assertTrue(answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\n"), answer[:80])
        self.assertIn(b"The plain HTTP request was sent to HTTPS port", answer, "the early bytes reached nginx, in order")

    def test_random_bytes_and_absurd_requests_get_a_status_or_a_close(self):
        generator = random.Random(7)
        payloads = [bytes(generator.getrandbits(8) for _ in range(generator.randint(1, 300))) for _ in range(150)]
        payloads += [
            b"CONNECT " + b"a" * 10000 + b":443 HTTP/1.1\r\n\r\n",
            b"CONNECT [::1 HTTP/1.1\r\n\r\n",
            b"CONNECT origin.hd.test:99999 HTTP/1.1\r\n\r\n",
            b"CONNECT origin.hd.test:18480 HTTP/9.9\r\n\r\n",
            b"GET http://origin.hd.test:18481/ok HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
            b"GET http://origin.hd.test:18481/ok HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"\r\n" * 5000,
        ]
        for payload in payloads:
            sock = socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=5)
            try:
                sock.sendall(payload)
                answer = sock.recv(100)
            except (ConnectionResetError, BrokenPipeError, socket.timeout):
                answer = b""
            sock.close()
            self.assertTrue(answer == b"" or answer.startswith(b"HTTP/1.1 4") or answer.startswith(b"HTTP/1.1 5"), answer)
        self.assertIsNone(self.daemon.process.poll(), "the daemon is still running")
        self.assertLegitTunnel()


DOT_PORT = 18646


class DoTAttacks(AdversarialTestCase):
    """The DNS-over-TLS listener (dot_listen) against silent, half-handshaken, never-reading and
    garbage clients: each is closed or held at a bounded cost while a legitimate DoT client, and the
    DoH and UDP ones, are answered."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(http_port=18644, dns_port=18645, extra=f'dot_listen: "127.0.0.1:{DOT_PORT}"')
        try:
            assert legit_doh(18644)[0] == 200
        except BaseException:
            cls.daemon.stop()
            raise

    def legit_dot(self):
        context = ssl.create_default_context(cafile=CA)
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", DOT_PORT), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                wire = query_wire(id=0x4242)
                tls.sendall(struct.pack(">H", len(wire)) + wire)
                size = struct.unpack(">H", tls.recv(2))[0]
                answer = b""
                while len(answer) < size:
                    answer += tls.recv(size - len(answer))
        return dns.message.from_wire(answer), time.monotonic() - start

    def assertLegitAnswered(self, within=1.0):
        super().assertLegitAnswered(within)
        message, seconds = self.legit_dot()
        self.assertEqual(message.id, 0x4242)
        self.assertEqual(message.rcode(), dns.rcode.NOERROR)
        self.assertLess(seconds, within, f"a legitimate DoT query took {seconds:.2f} s")

    def test_silent_and_half_handshaken_dot_connections_are_closed_after_the_timeout(self):
        self.assertSilentAndHalfHandshakenClosed(DOT_PORT, 100, held=100)

    def test_a_dot_client_that_never_reads_holds_bounded_memory(self):
        context = ssl.create_default_context(cafile=CA)
        query = query_wire("big.hd.test", id=7)
        framed = struct.pack(">H", len(query)) + query
        socks = []
        for _ in range(2):
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            raw.connect(("127.0.0.1", DOT_PORT))
            tls = context.wrap_socket(raw, server_hostname="localhost")
            tls.settimeout(5)
            sent = 0
            try:
                while sent < 50_000:
                    tls.sendall(framed * 500)
                    sent += 500
            except (socket.timeout, OSError):
                pass  # the daemon stopped reading: what backpressure looks like
            socks.append(tls)
        # What the kernel's buffers took (a loopback socket takes megabytes) is answered until the
        # answers fill the other way; then the connections are not read. That burst can hold an
        # event loop for most of a second in a debug build: wait for it, then every client must be
        # answered at once while the two connections stay open and unread.
        deadline = time.time() + 5
        while legit_doh(self.daemon.http_port)[1] >= 0.2 and time.time() < deadline:
            time.sleep(0.2)
        self.assertLegitAnswered()
        self.assertBounded(60)
        for sock in socks:
            sock.close()

    def test_garbage_on_the_dot_port_is_closed_and_hurts_nobody(self):
        generator = random.Random(11)
        for _ in range(50):
            sock = socket.create_connection(("127.0.0.1", DOT_PORT), timeout=5)
            try:
                sock.sendall(bytes(generator.getrandbits(8) for _ in range(generator.randint(1, 3000))))
                while sock.recv(4096):
                    pass
            except (ConnectionResetError, BrokenPipeError, socket.timeout):
                pass
            sock.close()
        self.assertIsNone(self.daemon.process.poll(), "the daemon is still running")
        self.assertLegitAnswered()


RATE_RECORDS = 'records: ["www.rl.test A 198.18.7.7"]'


def rate_limit(rate, burst, ipv4_prefix, more=""):
    return f"rate_limit: {{queries_per_second: {rate}, burst: {burst}, ipv4_prefix: {ipv4_prefix}{more}}}\n{RATE_RECORDS}"


def ask_udp(source, port, name="www.rl.test", timeout=2.0):
    """One UDP question from `source` (any 127/8 address is ours on lo): the response, or None."""
    try:
        return dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=timeout, source=source)
    except dns.exception.Timeout:
        return None


def ask_tcp(source, port, name="www.rl.test", timeout=3.0):
    return dns.query.tcp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=timeout, source=source)


def doh_from(source, port, name="www.rl.test"):
    """A DoH GET over HTTP/1.1 and TLS (the test CA) from `source`: (HTTP status, DNS message or None)."""
    import http.client
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=tls_context(("http/1.1",)), timeout=5,
                                             source_address=(source, 0))
    try:
        connection.request("GET", "/dns-query?dns=" + dns_param(query_wire(name)), headers={"Accept": "application/dns-message"})
        response = connection.getresponse()
        body = response.read()
        return response.status, dns.message.from_wire(body) if response.status == 200 else None
    finally:
        connection.close()


def burst_udp(source, port, count, name="www.rl.test", wait=1.5):
    """`count` UDP questions from `source` sent at once, then their responses for `wait` seconds:
    one entry per question, by ID: the response, or None for no reply."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((source, 0))
    for index in range(count):
        sock.sendto(query_wire(name, id=index), ("127.0.0.1", port))
    responses = [None] * count
    deadline = time.time() + wait
    while time.time() < deadline and None in responses:
        sock.settimeout(max(0.01, deadline - time.time()))
        try:
            message = dns.message.from_wire(sock.recv(4096))
        except socket.timeout:
            break
        if message.id < count:
            responses[message.id] = message
    sock.close()
    return responses


def is_limited(response):
    """What a rate limit may answer: nothing, REFUSED, or a TC=1 reply without answers (a "slip")."""
    return (response is None or response.rcode() == dns.rcode.REFUSED
            or (response.flags & dns.flags.TC and not response.answer))


def is_slip(response):
    return response is not None and bool(response.flags & dns.flags.TC) and not response.answer and response.rcode() == dns.rcode.NOERROR


def has_address(message, address="198.18.7.7"):
    return message is not None and any(rdata.to_text() == address for rrset in message.answer for rdata in rrset)


def cpu_seconds(pid):
    """The process's user + system CPU time (/proc/PID/stat utime and stime)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def forged_udp(sources, port, wire, window=128, stall=0.3, budget=40.0):
    """`wire` to 127.0.0.1:`port` once from each of `sources` (IPv4 addresses as 4 bytes), forged with
    a raw socket (IP_HDRINCL), as an off-path spoofer sends them. The daemon's answers (to addresses
    no socket holds) are read off loopback by a raw UDP socket, only to pace the sender: at most
    `window` questions unanswered at once, so the daemon's socket buffer never drops one (a question
    with no answer for `stall` seconds is given up). Returns (sent, {rcode or "TC": count}, seconds)."""
    import select
    sender = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sniffer = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    sniffer.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE (root)
    sniffer.setblocking(False)
    destination = socket.inet_aton("127.0.0.1")
    outcomes = {}
    sent = answered = given_up = 0
    started = time.time()
    last_progress = started

    def drain():
        nonlocal answered, last_progress
        while True:
            try:
                packet = sniffer.recv(2048)
            except BlockingIOError:
                return
            header = (packet[0] & 15) * 4
            if packet[12:16] != destination or struct.unpack(">H", packet[header:header + 2])[0] != port:
                continue  # not the daemon's stub answering (our own questions, other servers)
            flags = packet[header + 10:header + 12]
            key = "TC" if flags[0] & 0x02 else flags[1] & 15
            outcomes[key] = outcomes.get(key, 0) + 1
            answered += 1
            last_progress = time.time()

    for source in sources:
        while sent - answered - given_up >= window:
            select.select([sniffer], [], [], stall)
            drain()
            if time.time() - last_progress > stall:
                given_up = sent - answered
                last_progress = time.time()
        if time.time() - started > budget:
            break
        udp_length = 8 + len(wire)
        packet = struct.pack("!BBHHHBBH4s4sHHHH", 0x45, 0, 20 + udp_length, 0, 0, 64, 17, 0, source, destination,
                             20000 + sent % 40000, port, udp_length, 0) + wire
        sender.sendto(packet, ("127.0.0.1", 0))
        sent += 1
        if sent % 32 == 0:
            drain()
    deadline = time.time() + 2
    while sent - answered - given_up > 0 and time.time() < deadline:
        select.select([sniffer], [], [], 0.1)
        drain()
    sender.close()
    sniffer.close()
    return sent, outcomes, time.time() - started


class RateLimitAttacks(unittest.TestCase):
    """`rate_limit:` against clients that share, fill or forge their way into buckets (redteam-4 F21,
    F22, F23). Each case runs a daemon of its own (its own ports and limits) that answers
    www.rl.test from a local record, so the limits are all that is measured."""

    def test_behind_a_dual_stack_listener_each_ipv4_network_has_its_own_bucket(self):
        """F21: on `dns_listen: "[::]:PORT"` an IPv4 client arrives as ::ffff:a.b.c.d; one client of
        127.1.1.0/24 past its bucket must not limit a client of 127.2.2.0/24 (all IPv4 clients used
        to share the bucket of ::/56 and were REFUSED together), while 127.1.1.1 itself stays limited."""
        daemon = Daemon(18681, 18682, dns_host="[::]", extra=rate_limit(1, 5, 24))
        try:
            responses = burst_udp("127.1.1.1", 18682, 20)
            self.assertIsNotNone(responses[0], "the [::] listener answers IPv4 clients")
            self.assertEqual(responses[0].rcode(), dns.rcode.NOERROR)
            limited = sum(1 for response in responses if is_limited(response))
            self.assertGreaterEqual(limited, 10, f"127.1.1.1 is limited past its burst of 5: {limited} of 20 limited")
            victim = ask_udp("127.2.2.2", 18682)
            self.assertIsNotNone(victim, "127.2.2.2 got no reply")
            self.assertEqual(dns.rcode.to_text(victim.rcode()), "NOERROR",
                             "127.2.2.2 (another /24) has a bucket of its own behind the dual-stack listener")
            self.assertTrue(has_address(victim), victim)
            self.assertEqual(daemon.stop()[0], 0)
        finally:
            daemon.stop()

    def test_a_forged_flood_from_140000_networks_does_not_lock_out_new_clients(self):
        """F22: 140,000 forged UDP questions, each from another source (/32 networks, so 127/8 provides
        them; /24s on the Internet are the same), fill the 16 x 8,192 bucket table. A client never
        seen before must still be answered over UDP (a TC=1 reply that then succeeds over TCP
        counts), TCP and DoH; the full table used to limit every new network at once, on every
        transport, and made every new source cost a copy of a whole shard."""
        daemon = Daemon(18683, 18684, extra=rate_limit(1, 100, 32))
        try:
            sources = (bytes((127, 16 + index // 65024, index // 254 % 256, 1 + index % 254)) for index in range(140_000))
            cpu_before = cpu_seconds(daemon.process.pid)
            sent, outcomes, seconds = forged_udp(sources, 18684, query_wire("www.rl.test", id=7))
            cpu = cpu_seconds(daemon.process.pid) - cpu_before
            print(f"\n  F22 fill: {sent} forged sources in {seconds:.1f} s, answers {outcomes}, "
                  f"daemon CPU {cpu:.2f} s ({cpu / max(sent, 1) * 1e6:.0f} us a question)", file=sys.stderr)
            self.assertGreaterEqual(sent, 131_072, "enough sources to fill the table were sent")
            self.assertIsNone(daemon.process.poll(), "the daemon lives")
            # Each transport from a source of its own, none of them seen before.
            with self.subTest("UDP (TC=1 then TCP counts) from a never-seen client"):
                try:
                    response, over_tcp = dns.query.udp_with_fallback(dns.message.make_query("www.rl.test", "A"), "127.0.0.1",
                                                                     port=18684, timeout=3, source="127.250.1.1")
                except dns.exception.Timeout:
                    self.fail("a never-seen client got no reply over UDP after the fill")
                self.assertEqual(dns.rcode.to_text(response.rcode()), "NOERROR", f"UDP{' then TCP' if over_tcp else ''} from a never-seen client")
                self.assertTrue(has_address(response), response)
            with self.subTest("TCP from a never-seen client"):
                response = ask_tcp("127.250.1.2", 18684)
                self.assertEqual(dns.rcode.to_text(response.rcode()), "NOERROR", "TCP from a never-seen client")
            with self.subTest("DoH from a never-seen client"):
                status, message = doh_from("127.250.1.3", 18683)
                self.assertEqual(status, 200)
                self.assertEqual(dns.rcode.to_text(message.rcode()), "NOERROR", "DoH from a never-seen client")
                self.assertTrue(has_address(message), message)
            self.assertEqual(daemon.stop()[0], 0)
        finally:
            daemon.stop()

    def test_forged_udp_does_not_deny_the_victims_doh_and_tcp(self):
        """F23: 50 UDP questions with the victim's source (127.0.0.5; an off-path spoofer forges it,
        which to the daemon is the same as binding it) exhaust the victim's UDP bucket, and only that:
        the victim's DoH and stub TCP, whose sources cannot be forged, are answered NOERROR (they used
        to share the bucket and were REFUSED). Limited UDP questions get, every 2nd one by default
        (`slip: 2`), a TC=1 reply without answers and otherwise REFUSED (`action: refused`), so a real
        client at that address (dig, a stub resolver) retries over TCP and is answered at once."""
        daemon = Daemon(18685, 18686, extra=rate_limit(1, 5, 32))
        victim = "127.0.0.5"
        try:
            responses = burst_udp(victim, 18686, 50)
            answered = sum(1 for response in responses if response is not None and response.rcode() == dns.rcode.NOERROR and response.answer)
            slips = sum(1 for response in responses if is_slip(response))
            refused = sum(1 for response in responses if response is not None and response.rcode() == dns.rcode.REFUSED)
            print(f"\n  F23 50 forged UDP: {answered} answered, {slips} TC=1 slips, {refused} REFUSED, "
                  f"{responses.count(None)} unanswered", file=sys.stderr)
            self.assertLessEqual(answered, 10, "the UDP bucket (burst 5) is exhausted")
            with self.subTest("the victim's DoH"):
                status, message = doh_from(victim, 18685)
                self.assertEqual(status, 200)
                self.assertEqual(dns.rcode.to_text(message.rcode()), "NOERROR", "the victim's DoH is not denied by forged UDP")
                self.assertTrue(has_address(message), message)
            with self.subTest("the victim's stub TCP"):
                response = ask_tcp(victim, 18686)
                self.assertEqual(dns.rcode.to_text(response.rcode()), "NOERROR", "the victim's stub TCP is not denied by forged UDP")
                self.assertTrue(has_address(response), response)
            with self.subTest("slip: TC=1 to some limited UDP questions, REFUSED to the others"):
                self.assertGreater(slips, 0, "some limited UDP questions get a TC=1 reply without answers (slip)")
                self.assertGreater(refused, 0, "the other limited ones get what `action: refused` says")
            with self.subTest("a client that retries over TCP on TC is answered while its UDP bucket is empty"):
                # The UDP bucket is still empty (refilled by at most a token or two): drain it again,
                # then a client that does what dig does (retry over TCP on TC) is answered within
                # two attempts (slip 2: every 2nd limited question gets TC).
                burst_udp(victim, 18686, 10, wait=0.5)
                started = time.time()
                outcomes = []
                for _ in range(3):
                    try:
                        response, over_tcp = dns.query.udp_with_fallback(dns.message.make_query("www.rl.test", "A"), "127.0.0.1",
                                                                         port=18686, timeout=1, source=victim)
                    except dns.exception.Timeout:
                        outcomes.append("timeout")
                        continue
                    outcomes.append(("tcp " if over_tcp else "udp ") + dns.rcode.to_text(response.rcode()))
                    if response.rcode() == dns.rcode.NOERROR and has_address(response):
                        break
                self.assertIn("tcp NOERROR", outcomes, f"UDP with TCP fallback while the UDP bucket is empty: {outcomes}")
                self.assertLess(time.time() - started, 2.5, f"answered within two seconds: {outcomes}")
            self.assertEqual(daemon.stop()[0], 0)
        finally:
            daemon.stop()


FAKE_DNS_PORT = 18689


def forward_question(index):
    """A TXT question (forwarded unchanged) for a new name under fz.test, with EDNS (1,232 bytes)."""
    name = b"\x08q%07d\x02fz\x04test\x00" % (index % 10_000_000)
    return (struct.pack(">HHHHHH", index & 0xFFFF, 0x0100, 1, 0, 0, 1) + name + struct.pack(">HH", 16, 1)
            + b"\x00" + struct.pack(">HHIH", 41, 1232, 0, 0))


class QueryLogAttacks(unittest.TestCase):
    """`query_log:` against answers built to make its lines as long as possible (redteam-4 F19)."""

    def test_cname_bombs_from_a_forward_zone_do_not_overflow_the_log_writer(self):
        """F19: a forward zone's plain-DNS server (Tests/Adversarial/fake_dns.py; forgeable by anyone on
        path) answers every question with ~1,220 bytes of compressed CNAMEs to a 255-byte name of
        0x01 bytes, each ~1,262 bytes once escaped in JSON: log lines of 60 to 85 KB, longer than the
        writer's 64 KiB reserve, in blocks of ~84 KB lines (49 of which leave more than the reserve
        but less than the next line in the 4 MiB line buffer) and of lengths spread over 60-85 KB.
        A flood of such questions (new TXT names, forwarded unchanged; at most 20 s) must leave the
        daemon alive (its query-log thread wrote past the buffer: SIGSEGV, or SIGABRT from the heap
        it corrupted), answering a legitimate client during and after, and its log, once flushed by
        SIGTERM, whole: every line JSON, the long ones kept."""
        fake = subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "Tests/Adversarial/fake_dns.py"), "--port", str(FAKE_DNS_PORT)],
                                stdout=subprocess.PIPE)
        daemon = None
        log_dir = tempfile.mkdtemp(prefix="adversarial-ql-")
        try:
            self.assertEqual(fake.stdout.readline().strip(), b"ready")
            log_file = os.path.join(log_dir, "queries.jsonl")
            daemon = Daemon(18687, 18688, extra=f"""query_log: {{file: {log_file}}}
forward: [{{zones: [fz.test], upstreams: [{{dns: "127.0.0.1:{FAKE_DNS_PORT}"}}]}}]""")
            probe = dns.query.udp(dns.message.from_wire(forward_question(0)), "127.0.0.1", port=18688, timeout=3)
            self.assertEqual(probe.rcode(), dns.rcode.NOERROR, "the forward zone answers")
            self.assertTrue(probe.answer, "of CNAMEs")
            stop = threading.Event()
            counts = {"sent": 0, "answered": 0}

            def flood():
                sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
                for sock in sockets:
                    sock.setblocking(False)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                index = 1
                window = 64  # questions unanswered at once: the daemon busy, its socket buffer never full
                last_progress = time.time()
                while not stop.is_set() and counts["sent"] < 400_000:
                    for sock in sockets:
                        while True:
                            try:
                                sock.recv(4096)
                            except BlockingIOError:
                                break
                            counts["answered"] += 1
                            last_progress = time.time()
                    if counts["sent"] - counts["answered"] < window or time.time() - last_progress > 0.5:
                        if time.time() - last_progress > 0.5:
                            counts["answered"] = counts["sent"]  # give up on those (dropped)
                            last_progress = time.time()
                        for sock in sockets:
                            for _ in range(16):
                                try:
                                    sock.sendto(forward_question(index), ("127.0.0.1", 18688))
                                except (BlockingIOError, ConnectionRefusedError):
                                    pass
                                index += 1
                                counts["sent"] += 1
                    else:
                        time.sleep(0.001)
                for sock in sockets:
                    sock.close()

            thread = threading.Thread(target=flood, daemon=True)
            started = time.time()
            thread.start()
            failures, died_at, checks = [], None, 0
            while time.time() - started < 20:
                if daemon.process.poll() is not None:
                    died_at = time.time() - started
                    break
                try:
                    rcode, _ = legit_udp(18688)
                    checks += 1
                    if rcode != dns.rcode.NOERROR:
                        failures.append(dns.rcode.to_text(rcode))
                except dns.exception.Timeout:
                    failures.append(f"timeout at {time.time() - started:.1f} s")
                time.sleep(0.5)
            stop.set()
            thread.join(5)
            if died_at is None and daemon.process.poll() is not None:
                died_at = time.time() - started
            print(f"\n  F19 flood: {counts['sent']} questions ({counts['answered']} answered or given up) in {time.time() - started:.1f} s; daemon "
                  + (f"DIED at {died_at:.1f} s, exit {daemon.process.returncode}" if died_at is not None else "alive")
                  + f"; legit checks {checks}, failures {failures[:5]}", file=sys.stderr)
            crash = [line for line in daemon.log_text().splitlines() if "Fatal error" in line or "crashed" in line]
            self.assertIsNone(died_at, f"the daemon died {died_at} s into the flood, exit {daemon.process.returncode}: {crash[:3]}")
            self.assertEqual(failures, [], "a legitimate client is answered during the flood")
            rcode, _ = legit_udp(18688)
            self.assertEqual(rcode, dns.rcode.NOERROR, "and after it")
            status, _ = daemon.stop()
            self.assertEqual(status, 0)
            # The log and what it rotated (100 MB a file by default).
            lines = []
            for path in sorted(os.path.join(log_dir, name) for name in os.listdir(log_dir)):
                with open(path, "rb") as file:
                    content = file.read().split(b"\n")
                self.assertEqual(content[-1], b"", f"{path} ends with a whole line")
                lines += content[:-1]
            long_lines = 0
            for number, line in enumerate(lines):
                try:
                    record = json.loads(line)
                except ValueError as error:
                    self.fail(f"line {number + 1} of {len(lines)} ({len(line)} bytes) is no JSON: {error}: {line[:120]!r}")
                self.assertIsInstance(record, dict)
                if len(line) > 65536:
                    long_lines += 1
            lengths = sorted(len(line) for line in lines if b"fz.test" in line)
            print(f"  F19 log: {len(lines)} lines, {long_lines} over 64 KiB, fz.test lines {lengths[:1]}..{lengths[-1:]} bytes",
                  file=sys.stderr)
            self.assertGreater(long_lines, 0, "lines over 64 KiB are written whole")
        finally:
            if daemon is not None:
                daemon.stop()
            fake.kill()
            fake.wait()
            shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    BINARY = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
