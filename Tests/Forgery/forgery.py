#!/usr/bin/python3
"""The forgery matrix: an on-path forger that holds what a real attacker holds — no zone's keys, no
vendor account's keys, no certificate for the resolver's name — tries every class of forgery against
every answer path, and each row asserts that the forged address is never returned by the library
(`resolve lookup`), never served by the daemon (DNS stub over UDP and TCP, `/dns-query`,
`/v1/resolve`), never cached (asked again once the forger is honest), and never dialled (the proxy's
CONNECT and `resolve fetch`: a trap listens on the forged loopback address), and that the error says
what happened.

DNSSEC rows are also given, byte for byte, to BIND's `delv` (a validating peer asking the same
forger): the run fails on any row where delv says bogus and we say secure.

The stamp rows give the forger one thing more: a certificate for the resolver's name from a second
CA the client also trusts (`ca-rogue`, made per run: a mis-issuing public CA, TLS inspection, a root
installed on the machine). That is what a DNS stamp's certificate hashes are there to stop, so each
such row pins a genuine certificate (the test CA's, or doh-a.test's leaf) and the forger sends its
own leaf with the pinned certificate appended: the hashes must be checked against the chain that
was verified, not against whatever the server sends. Their controls, a genuine server under a root
or leaf pin, must be answered. `doh-stamp-alpn-alert` forges one plaintext TLS alert
(no_application_protocol) at a daemon's first connection: the upstream must be asked over HTTP/2
again, and answer, within seconds.

    /usr/bin/python3 Tests/Forgery/forgery.py RESOLVE_BINARY [ROW...]

Needs Scripts/env/testenv.sh running (BIND on 127.0.0.1:18053, the vendor fakes on 18701, the test CA),
`openssl` (the stamp rows' second CA) and python3-h2 (their HTTP/2 DoH servers).
Every socket is on 127.0.0.0/8; every wait is bounded.
"""
import atexit
import base64
import hashlib
import http.client
import http.server
import json
import os
import shutil
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Fakes"))
from resolve_daemon import ResolveDaemon  # noqa: E402
from doh2_server import DoH2Server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = os.path.join(ROOT, ".testenv")
CA = os.path.join(ENV, "ca/ca.pem")
SECRETS = os.path.join(ENV, "vendor")
ANCHORS = os.path.join(ENV, "sig.test.anchors")
BIND = ("127.0.0.1", 18053)
VENDOR_PLAIN = ("127.0.0.1", 18701)

# The forger's listeners, the daemon's, and the trap on the forged address.
FORGER_DNS = 18680           # plain DNS, UDP and TCP (delv asks here)
FORGER_DOH = 18681           # DoH with doh-a.test's certificate: the lying upstream
IMPOSTOR_NAME = 18682        # DoH with a test-CA certificate for another name (hostile.test)
IMPOSTOR_CA = 18683          # DoH with a certificate for doh-a.test's name... from another CA
VENDOR_MITM = 18684          # plain HTTP between the client and the vendor fake
DAEMON_HTTP, DAEMON_DNS, DAEMON_PROXY = 18685, 18686, 18687
TRAP_PORT = 18688
FORGER_DOT = 18689           # DoT with doh-a.test's certificate: the lying upstream
DOT_IMPOSTOR_NAME = 18692    # DoT with a test-CA certificate for another name (hostile.test)
DOT_IMPOSTOR_CA = 18695      # DoT with a certificate from another CA
# The stamp rows' servers (certificate chains of their own; the DoH ones speak HTTP/2).
STAMP_DOT_ROOT = 18696       # DoT: ca-rogue's leaf for doh-a.test + the test CA's certificate
STAMP_DOT_LEAF = 18697       # DoT: ca-rogue's leaf + doh-a.test's genuine leaf
STAMP_DOT_GENUINE = 18698    # DoT: doh-a.test's genuine leaf (as testenv serves it)
STAMP_DOH_ROOT = 18699       # DoH (HTTP/2): as STAMP_DOT_ROOT
STAMP_DOH_LEAF = 18677       # DoH (HTTP/2): as STAMP_DOT_LEAF
STAMP_DOH_GENUINE = 18678    # DoH (HTTP/2): as STAMP_DOT_GENUINE
ALERT_DOH = 18679            # DoH (HTTP/2), genuine, whose first connection gets a forged TLS alert
FORGED = "127.0.0.66"        # what every forgery tries to get used; a trap listens there
GENUINE_WWW = "198.18.0.10"  # BIND's (testenv.sh's) A of www.hd.test: what the stamp controls must get
STAMPS = None                # the per-run certificates of the stamp rows (StampCertificates)
BINARY = None


# --- DNS helpers -----------------------------------------------------------------------------

def ask_bind(name, rdtype, dnssec=True):
    """BIND's genuine, authoritative answer, with DNSSEC records (DO, CD)."""
    query = dns.message.make_query(name, rdtype, want_dnssec=dnssec)
    query.flags |= dns.flags.CD
    response = dns.query.udp(query, *BIND[:1], port=BIND[1], timeout=3)
    if response.flags & dns.flags.TC:
        response = dns.query.tcp(query, BIND[0], port=BIND[1], timeout=3)
    return response


def rrsets(section, name=None, rdtype=None, covers=None):
    out = []
    for rrset in section:
        if name is not None and rrset.name != dns.name.from_text(name):
            continue
        if rdtype is not None and rrset.rdtype != rdtype:
            continue
        if covers is not None and rrset.covers != covers:
            continue
        out.append(rrset)
    return out


def renamed(rrset, name):
    copy = dns.rrset.RRset(dns.name.from_text(name), rrset.rdclass, rrset.rdtype, rrset.covers)
    copy.update(rrset)
    return copy


def reply_to(query, rcode=dns.rcode.NOERROR, answer=(), authority=()):
    """A response to `query` (its ID, question, DO) with these sections; AA, no AD."""
    response = dns.message.make_response(query)
    response.flags |= dns.flags.AA
    response.flags &= ~dns.flags.AD
    response.set_rcode(rcode)
    response.answer = [rr for rr in answer]
    response.authority = [rr for rr in authority]
    return response


def a_rrset(name, *addresses, rdtype=dns.rdatatype.A, ttl=300):
    return dns.rrset.from_text(dns.name.from_text(name), ttl, "IN", dns.rdatatype.to_text(rdtype), *addresses)


# --- The forger ------------------------------------------------------------------------------

class Forger:
    """Forwards to BIND, except what the current row forges: a function (query) -> wire bytes or
    a dns.message, or None to forward. Shared by the forger's DNS and DoH listeners."""

    def __init__(self):
        self.row = None
        self.lock = threading.Lock()

    def answer(self, wire):
        try:
            query = dns.message.from_wire(wire)
        except Exception:
            return None
        with self.lock:
            row = self.row
        if row is not None and row.forge is not None:
            forged = row.forge(query)
            if forged is not None:
                if isinstance(forged, (bytes, bytearray)):
                    return bytes(forged)
                return forged.to_wire(max_size=65535)
        try:
            response = dns.query.udp(query, BIND[0], port=BIND[1], timeout=3, ignore_unexpected=True)
            if response.flags & dns.flags.TC:
                response = dns.query.tcp(query, BIND[0], port=BIND[1], timeout=3)
            return response.to_wire(max_size=65535)
        except Exception:
            return None


FORGER = Forger()


class DNSUDPHandler(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        answer = FORGER.answer(data)
        if answer is not None:
            if len(answer) > 1232:
                answer = answer[:2] + bytes([answer[2] | 0x02, answer[3]]) + answer[4:6] + b"\0" * 6 + answer[12:self._question_end(answer)]
            sock.sendto(answer, self.client_address)

    @staticmethod
    def _question_end(wire):
        index = 12
        while wire[index] != 0:
            index += 1 + wire[index]
        return index + 5


class DNSTCPHandler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(5)
        try:
            while True:
                head = self._read(2)
                if not head:
                    return
                wire = self._read(struct.unpack("!H", head)[0])
                answer = FORGER.answer(wire)
                if answer is None:
                    return
                self.request.sendall(struct.pack("!H", len(answer)) + answer)
        except OSError:
            return

    def _read(self, count):
        data = b""
        while len(data) < count:
            chunk = self.request.recv(count - len(data))
            if not chunk:
                return b""
            data += chunk
        return data


class ThreadingUDP(socketserver.ThreadingMixIn, socketserver.UDPServer):
    daemon_threads = True
    allow_reuse_address = True


class ThreadingTCP(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class HTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self):  # no reverse lookup of the bound address (it would leave the machine)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address):
        pass  # clients that refuse our certificate hang up mid-handshake: expected


class DoHHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def _answer(self, wire):
        row = FORGER.row
        if row is not None and row.doh_body is not None:
            status, content_type, body = row.doh_body(wire)
        else:
            body = FORGER.answer(wire)
            status, content_type = (200, "application/dns-message") if body is not None else (502, "text/plain")
            body = body or b""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if status in (301, 302):
            self.send_header("Location", f"https://127.0.0.1:{FORGER_DOH}/elsewhere")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/resolve":  # the JSON API: the row answers, or the genuine answer from BIND
            parameters = urllib.parse.parse_qs(url.query)
            name, rdtype = parameters.get("name", [""])[0], parameters.get("type", ["A"])[0]
            row = FORGER.row
            body = row.json_body(name, rdtype) if row is not None and row.json_body else json_answer(name, rdtype)
            self.send_response(200)
            self.send_header("Content-Type", "application/dns-json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        query = urllib.parse.parse_qs(url.query).get("dns", [""])[0]
        try:
            wire = base64.urlsafe_b64decode(query + "=" * (-len(query) % 4))
        except Exception:
            wire = b""
        self._answer(wire)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        self._answer(self.rfile.read(length))


def json_answer(name, rdtype, answers=None, question=None):
    """A JSON API body (application/dns-json): BIND's answer, or the given records."""
    if answers is None:
        genuine = ask_bind(name, rdtype, dnssec=False)
        answers = [{"name": rr.name.to_text(), "type": rr.rdtype, "TTL": rr.ttl, "data": rd.to_text()} for rr in genuine.answer for rd in rr]
        status = genuine.rcode()
    else:
        status = 0
    numeric = dns.rdatatype.from_text(rdtype) if not str(rdtype).isdigit() else int(rdtype)
    return json.dumps({"Status": status, "Question": [{"name": question or name, "type": numeric}], "Answer": answers}).encode()


class VendorMITM(http.server.BaseHTTPRequestHandler):
    """Between the client and the vendor fake over plain HTTP: forwards the request, then lets the
    row rewrite the response (status, body)."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def do_GET(self):
        connection = http.client.HTTPConnection(*VENDOR_PLAIN, timeout=5)
        connection.request("GET", self.path, headers={"Accept": self.headers.get("Accept", "*/*")})
        response = connection.getresponse()
        status, body, content_type = response.status, response.read(), response.getheader("Content-Type", "text/plain")
        connection.close()
        row = FORGER.row
        if row is not None and row.vendor is not None:
            status, body = row.vendor(self.path, status, body)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Trap:
    """A listener on the forged address: every connection to it is a dial of a forged answer."""

    def __init__(self, host, port):
        self.connections = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            client.close()


def serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def tls_server(port, cert, key):
    server = HTTPServer(("127.0.0.1", port), DoHHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return serve(server)


def dot_server(port, cert, key):
    server = ThreadingTCP(("127.0.0.1", port), DNSTCPHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return serve(server)


class StampCertificates:
    """Per run, in a temporary directory: `ca-rogue`, a second CA the client trusts as well as the
    test CA (`trust.pem` holds both), its certificate for doh-a.test, and the chains the stamp rows'
    servers present: the rogue leaf with the test CA's certificate appended, with doh-a.test's
    genuine leaf appended, and the genuine leaf alone."""

    def __init__(self):
        self.directory = tempfile.mkdtemp(prefix="forgery-stamps-")
        atexit.register(shutil.rmtree, self.directory, True)
        self.genuine, self.genuine_key = f"{ENV}/ca/doh-a.test.pem", f"{ENV}/ca/doh-a.test.key"
        rogue_ca, rogue_ca_key = self.path("ca-rogue.pem"), self.path("ca-rogue.key")
        self.rogue, self.rogue_key = self.path("rogue.pem"), self.path("rogue.key")
        csr, extensions = self.path("rogue.csr"), self.path("rogue.ext")

        def run(*arguments):
            subprocess.run(["openssl", *arguments], check=True, capture_output=True, timeout=30)
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-keyout", rogue_ca_key, "-out", rogue_ca, "-subj", "/CN=forgery ca-rogue",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self.rogue_key,
            "-out", csr, "-subj", "/CN=doh-a.test")
        with open(extensions, "w") as file:
            file.write("subjectAltName=DNS:doh-a.test,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n")
        run("x509", "-req", "-in", csr, "-CA", rogue_ca, "-CAkey", rogue_ca_key, "-CAcreateserial", "-days", "2",
            "-out", self.rogue, "-extfile", extensions)
        self.trust = self.concatenation("trust.pem", CA, rogue_ca)
        self.rogue_and_root = self.concatenation("rogue+ca.pem", self.rogue, CA)
        self.rogue_and_leaf = self.concatenation("rogue+doh-a.test.pem", self.rogue, self.genuine)

    def path(self, name):
        return os.path.join(self.directory, name)

    def concatenation(self, name, *parts):
        with open(self.path(name), "w") as out:
            for part in parts:
                with open(part) as file:
                    out.write(file.read().strip() + "\n")
        return self.path(name)


def tbs_sha256(pem):
    """SHA-256 of a PEM certificate's DER tbsCertificate (its first element): a DNS stamp's hashi."""
    with open(pem) as file:
        der = ssl.PEM_cert_to_DER_cert(file.read())

    def element(offset):  # (content start, end) of the DER element at offset
        length, content = der[offset + 1], offset + 2
        if length & 0x80:
            count = length & 0x7f
            length, content = int.from_bytes(der[content:content + count], "big"), content + count
        return content, content + length
    content, _ = element(0)
    return hashlib.sha256(der[content:element(content)[1]]).digest()


def dns_stamp(kind, port, hashes, host="doh-a.test", path="/dns-query"):
    """sdns:// for DoH (0x02) or DoT (0x03) at 127.0.0.1:port: props, LP(addr), VLP(hashes),
    LP(host)[, LP(path)] (dnscrypt.info/stamps-specifications)."""
    def lp(text):
        data = text.encode() if isinstance(text, str) else text
        return bytes([len(data)]) + data
    hashes = list(hashes) or [b""]
    vlp = b"".join(bytes([len(h) | (0x80 if index < len(hashes) - 1 else 0)]) + h for index, h in enumerate(hashes))
    raw = bytes([kind]) + (0).to_bytes(8, "little") + lp(f"127.0.0.1:{port}") + vlp + lp(host)
    if kind == 0x02:
        raw += lp(path)
    return "sdns://" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def start_forger():
    global STAMPS
    serve(ThreadingUDP(("127.0.0.1", FORGER_DNS), DNSUDPHandler))
    serve(ThreadingTCP(("127.0.0.1", FORGER_DNS), DNSTCPHandler))
    tls_server(FORGER_DOH, f"{ENV}/ca/doh-a.test.pem", f"{ENV}/ca/doh-a.test.key")
    tls_server(IMPOSTOR_NAME, f"{ENV}/ca/hostile.test.pem", f"{ENV}/ca/hostile.test.key")
    # other-ca's certificate for bank.hd.test: neither the right CA nor the right name.
    tls_server(IMPOSTOR_CA, f"{ENV}/ca/impostor.pem", f"{ENV}/ca/impostor.key")
    serve(HTTPServer(("127.0.0.1", VENDOR_MITM), VendorMITM))
    dot_server(FORGER_DOT, f"{ENV}/ca/doh-a.test.pem", f"{ENV}/ca/doh-a.test.key")
    dot_server(DOT_IMPOSTOR_NAME, f"{ENV}/ca/hostile.test.pem", f"{ENV}/ca/hostile.test.key")
    dot_server(DOT_IMPOSTOR_CA, f"{ENV}/ca/impostor.pem", f"{ENV}/ca/impostor.key")
    # The stamp rows' servers: DoT as above, DoH over HTTP/2 (what a stamp with hashes is asked over).
    STAMPS = StampCertificates()
    dot_server(STAMP_DOT_ROOT, STAMPS.rogue_and_root, STAMPS.rogue_key)
    dot_server(STAMP_DOT_LEAF, STAMPS.rogue_and_leaf, STAMPS.rogue_key)
    dot_server(STAMP_DOT_GENUINE, STAMPS.genuine, STAMPS.genuine_key)
    DoH2Server(STAMP_DOH_ROOT, STAMPS.rogue_and_root, STAMPS.rogue_key, FORGER.answer).start()
    DoH2Server(STAMP_DOH_LEAF, STAMPS.rogue_and_leaf, STAMPS.rogue_key, FORGER.answer).start()
    DoH2Server(STAMP_DOH_GENUINE, STAMPS.genuine, STAMPS.genuine_key, FORGER.answer).start()


# --- The rows --------------------------------------------------------------------------------

class Row:
    """One forgery: which upstream config, what the forger does, which name is asked, what must
    never come back, and the error code(s) that say what happened.

    `forge(query)` rewrites DNS answers (DoH and plain DNS); `doh_body(wire)` replaces the whole
    HTTP answer; `vendor(path, status, body)` rewrites a vendor response. `documented` marks a row
    that proves a gap docs/commercial-apis.md's attack table names (the forged address is expected to pass).
    `genuine` makes a control row: every path must answer exactly these addresses. `ca_file`
    replaces the test CA as the client's extra trust anchors (PEM)."""

    def __init__(self, name, klass, upstream, host, codes, forge=None, doh_body=None, vendor=None, forged=(FORGED,),
                 dnssec=None, rdtype="a", delv=None, documented=None, daemon=True, genuine=None, config_error=False, custom=None,
                 json_body=None, ca_file=None):
        self.name, self.klass, self.upstream, self.host, self.codes = name, klass, upstream, host, codes
        self.forge, self.doh_body, self.vendor, self.forged = forge, doh_body, vendor, set(forged)
        self.dnssec, self.rdtype, self.delv, self.documented = dnssec, rdtype, delv, documented
        self.daemon, self.genuine, self.config_error, self.custom = daemon, genuine, config_error, custom
        self.json_body, self.ca_file = json_body, ca_file


DOH = f'{{doh: "https://doh-a.test:{FORGER_DOH}/dns-query", bootstrap: [127.0.0.1]}}'
DOT = f'{{dot: "127.0.0.1:{FORGER_DOT}", tls_name: doh-a.test}}'


def vendor_upstream(kind):
    endpoint = f"http://127.0.0.1:{VENDOR_MITM}"
    if kind == "alibaba-gcm" or kind == "alibaba-cbc":
        mode = kind.split("-")[1]
        return (f'{{alibaba: {{account_id: "100000", api: v2, endpoint: "{endpoint}", secret_file: {SECRETS}/alibaba.secret, '
                f'aes_key_file: {SECRETS}/alibaba.aes, encryption: {mode}}}}}')
    cipher = kind.split("-")[1]
    return f'{{tencent: {{account_id: "12345", endpoint: "{endpoint}", encryption: {cipher}, key_file: {SECRETS}/tencent.key}}}}'


def only(name, rdtype, build):
    """A forge function that rewrites queries for `name` `rdtype` with `build(query)`."""
    def forge(query):
        question = query.question[0]
        if question.name == dns.name.from_text(name) and question.rdtype == dns.rdatatype.from_text(rdtype):
            return build(query)
        return None
    return forge


def several(*forges):
    def forge(query):
        for each in forges:
            result = each(query)
            if result is not None:
                return result
        return None
    return forge


def genuine_with(query, name, rdtype, edit):
    """BIND's genuine answer to `name` `rdtype`, edited, as a reply to `query`."""
    genuine = ask_bind(name, rdtype)
    answer = [renamed(rr, str(query.question[0].name)) if rr.name == dns.name.from_text(name) else rr for rr in genuine.answer]
    response = reply_to(query, genuine.rcode(), answer, genuine.authority)
    edit(response)
    return response


def set_addresses(response, owner, address):
    for index, rrset in enumerate(response.answer):
        if rrset.name == dns.name.from_text(owner) and rrset.rdtype == dns.rdatatype.A:
            response.answer[index] = a_rrset(owner, address, ttl=rrset.ttl)


def strip_signatures(response):
    response.answer = [rr for rr in response.answer if rr.rdtype != dns.rdatatype.RRSIG]
    response.authority = [rr for rr in response.authority if rr.rdtype not in (dns.rdatatype.RRSIG, dns.rdatatype.NSEC, dns.rdatatype.NSEC3)]


def rrsig_labels(response, labels):
    for index, rrset in enumerate(response.answer):
        if rrset.rdtype == dns.rdatatype.RRSIG:
            edited = dns.rrset.RRset(rrset.name, rrset.rdclass, rrset.rdtype, rrset.covers)
            for rdata in rrset:
                edited.add(rdata.replace(labels=labels), rrset.ttl)
            response.answer[index] = edited


def dns_wire_rows():
    """A lying trusted upstream (it holds the DoH certificate): what its answers are checked for."""
    name = "www.hd.test"

    def other_name(query):
        response = reply_to(query, answer=[a_rrset("evil.hd.test", FORGED)])
        response.question = [dns.rrset.RRset(dns.name.from_text("evil.hd.test"), dns.rdataclass.IN, dns.rdatatype.A)]
        return response

    def wrong_id(query):
        response = reply_to(query, answer=[a_rrset(name, FORGED)])
        response.id = (query.id + 0x1234) & 0xffff
        return response

    def not_a_response(query):
        wire = bytearray(reply_to(query, answer=[a_rrset(name, FORGED)]).to_wire())
        wire[2] &= 0x7f  # QR cleared
        return bytes(wire)

    def pointer_loop(query):
        wire = bytearray(reply_to(query).to_wire())
        wire[7] = 1  # ANCOUNT 1: a record whose owner points at itself
        at = len(wire)
        wire += struct.pack("!H", 0xc000 | at) + struct.pack("!HHIH", 1, 1, 300, 4) + socket.inet_aton(FORGED)
        return bytes(wire)

    def truncated(query):
        wire = reply_to(query, answer=[a_rrset(name, FORGED, "127.0.0.67")]).to_wire()
        return wire[:-3]

    def trailing(query):
        return reply_to(query, answer=[a_rrset(name, FORGED)]).to_wire() + b"\0" * 16

    def oversized(query):
        return reply_to(query, answer=[a_rrset(name, FORGED)]).to_wire() + b"\0" * 70000

    def other_family(query):
        return reply_to(query, answer=[a_rrset(name, "::ffff:127.0.0.66", rdtype=dns.rdatatype.AAAA)])

    def redirect(_wire):
        return 302, "text/plain", b""

    def html(_wire):
        return 200, "text/html", b"<html>" + FORGED.encode() + b"</html>"

    rows = [
        Row("doh-other-name", "an answer for another name", DOH, name, {"mismatched_response"}, forge=only(name, "A", other_name)),
        Row("doh-wrong-id", "another query's answer (ID)", DOH, name, {"mismatched_response"}, forge=only(name, "A", wrong_id)),
        Row("doh-not-a-response", "a query echoed back (QR clear)", DOH, name, {"mismatched_response", "malformed_response"},
            forge=only(name, "A", not_a_response)),
        Row("doh-pointer-loop", "a compression loop", DOH, name, {"malformed_response"}, forge=only(name, "A", pointer_loop)),
        Row("doh-truncated", "a cut answer", DOH, name, {"malformed_response"}, forge=only(name, "A", truncated)),
        Row("doh-trailing", "padding after the message", DOH, name, {"malformed_response"}, forge=only(name, "A", trailing)),
        Row("doh-oversized", "an answer over 64 KiB", DOH, name, {"response_too_large"}, forge=only(name, "A", oversized)),
        Row("doh-other-family", "an AAAA in an A answer", DOH, name, {"nodata"}, forge=only(name, "A", other_family)),
        Row("doh-redirect", "a redirect to another resolver", DOH, name, {"http_status"}, doh_body=redirect),
        Row("doh-html", "a captive portal's page", DOH, name, {"bad_content_type"}, doh_body=html),
        Row("tls-other-name", "a certificate for another name (test CA)", f'{{doh: "https://doh-a.test:{IMPOSTOR_NAME}/dns-query", bootstrap: [127.0.0.1]}}',
            name, {"tls_failed"}, forge=only(name, "A", lambda q: reply_to(q, answer=[a_rrset(name, FORGED)]))),
        Row("tls-other-ca", "a certificate from another CA", f'{{doh: "https://doh-a.test:{IMPOSTOR_CA}/dns-query", bootstrap: [127.0.0.1]}}',
            name, {"tls_failed"}, forge=only(name, "A", lambda q: reply_to(q, answer=[a_rrset(name, FORGED)]))),
        Row("json-other-name", "a JSON API answer for another name", f'{{json: "https://doh-a.test:{FORGER_DOH}/resolve", bootstrap: [127.0.0.1]}}',
            name, {"mismatched_response"}, json_body=lambda n, t: json_answer(
                n, t, answers=[{"name": "evil.hd.test.", "type": 1, "TTL": 300, "data": FORGED}], question="evil.hd.test.")),
        Row("json-tls-other-name", "a JSON API server with another name's certificate",
            f'{{json: "https://json.test:{IMPOSTOR_NAME}/resolve", bootstrap: [127.0.0.1]}}', name, {"tls_failed"},
            json_body=lambda n, t: json_answer(n, t, answers=[{"name": n, "type": 1, "TTL": 300, "data": FORGED}])),
        Row("doh-plain-http", "a downgrade to plain HTTP", f'{{doh: "http://doh-a.test:{FORGER_DOH}/dns-query", bootstrap: [127.0.0.1]}}',
            name, set(), forge=only(name, "A", lambda q: reply_to(q, answer=[a_rrset(name, FORGED)])), config_error=True, daemon=False),
    ]
    # The same lies over DNS over TLS (the forger holds doh-a.test's certificate), and the impostors.
    forged_a = only(name, "A", lambda q: reply_to(q, answer=[a_rrset(name, FORGED)]))
    rows += [
        Row("dot-other-name", "an answer for another name over DoT", DOT, name, {"mismatched_response"}, forge=only(name, "A", other_name)),
        Row("dot-not-a-response", "a query echoed back over DoT (QR clear)", DOT, name, {"mismatched_response", "malformed_response"},
            forge=only(name, "A", not_a_response)),
        Row("dot-pointer-loop", "a compression loop over DoT", DOT, name, {"malformed_response"}, forge=only(name, "A", pointer_loop)),
        Row("dot-truncated", "a cut answer over DoT", DOT, name, {"malformed_response"}, forge=only(name, "A", truncated)),
        Row("dot-trailing", "padding after the message over DoT", DOT, name, {"malformed_response"}, forge=only(name, "A", trailing)),
        Row("dot-other-family", "an AAAA in an A answer over DoT", DOT, name, {"nodata"}, forge=only(name, "A", other_family)),
        Row("dot-tls-other-name", "a DoT server with another name's certificate (test CA)",
            f'{{dot: "127.0.0.1:{DOT_IMPOSTOR_NAME}", tls_name: doh-a.test}}', name, {"tls_failed"}, forge=forged_a),
        Row("dot-tls-other-ca", "a DoT server with a certificate from another CA",
            f'{{dot: "127.0.0.1:{DOT_IMPOSTOR_CA}", tls_name: doh-a.test}}', name, {"tls_failed"}, forge=forged_a),
        Row("dot-plaintext", "a downgrade to plain DNS over TCP on the DoT port",
            f'{{dot: "127.0.0.1:{FORGER_DNS}", tls_name: doh-a.test}}', name, {"tls_failed", "timeout"}, forge=forged_a),
    ]
    return rows


def dnssec_rows():
    """Forged but well-formed DNSSEC answers built from the signed tree's genuine data."""
    def nxdomain_with(name, proof_from):
        def build(query):
            return reply_to(query, dns.rcode.NXDOMAIN, authority=ask_bind(proof_from, "A").authority)
        return only(name, "A", build)

    def wildcard_replay(query):
        expansion = ask_bind("x.wild.sig.test", "A")
        answer = [renamed(rr, "real.wild.sig.test") for rr in expansion.answer]
        return reply_to(query, answer=answer, authority=ask_bind("zzzz.rsa.sig.test", "A").authority)

    def another_names_rrset(query):
        genuine = ask_bind("forged.sig.test", "A")
        return reply_to(query, answer=[renamed(rr, "www.sig.test") for rr in genuine.answer])

    def spliced(query):
        alias = ask_bind("alias.sig.test", "A")
        cname = rrsets(alias.answer, "alias.sig.test")
        www = ask_bind("www.sig.test", "A")
        # www.rsa.sig.test's address swapped, signed by sig.test's signature over www.sig.test.
        forged = [a_rrset("www.rsa.sig.test", FORGED)] + [renamed(rr, "www.rsa.sig.test") for rr in rrsets(www.answer, rdtype=dns.rdatatype.RRSIG)]
        return reply_to(query, answer=cname + forged)

    def ds_from_n3(query):
        n3 = ask_bind("n3.sig.test", "DS")
        return reply_to(query, answer=[renamed(rr, "rsa.sig.test") for rr in n3.answer])

    def ds_denied_by_apex(query):
        apex = ask_bind("rsa.sig.test", "NSEC")
        return reply_to(query, authority=apex.answer + rrsets(ask_bind("rsa.sig.test", "SOA").answer))

    def dnskey_from_n3(query):
        n3 = ask_bind("n3.sig.test", "DNSKEY")
        return reply_to(query, answer=[renamed(rr, "rsa.sig.test") for rr in n3.answer])

    def unsigned_rsa(query):
        return reply_to(query, answer=[a_rrset("www.rsa.sig.test", FORGED)])

    def nsec3_sibling(query):
        return reply_to(query, dns.rcode.NXDOMAIN, authority=ask_bind("nx.n3.sig.test", "A").authority)

    def forged_txt_with_ad(query):
        response = reply_to(query, answer=[dns.rrset.from_text(dns.name.from_text("www.sig.test"), 300, "IN", "TXT", '"forged"')])
        response.flags |= dns.flags.AD
        return response

    def ad_passthrough(row, trap, cells, fail):
        """A forwarded type (TXT) with the upstream's AD set: the daemon validates only A/AAAA, so its
        AD must not vouch for what it forwarded."""
        daemon = Daemon(row)
        try:
            query = dns.message.make_query("www.sig.test", "TXT", want_dnssec=True)
            for path, response in (("udp", dns.query.udp(query, "127.0.0.1", port=DAEMON_DNS, timeout=8)),
                                   ("tcp", dns.query.tcp(query, "127.0.0.1", port=DAEMON_DNS, timeout=8))):
                if response.flags & dns.flags.AD:
                    fail(f"{path}: the forwarded TXT went out with AD")
                else:
                    cells.append(f"{path}: {dns.rcode.to_text(response.rcode())} without AD")
        finally:
            daemon.stop()

    rows = [
        Row("ad-passthrough", "the upstream's AD on a forwarded type", DOH, "www.sig.test", set(),
            forge=only("www.sig.test", "TXT", forged_txt_with_ad), forged=(), dnssec="forwarded", custom=ad_passthrough),
        Row("nsec-wraparound", "another zone's wrap-around NSEC as NXDOMAIN", DOH, "www.sig.test", {"dnssec_bogus"},
            forge=nxdomain_with("www.sig.test", "zzzz.rsa.sig.test"), forged=(), dnssec="nxdomain"),
        Row("nsec3-sibling", "a sibling zone's NSEC3 as NXDOMAIN", DOH, "www.rsa.sig.test", {"dnssec_bogus"},
            forge=only("www.rsa.sig.test", "A", nsec3_sibling), forged=(), dnssec="nxdomain"),
        Row("nxdomain-unproven", "NXDOMAIN without a proof", DOH, "www.sig.test", {"dnssec_bogus"},
            forge=only("www.sig.test", "A", lambda q: reply_to(q, dns.rcode.NXDOMAIN)), forged=(), dnssec="nxdomain"),
        Row("wildcard-replay", "a genuine wildcard replayed for an existing name", DOH, "real.wild.sig.test", {"dnssec_bogus"},
            forge=only("real.wild.sig.test", "A", wildcard_replay), forged=("192.0.2.19",), dnssec="answer"),
        Row("address-flipped", "an address changed under a kept RRSIG (bit flips)", DOH, "www.sig.test", {"dnssec_bogus"},
            forge=only("www.sig.test", "A", lambda q: genuine_with(q, "www.sig.test", "A", lambda r: set_addresses(r, "www.sig.test", FORGED))),
            dnssec="answer"),
        Row("rrsig-stripped", "signatures stripped (downgrade to unsigned)", DOH, "www.sig.test", {"dnssec_bogus"},
            forge=only("www.sig.test", "A", lambda q: genuine_with(
                q, "www.sig.test", "A", lambda r: (set_addresses(r, "www.sig.test", FORGED), strip_signatures(r)))),
            dnssec="answer"),
        Row("rrset-of-another-name", "another name's signed RRset replayed", DOH, "www.sig.test", {"dnssec_bogus"},
            forge=only("www.sig.test", "A", another_names_rrset), forged=("127.0.0.77",), dnssec="answer"),
        Row("rrsig-labels-lie", "an RRSIG whose labels claim a wildcard", DOH, "www.sig.test", {"dnssec_bogus"},
            forge=only("www.sig.test", "A", lambda q: genuine_with(
                q, "www.sig.test", "A", lambda r: (rrsig_labels(r, 2), set_addresses(r, "www.sig.test", FORGED)))),
            dnssec="answer"),
        Row("cname-spliced", "a CNAME chain spliced into another zone", DOH, "alias.sig.test", {"dnssec_bogus"},
            forge=only("alias.sig.test", "A", spliced), dnssec="answer"),
        Row("ds-of-another-zone", "a DS set from another zone", DOH, "www.rsa.sig.test", {"dnssec_bogus"},
            forge=several(only("rsa.sig.test", "DS", ds_from_n3), only("www.rsa.sig.test", "A", unsigned_rsa)), dnssec="answer"),
        Row("ds-denied-by-child", "the child's apex NSEC denying its DS (insecure by forgery)", DOH, "www.rsa.sig.test", {"dnssec_bogus"},
            forge=several(only("rsa.sig.test", "DS", ds_denied_by_apex), only("www.rsa.sig.test", "A", unsigned_rsa)), dnssec="answer"),
        Row("dnskey-of-another-zone", "a DNSKEY set from another zone", DOH, "www.rsa.sig.test", {"dnssec_bogus"},
            forge=several(only("rsa.sig.test", "DNSKEY", dnskey_from_n3), only("www.rsa.sig.test", "A", unsigned_rsa)), dnssec="answer"),
        Row("expired-signature", "an old answer whose signatures expired (replay)", DOH, "www.expired.sig.test", {"dnssec_bogus"},
            forged=("192.0.2.61",), dnssec="answer"),
    ]
    return rows


def vendor_rows():
    """A man in the middle of plain-HTTP vendor APIs, without the account's keys."""
    captured = {}

    def capture(kind, host):
        """A genuine response for `host` through the MITM (it passes everything on this row)."""
        return captured.get((kind, host))

    def alibaba_plain(path, status, body):
        names = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        answers = [{"dn": "www.hd.test", "v4": {"ips": [FORGED], "ttl": 60}, "v6": {"ips": [], "ttl": 60}}]
        return 200, json.dumps({"code": "success", "mode": 0, "data": {"cip": "127.0.0.1", "answers": answers}}).encode()

    def alibaba_mode(mode):
        def rewrite(path, status, body):
            try:
                reply = json.loads(body)
            except Exception:
                return status, body
            reply["mode"] = mode
            return status, json.dumps(reply).encode()
        return rewrite

    def alibaba_data(edit):
        def rewrite(path, status, body):
            try:
                reply = json.loads(body)
                data = bytearray(base64.b64decode(reply["data"]))
            except Exception:
                return status, body
            reply["data"] = base64.b64encode(bytes(edit(data))).decode()
            return status, json.dumps(reply).encode()
        return rewrite

    def flip(at):
        def edit(data):
            data[at if at >= 0 else len(data) + at] ^= 0x01
            return data
        return edit

    def replay(kind):
        def rewrite(path, status, body):
            return 200, captured[(kind, "loopback.hd.test")]
        return rewrite

    def tencent_text(text):
        return lambda path, status, body: (200, text)

    def tencent_iv_flip(path, status, body):
        # AES-CBC: the IV XORs the first plaintext block. "www.hd.test.:198" → "www.hd.test.:127".
        blob = bytearray(bytes.fromhex(body.decode()))
        for offset, (old, new) in enumerate(zip(b"198", b"127")):
            blob[13 + offset] ^= old ^ new
        return 200, blob.hex().encode()

    def tencent_flip(path, status, body):
        blob = bytearray(bytes.fromhex(body.decode()))
        blob[len(blob) // 2] ^= 0x01
        return 200, blob.hex().encode()

    name = "www.hd.test"
    rows = []
    for kind in ("alibaba-gcm", "alibaba-cbc"):
        upstream = vendor_upstream(kind)
        rows += [
            Row(f"{kind}-plaintext", "a downgrade to plaintext (mode 0)", upstream, name, {"malformed_response"}, vendor=alibaba_plain),
            Row(f"{kind}-other-mode", "the other cipher's mode number", upstream, name, {"malformed_response"},
                vendor=alibaba_mode(1 if kind == "alibaba-gcm" else 2)),
            Row(f"{kind}-bit-flip", "a bit flipped in the ciphertext", upstream, name, {"malformed_response"},
                vendor=alibaba_data(flip(-20 if kind == "alibaba-gcm" else 20)), forged=()),
            Row(f"{kind}-truncated", "the ciphertext cut", upstream, name, {"malformed_response"},
                vendor=alibaba_data(lambda d: d[:-5]), forged=()),
            Row(f"{kind}-replayed", "another name's sealed answer replayed", upstream, name, {"mismatched_response"},
                vendor=replay(kind), forged=("127.0.0.1",)),
        ]
    for kind in ("tencent-des", "tencent-aes"):
        upstream = vendor_upstream(kind)
        rows += [
            Row(f"{kind}-empty", "an empty (unsealed) 'no record' body", upstream, name, {"unauthenticated_answer"},
                vendor=tencent_text(b""), forged=()),
            Row(f"{kind}-plaintext", "a plaintext answer", upstream, name, {"malformed_response"},
                vendor=tencent_text(f"www.hd.test.:{FORGED},60".encode())),
            Row(f"{kind}-replayed", "another name's sealed answer replayed", upstream, name, {"mismatched_response"},
                vendor=replay(kind), forged=("127.0.0.1",)),
        ]
    # Over HTTPS the vendor APIs are what TLS makes them: an impostor without the certificate for
    # the service's name gets nowhere, whatever it would answer.
    impostor = f"https://127.0.0.1:{IMPOSTOR_NAME}"
    for kind, upstream in (
        ("alibaba-legacy", f'{{alibaba: {{account_id: "100000", api: legacy, endpoint: "{impostor}", tls_name: vendor.test, '
                           f'secret_file: {SECRETS}/alibaba.secret}}}}'),
        ("tencent-token", f'{{tencent: {{endpoint: "{impostor}", tls_name: vendor.test, token_file: {SECRETS}/tencent.token}}}}'),
        ("baidu", f'{{baidu: {{account_id: "123456", endpoint: "{impostor}", tls_name: vendor.test, secret_file: {SECRETS}/baidu.secret}}}}'),
    ):
        rows.append(Row(f"{kind}-tls-impostor", "an HTTPS impostor with another name's certificate", upstream, name, {"tls_failed"}))
    # Without encryption over plain HTTP (allow_plain_http) the answer is anyone's: docs/commercial-apis.md says so.
    plain = (f'{{alibaba: {{account_id: "100001", api: v2, endpoint: "http://127.0.0.1:{VENDOR_MITM}", encryption: none, '
             f'allow_plain_http: true}}}}')
    rows.append(Row("alibaba-plain-http", "a forged plaintext answer where allow_plain_http accepts one", plain, name, set(),
                    vendor=alibaba_plain, documented="any API over HTTP without encryption: docs/commercial-apis.md's attack table says 'yes'"))
    rows.append(Row("tencent-des-bit-flip", "a bit flipped in a DES block", vendor_upstream("tencent-des"), name,
                    {"malformed_response", "mismatched_response"}, vendor=tencent_flip, forged=()))
    rows.append(Row("tencent-aes-iv-flip", "the IV flipped to rewrite the address (CBC has no integrity)", vendor_upstream("tencent-aes"), name,
                    set(), vendor=tencent_iv_flip, forged=("127.18.0.10",),
                    documented="Tencent AES-CBC over http:// is malleable: docs/commercial-apis.md's attack table says 'yes'"))

    def prepare():
        """Captures each mode's genuine sealed answer for loopback.hd.test (127.0.0.1): the replay."""
        for kind in ("alibaba-gcm", "alibaba-cbc", "tencent-des", "tencent-aes"):
            seen = {}

            def record(path, status, body, seen=seen):
                seen["body"] = body
                return status, body
            FORGER.row = Row("capture", "", vendor_upstream(kind), "loopback.hd.test", set(), vendor=record)
            lookup(FORGER.row, "loopback.hd.test", "a")
            captured[(kind, "loopback.hd.test")] = seen.get("body", b"")
        FORGER.row = None
    return rows, prepare


def stamp_rows():
    """DNS stamps with certificate hashes (redteam-4 F20, F25): the forger holds a certificate for
    doh-a.test from ca-rogue, a CA the client also trusts, and the stamp pins a genuine certificate."""
    name = "www.hd.test"
    forged_a = only(name, "A", lambda q: reply_to(q, answer=[a_rrset(name, FORGED)]))
    root, leaf = tbs_sha256(CA), tbs_sha256(STAMPS.genuine)

    def upstream(kind, port, pinned):
        return f'{{stamp: "{dns_stamp(kind, port, [pinned])}"}}'

    def alert_round(row):
        """One round of F25 on a fresh daemon and server: the daemon's first connection to the
        upstream gets a forged plaintext alert (no_application_protocol) instead of a ServerHello;
        every later connection is the genuine HTTP/2 server. One daemon process throughout: within
        ~10 s it must be answered over that upstream again. Returns (problem or None, what was seen,
        whether the first query was answered already)."""
        server = DoH2Server(ALERT_DOH, STAMPS.genuine, STAMPS.genuine_key, FORGER.answer, alerts=1).start()
        try:
            daemon = Daemon(row)
            try:
                started, seen, answered, message = time.time(), [], False, ""
                while time.time() - started < 10:
                    api = daemon.resolve_api(row.host)
                    got = {a.get("ip") for a in api.get("addresses", [])}
                    code, message = (api.get("error") or {}).get("code"), (api.get("error") or {}).get("message", message)
                    seen.append(f"{time.time() - started:.0f}s {code or ','.join(sorted(got)) or 'no answer'}")
                    if got == set(row.genuine) and api.get("source", "doh") == "doh":
                        answered = True
                        break
                    time.sleep(1.5)
                counts = f"{server.connections} connections, {server.alerted} alerted, {server.requests} DoH requests"
                text = "/v1/resolve: " + " → ".join(seen) + f" ({counts})"
                if server.alerted == 0:
                    return "the forged alert was never sent: nothing connected to the upstream", text, False
                if not answered:
                    return (f"still not answered over HTTP/2 {time.time() - started:.0f} s after one forged alert "
                            f"({counts}; {message[-120:]!r})"), text, False
                stub = daemon.stub(row.host, tcp=True)
                if stub["addresses"] != set(row.genuine):
                    return f"then the stub answered {stub['rcode']} {sorted(stub['addresses'])}", text, False
                return None, text + f", then stub: {stub['rcode']} {','.join(sorted(stub['addresses']))}", len(seen) == 1
            finally:
                daemon.stop()
        finally:
            server.close()

    def alpn_alert(row, trap, cells, fail):
        """A round whose first query was answered at once shows no trace of the alert (a client that
        retries at once, or the alert lost in a race): it is played once more, and the second round
        decides. A client that stays refused fails either round."""
        for number in (1, 2):
            problem, text, at_once = alert_round(row)
            cells.append(f"round {number}: {text}")
            if problem:
                fail(problem)
                return
            if not at_once:
                return

    rows = []
    for protocol, kind, root_port, leaf_port, genuine_port in (("dot", 0x03, STAMP_DOT_ROOT, STAMP_DOT_LEAF, STAMP_DOT_GENUINE),
                                                               ("doh", 0x02, STAMP_DOH_ROOT, STAMP_DOH_LEAF, STAMP_DOH_GENUINE)):
        over = "DoT" if protocol == "dot" else "DoH over HTTP/2"
        rows += [
            Row(f"{protocol}-stamp-appended-root", f"another trusted CA's leaf, the pinned root appended ({over}, F20)",
                upstream(kind, root_port, root), name, {"tls_failed"}, forge=forged_a, ca_file=STAMPS.trust),
            Row(f"{protocol}-stamp-appended-leaf", f"another trusted CA's leaf, the pinned genuine leaf appended ({over}, F20)",
                upstream(kind, leaf_port, leaf), name, {"tls_failed"}, forge=forged_a, ca_file=STAMPS.trust),
            Row(f"{protocol}-stamp-root-pin", f"control: the genuine server, its root pinned (not sent) ({over})",
                upstream(kind, genuine_port, root), name, set(), forged=(), genuine=(GENUINE_WWW,), ca_file=STAMPS.trust),
            Row(f"{protocol}-stamp-leaf-pin", f"control: the genuine server, its leaf pinned ({over})",
                upstream(kind, genuine_port, leaf), name, set(), forged=(), genuine=(GENUINE_WWW,), ca_file=STAMPS.trust),
        ]
    rows.append(Row("doh-stamp-alpn-alert", "one forged plaintext TLS alert (no_application_protocol) at the first connection (F25)",
                    upstream(0x02, ALERT_DOH, leaf), name, set(), forged=(), genuine=(GENUINE_WWW,), ca_file=STAMPS.trust,
                    custom=alpn_alert))
    return rows


# --- Paths -----------------------------------------------------------------------------------

def config_body(row, daemon=False):
    text = f"""upstreams:
  - {row.upstream}
ca_file: {row.ca_file or CA}
allow_private: true
system_dns: ["127.0.0.1:18055"]
cache: {{min_ttl: 1, negative_ttl: 1}}
"""
    if row.dnssec:
        text += f"dnssec: require\ntrust_anchors: {ANCHORS}\n"
    if daemon:
        text += f"""listen: "127.0.0.1:{DAEMON_HTTP}"
dns_listen: "127.0.0.1:{DAEMON_DNS}"
proxy_listen: "127.0.0.1:{DAEMON_PROXY}"
proxy: {{connect_ports: [{TRAP_PORT}], allow_private_destinations: true}}
tls: {{cert: {ENV}/ca/daemon.test.pem, key: {ENV}/ca/daemon.test.key}}
"""
    return text


def config_text(row, directory):
    path = os.path.join(directory, "lookup.yaml")
    with open(path, "w") as file:
        file.write(config_body(row))
    return path


def lookup(row, host, rdtype):
    directory = tempfile.mkdtemp(prefix="forgery-")
    try:
        config = config_text(row, directory)
        result = subprocess.run([BINARY, "lookup", "--config", config, "--json", "--timeout", "4", "--type", rdtype, host],
                                capture_output=True, text=True, timeout=30)
        line = result.stdout.strip().splitlines()[0] if result.stdout.strip() else "{}"
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = {}
        return result.returncode, parsed, result.stderr
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def fetch_dials(row, host, trap):
    """`resolve fetch` of the name: the interceptor must not dial a forged address."""
    before = trap.connections
    directory = tempfile.mkdtemp(prefix="forgery-fetch-")
    try:
        config = config_text(row, directory)
        subprocess.run([BINARY, "fetch", "--config", config, "--timeout", "4", "--max-time", "5", f"https://{host}:{TRAP_PORT}/"],
                       capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return trap.connections - before


class Daemon(ResolveDaemon):
    def __init__(self, row):
        super().__init__(BINARY, lambda directory: config_body(row, daemon=True), prefix="forgery-daemon-")

    def stub(self, host, tcp=False):
        query = dns.message.make_query(host, "A", want_dnssec=True)
        try:
            if tcp:
                response = dns.query.tcp(query, "127.0.0.1", port=DAEMON_DNS, timeout=8)
            else:
                response = dns.query.udp(query, "127.0.0.1", port=DAEMON_DNS, timeout=8)
        except Exception as error:
            return {"rcode": f"no answer ({type(error).__name__})", "addresses": set(), "ad": False}
        addresses = {r.address for rrset in response.answer if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA) for r in rrset}
        return {"rcode": dns.rcode.to_text(response.rcode()), "addresses": addresses, "ad": bool(response.flags & dns.flags.AD)}

    def doh(self, host):
        query = dns.message.make_query(host, "A", want_dnssec=True)
        query.id = 0
        context = ssl.create_default_context(cafile=CA)
        connection = http.client.HTTPSConnection("127.0.0.1", DAEMON_HTTP, context=context, timeout=10)
        try:
            connection.request("POST", "/dns-query", body=query.to_wire(),
                               headers={"Host": "daemon.test", "Content-Type": "application/dns-message", "Accept": "application/dns-message"})
            response = connection.getresponse()
            body = response.read()
        except Exception as error:
            return {"rcode": f"no answer ({type(error).__name__})", "addresses": set(), "ad": False}
        finally:
            connection.close()
        if response.status != 200:
            return {"rcode": f"HTTP {response.status}", "addresses": set(), "ad": False}
        message = dns.message.from_wire(body)
        addresses = {r.address for rrset in message.answer if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA) for r in rrset}
        return {"rcode": dns.rcode.to_text(message.rcode()), "addresses": addresses, "ad": bool(message.flags & dns.flags.AD)}

    def resolve_api(self, host):
        context = ssl.create_default_context(cafile=CA)
        connection = http.client.HTTPSConnection("127.0.0.1", DAEMON_HTTP, context=context, timeout=10)
        try:
            connection.request("GET", f"/v1/resolve?host={host}&type=a", headers={"Host": "daemon.test"})
            response = connection.getresponse()
            return json.loads(response.read() or b"{}")
        except Exception:
            return {}
        finally:
            connection.close()

    def connect(self, host, trap):
        before = trap.connections
        try:
            sock = socket.create_connection(("127.0.0.1", DAEMON_PROXY), timeout=10)
            sock.sendall(f"CONNECT {host}:{TRAP_PORT} HTTP/1.1\r\nHost: {host}:{TRAP_PORT}\r\n\r\n".encode())
            status = sock.recv(200).split(b"\r\n")[0].decode(errors="replace")
            sock.close()
        except OSError as error:
            status = f"error {error}"
        time.sleep(0.05)
        return trap.connections - before, status


def delv_verdict(host, rdtype="A"):
    anchors = os.path.join(tempfile.gettempdir(), "forgery-anchors.conf")
    with open(ANCHORS) as file:
        fields = file.read().split()
    # sig.test. IN DS tag alg digest-type digest
    with open(anchors, "w") as file:
        file.write(f'trust-anchors {{\n "{fields[0]}" static-ds {fields[3]} {fields[4]} {fields[5]} "{fields[6]}";\n}};\n')
    result = subprocess.run(["delv", "@127.0.0.1", "-p", str(FORGER_DNS), "-a", anchors, f"+root={fields[0].rstrip('.')}", host, rdtype],
                            capture_output=True, text=True, timeout=30)
    out = result.stdout + result.stderr
    if "fully validated" in out and "resolution failed" not in out:
        return "secure"
    if "negative response, fully validated" in out:
        return "secure"
    if "unsigned answer" in out or "insecure" in out:
        return "insecure"
    return "bogus"


# --- The run ---------------------------------------------------------------------------------

def run_row(row, trap, table, failures):
    FORGER.row = row
    cells = []

    def fail(what):
        failures.append(f"{row.name}: {what}")
        cells.append(f"FAIL {what}")

    if row.custom:
        row.custom(row, trap, cells, fail)
        table.append((row, cells, None))
        FORGER.row = None
        return

    # The library.
    status, result, stderr = lookup(row, row.host, row.rdtype)
    returned = {a.get("ip") for a in result.get("addresses", [])}
    code = (result.get("error") or {}).get("code")
    if row.config_error:
        if status == 2 and not returned:
            cells.append("lookup: refused at configuration")
        else:
            fail(f"lookup accepted the configuration (exit {status})")
        table.append((row, cells, None))
        return
    if row.documented:
        cells.append(f"lookup: {'forged address accepted' if returned & row.forged else 'refused ' + str(code)} (documented)")
    elif returned & row.forged:
        fail(f"lookup returned {sorted(returned & row.forged)}")
    elif row.genuine and returned != set(row.genuine):
        message = (result.get("error") or {}).get("message", "")
        fail(f"lookup {'answered ' + ','.join(sorted(returned)) if returned else 'refused with ' + repr(code)}, expected the genuine "
             f"{','.join(sorted(row.genuine))}" + (f" ({message[:110]})" if message else ""))
    elif row.dnssec == "nxdomain" and code == "nxdomain":
        fail("lookup took the forged NXDOMAIN")
    elif row.codes and code not in row.codes:
        fail(f"lookup refused with {code!r}, expected {sorted(row.codes)}")
    else:
        cells.append(f"lookup: {code or 'answer ' + ','.join(sorted(returned))}")

    # The interceptor: never dials a forged address.
    if FORGED in row.forged:
        dialled = fetch_dials(row, row.host, trap)
        if dialled and not row.documented:
            fail(f"resolve fetch dialled the forged address {dialled} times")
        else:
            cells.append(f"fetch: dialled the forged address {dialled} times (documented)" if dialled else "fetch: not dialled")

    # The daemon: stub (UDP, TCP), DoH, /v1/resolve, proxy; then honest again: nothing cached.
    if row.daemon and not row.documented:
        daemon = Daemon(row)
        try:
            answers = {"udp": daemon.stub(row.host), "tcp": daemon.stub(row.host, tcp=True), "doh": daemon.doh(row.host)}
            for path, answer in answers.items():
                if answer["addresses"] & row.forged:
                    fail(f"{path} served {sorted(answer['addresses'] & row.forged)}")
                elif row.dnssec == "nxdomain" and answer["rcode"] == "NXDOMAIN":
                    fail(f"{path} served the forged NXDOMAIN (AD {answer['ad']})")
                elif answer["rcode"] == "NOERROR" and answer["addresses"] and row.codes:
                    fail(f"{path} answered {sorted(answer['addresses'])}")
                elif row.genuine and answer["addresses"] != set(row.genuine):
                    fail(f"{path} answered {answer['rcode']} {sorted(answer['addresses'])}, expected the genuine {sorted(row.genuine)}")
            cells.append("stub/DoH: " + ", ".join(sorted({a["rcode"] for a in answers.values()})))
            api = daemon.resolve_api(row.host)
            api_returned = {a.get("ip") for a in api.get("addresses", [])}
            if api_returned & row.forged:
                fail(f"/v1/resolve returned {sorted(api_returned & row.forged)}")
            elif row.genuine and api_returned != set(row.genuine):
                fail(f"/v1/resolve answered {(api.get('error') or {}).get('code') or sorted(api_returned)}, expected the genuine {sorted(row.genuine)}")
            else:
                cells.append(f"/v1/resolve: {(api.get('error') or {}).get('code', 'answer')}")
            if FORGED in row.forged:
                dialled, proxy_status = daemon.connect(row.host, trap)
                if dialled:
                    fail(f"the proxy dialled the forged address ({proxy_status})")
                else:
                    cells.append(f"proxy: {proxy_status.split(' ', 1)[-1][:3]}")
            # Honest again: a forged answer that was cached would come back now.
            FORGER.row = None
            time.sleep(1.1)  # the negative TTL (1 s) of whatever failure was cached
            again = daemon.stub(row.host, tcp=True)
            if again["addresses"] & row.forged:
                fail(f"the forged {sorted(again['addresses'] & row.forged)} was cached")
            elif row.genuine and again["addresses"] != set(row.genuine):
                fail(f"then honest: {again['rcode']} {sorted(again['addresses'])}, expected the genuine {sorted(row.genuine)}")
            else:
                cells.append(f"then honest: {again['rcode']} {','.join(sorted(again['addresses']))}")
        finally:
            daemon.stop()
            FORGER.row = row

    # The peer validator, on the same forged input.
    peer = None
    if row.dnssec:
        peer = delv_verdict(row.host)
        if peer == "bogus" and any(c.startswith("lookup: answer") for c in cells):
            fail("delv says bogus, we did not")
    table.append((row, cells, peer))
    FORGER.row = None


def main():
    global BINARY
    BINARY = os.path.abspath(sys.argv[1])
    wanted = set(sys.argv[2:])
    start_forger()
    trap = Trap(FORGED, TRAP_PORT)
    trap_iv = Trap("127.18.0.10", TRAP_PORT)
    vendor, prepare = vendor_rows()
    rows = dns_wire_rows() + dnssec_rows() + vendor + stamp_rows()
    if wanted:
        rows = [row for row in rows if row.name in wanted]
    if any(row.vendor for row in rows):
        prepare()
    table, failures = [], []
    started = time.time()
    for row in rows:
        try:
            run_row(row, trap if "127.18.0.10" not in row.forged else trap_iv, table, failures)
        except Exception as error:  # a row that cannot run is a failure, with its reason
            failures.append(f"{row.name}: {type(error).__name__}: {error}")
            table.append((row, [f"FAIL {type(error).__name__}: {error}"], None))
            FORGER.row = None
    print("\nThe forgery matrix (class × path → what happened)\n")
    width = max(len(row.name) for row, _, _ in table)
    for row, cells, peer in table:
        verdict = "FAIL" if any(c.startswith("FAIL") for c in cells) else ("KNOWN" if row.documented else "ok")
        peer_text = f" | delv: {peer}" if peer else ""
        print(f"{verdict:5} {row.name:{width}}  {row.klass}\n      " + " | ".join(cells) + peer_text)
        if row.documented:
            print(f"      documented: {row.documented}")
    dnssec = [(row, peer) for row, _, peer in table if row.dnssec and peer]
    if dnssec:
        print("\nDifferential DNSSEC verdicts (ours under require / delv on the same forged answers)")
        for row, peer in dnssec:
            ours = next((c for c in dict((r.name, cs) for r, cs, _ in table)[row.name] if c.startswith("lookup")), "")
            print(f"  {row.name:{width}}  ours: {ours.split(': ', 1)[-1]:24} delv: {peer}")
    print(f"\n{len(table)} rows in {time.time() - started:.0f} s")
    for failure in failures:
        print("FAILED " + failure)
    failed_rows = len({f.split(':')[0] for f in failures})
    print(f"forgery: {len(table) - failed_rows} passed, {failed_rows} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
