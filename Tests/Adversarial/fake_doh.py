#!/usr/bin/python3
"""A trusted upstream that can be made to misbehave: an RFC 8484 server over HTTPS (HTTP/1.1) on
loopback, answering every A/AAAA question from a fixed zone, for the daemon's fault tests.

    fake_doh.py --port P --cert C --key K [--mode ok|garbage|slow|huge|status500|big] [--ttl N]

Modes: ok answers (A 198.18.9.1, AAAA 2001:2::9:1, TTL --ttl); garbage sends bytes that are no DNS
message; slow waits 30 s before answering; huge sends a 10 MB body; status500 answers HTTP 500; big answers
a CNAME to a long name and ~4,000 addresses, a message of nearly 65,535 bytes.
The mode can be changed while running: POST /mode with the new mode as the body. Loopback only.
"""
import argparse
import base64
import http.server
import socketserver
import ssl
import sys
import threading
import time

import dns.exception
import dns.message
import dns.rdata
import dns.rrset

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--cert", required=True)
parser.add_argument("--key", required=True)
parser.add_argument("--mode", default="ok")
parser.add_argument("--ttl", type=int, default=300)
args = parser.parse_args()
state = {"mode": args.mode, "queries": 0}
lock = threading.Lock()


def answer(wire):
    query = dns.message.from_wire(wire)
    response = dns.message.make_response(query)
    question = query.question[0]
    name = question.name.to_text()
    if name.startswith("nx."):
        response.set_rcode(3)
    elif question.rdtype == 1:
        response.answer.append(dns.rrset.from_text(question.name, args.ttl, "IN", "A", "198.18.9.1"))
    elif question.rdtype == 28:
        response.answer.append(dns.rrset.from_text(question.name, args.ttl, "IN", "AAAA", "2001:2::9:1"))
    return response.to_wire()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def reply(self, status, body, content_type="application/dns-message"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_query(self, wire):
        with lock:
            state["queries"] += 1
            mode = state["mode"]
        if mode == "garbage":
            return self.reply(200, b"\x00\x01 not a dns message at all")
        if mode == "status500":
            return self.reply(500, b"", "text/plain")
        if mode == "huge":
            chunk = b"\x00" * 65536
            self.send_response(200)
            self.send_header("Content-Type", "application/dns-message")
            self.send_header("Content-Length", str(len(chunk) * 160))
            self.end_headers()
            try:
                for _ in range(160):
                    self.wfile.write(chunk)
            except OSError:
                pass
            return
        if mode == "slow":
            time.sleep(30)
        if mode == "big":
            return self.reply(200, big_answer(wire))
        self.reply(200, answer(wire))

    def do_GET(self):
        if self.path.startswith("/stats"):
            return self.reply(200, str(state["queries"]).encode(), "text/plain")
        parameter = self.path.split("dns=", 1)[1].split("&", 1)[0]
        self.handle_query(base64.urlsafe_b64decode(parameter + "=" * (-len(parameter) % 4)))

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/mode":
            with lock:
                state["mode"] = body.decode().strip()
            return self.reply(200, b"ok\n", "text/plain")
        self.handle_query(body)


BIG_ADDRESSES = [dns.rdata.from_text("IN", "A", f"198.18.{i // 256}.{i % 256}") for i in range(4096)]


BIG_ANSWERS = {}


def big_answer(wire):
    """docs/threat-model.md F5: a CNAME to a 253-character name (compressed here, written out in full by a
    re-encoding server) and as many A records as fit in 65,535 bytes: ~4,000. Kept per question (the ID
    patched in): dnspython takes ~0.2 s to encode it."""
    key = wire[2:]
    if key in BIG_ANSWERS:
        return wire[:2] + BIG_ANSWERS[key][2:]
    BIG_ANSWERS[key] = encoded = big_answer_encoded(wire)
    return encoded


def big_answer_encoded(wire):
    query = dns.message.from_wire(wire)
    response = dns.message.make_response(query)
    target = ".".join(["b" * 60] * 4) + ".big.test."
    response.answer.append(dns.rrset.from_text(query.question[0].name, 300, "IN", "CNAME", target))
    # Each further A record costs 16 bytes (a compressed owner name, type, class, TTL, length, 4 bytes), so
    # the count follows from the size of a one-record answer: one encoding instead of a search (the linear
    # search took 1.4-3 s of Python per query, beyond the test's 3 s upstream timeout on a loaded machine).
    def encode(count):
        response.answer[1:] = [dns.rrset.from_rdata_list(target, 300, BIG_ADDRESSES[:count])]
        return response.to_wire(max_size=65535)
    count = 1 + (65535 - len(encode(1))) // 16
    while True:
        try:
            return encode(count)
        except dns.exception.TooBig:
            count -= 1


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self):
        # Not HTTPServer's own, which looks the bound address up (socket.getfqdn): a reverse lookup
        # that /etc/hosts may not answer goes to the machine's resolver, off-machine.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


server = Server(("127.0.0.1", args.port), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(args.cert, args.key)
context.set_alpn_protocols(["http/1.1"])
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    sys.exit(0)
