#!/usr/bin/python3
"""Loopback fakes of the commercial HTTPDNS APIs (Alibaba legacy and v2, Tencent DNSPod D+, Baidu v4),
written from docs/commercial-apis.md ("Wire notes") independently of the Swift client: they check signatures
and expiries, decrypt requests, answer from BIND's zone (asked over plain DNS on loopback), and encrypt
answers, so a misunderstanding of the spec on one side shows up as a failure.

    vendor_httpdns.py --dir SECRETS_DIR --dns 127.0.0.1:PORT --cert C --key K --https-port P --http-port Q

Listeners (loopback only):
    127.0.0.1:P   HTTPS, every API            127.0.0.1:Q   plain HTTP, every API
    127.0.0.21:P  HTTPS, every API answers "ServiceLevelDeny" / HTTP 503 (a service IP to fail over from)
    127.0.0.23:P  HTTPS, every API, its clock two hours ahead (signatures look expired; Date says why)
Accounts: alibaba 100000 (signing required) and 100001 (unsigned allowed); tencent id 12345 with
key tencent.key (DES and AES) or token tencent.token; baidu 123456 with baidu.secret.
Names under vendor.test trigger faults (see FAULTS; a `TAG-` prefix is allowed). GET /stats returns request
counts as JSON; GET /stats?tag=TAG also counts the requests that named a `TAG-…` domain, so concurrent tests
can each count their own.
"""
import argparse
import base64
import hashlib
import hmac
import http.server
import json
import os
import socketserver
import ssl
import sys
import threading
import time
import urllib.parse

import dns.message
import dns.query
import dns.rdatatype
import dns.rcode
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

try:  # cryptography >= 43 moved TripleDES; single DES is TripleDES with K1 = K2 = K3.
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
except ImportError:
    TripleDES = algorithms.TripleDES

parser = argparse.ArgumentParser()
parser.add_argument("--dir", required=True)
parser.add_argument("--dns", required=True)
parser.add_argument("--cert", required=True)
parser.add_argument("--key", required=True)
parser.add_argument("--https-port", type=int, required=True)
parser.add_argument("--http-port", type=int, required=True)
parser.add_argument("--pidfile")
args = parser.parse_args()


def secret(name):
    with open(os.path.join(args.dir, name)) as f:
        return f.read().strip()


ALIBABA_SECRET = secret("alibaba.secret")  # hex, for v2 (hex-decoded) and legacy (as text)
ALIBABA_AES = bytes.fromhex(secret("alibaba.aes"))
TENCENT_KEY = secret("tencent.key").encode()
TENCENT_TOKEN = secret("tencent.token")
BAIDU_SECRET = secret("baidu.secret")
DNS_HOST, DNS_PORT = args.dns.rsplit(":", 1)
FAULTS = {  # name -> what the fake does instead of answering
    "ratelimit.vendor.test": "429",
    "servfail.vendor.test": "500",
    "garbage.vendor.test": "garbage",
    "html.vendor.test": "html",
    "empty.vendor.test": "empty",
    "huge.vendor.test": "huge",
    "othername.vendor.test": "othername",
    "badip.vendor.test": "badip",
    "tampered.vendor.test": "tampered",
}
stats = {"requests": 0, "names": 0}
tagged = {}
stats_lock = threading.Lock()


def fault_of(name):
    """The fault a name asks for: `garbage.vendor.test`, or `TAG-garbage.vendor.test`."""
    return FAULTS.get(name) or (FAULTS.get(name.split("-", 1)[1]) if "-" in name else None)


def count(names):
    """Counts one request for every `TAG-` prefix among its names."""
    with stats_lock:
        for tag in {name.split("-", 1)[0] for name in names if "-" in name}:
            tagged[tag] = tagged.get(tag, 0) + 1


current = threading.local()  # the request's ECS client IP, as each API carries it


def lookup(name, rdtype):
    """(addresses, ttl) for name/type from BIND; ([], 60) for NXDOMAIN/NODATA.
    ecs.vendor.test answers the client IP the request carried (ECS), so tests can see it arrive."""
    if name == "ecs.vendor.test":
        return ([getattr(current, "cip", None) or "192.0.2.0"], 60) if rdtype == dns.rdatatype.A else ([], 60)
    query = dns.message.make_query(name, rdtype)
    response = dns.query.udp(query, DNS_HOST, port=int(DNS_PORT), timeout=2)
    if response.rcode() != dns.rcode.NOERROR:
        return [], 60
    addresses = []
    for rrset in response.answer:
        if rrset.rdtype == rdtype:
            addresses += [r.address for r in rrset]
    if not addresses:
        return [], 60
    # The smallest TTL on the way, CNAMEs included, as a resolver's cache would count down.
    return addresses, min(rrset.ttl for rrset in response.answer)


def families(name, want4, want6):
    v4 = lookup(name, dns.rdatatype.A) if want4 else None
    v6 = lookup(name, dns.rdatatype.AAAA) if want6 else None
    return v4, v6


def check_expiry(expiry, now, max_window=86400):
    try:
        t = int(expiry)
    except ValueError:
        return "InvalidSignature"
    if t <= now:
        return "SignatureExpired"
    if t > now + max_window:
        return "InvalidDuration"
    return None


def cbc_encrypt(key, plaintext, iv=None):
    iv = iv or os.urandom(16)
    padder = padding.PKCS7(128).padder()
    data = padder.update(plaintext) + padder.finalize()
    enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return iv + enc.update(data) + enc.finalize()


def cbc_decrypt(key, blob):
    dec = Cipher(algorithms.AES(key), modes.CBC(blob[:16])).decryptor()
    data = dec.update(blob[16:]) + dec.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(data) + unpadder.finalize()


def des_encrypt(key, plaintext):
    padder = padding.PKCS7(64).padder()
    data = padder.update(plaintext) + padder.finalize()
    enc = Cipher(TripleDES(key[:8]), modes.ECB()).encryptor()
    return enc.update(data) + enc.finalize()


def des_decrypt(key, blob):
    dec = Cipher(TripleDES(key[:8]), modes.ECB()).decryptor()
    data = dec.update(blob) + dec.finalize()
    unpadder = padding.PKCS7(64).unpadder()
    return unpadder.update(data) + unpadder.finalize()


class Reply(Exception):
    def __init__(self, status, body, content_type="application/json"):
        self.status, self.body, self.content_type = status, body, content_type


def fault_reply(fault):
    if fault == "429":
        raise Reply(429, b'{"code":"TooManyRequests"}')
    if fault == "500":
        raise Reply(500, b'{"code":"InternalError"}')
    if fault == "garbage":
        raise Reply(200, bytes(range(256)) * 4, "application/octet-stream")
    if fault == "html":
        raise Reply(200, b"<html><body>Service temporarily unavailable</body></html>", "text/html")
    if fault == "empty":
        raise Reply(200, b"", "application/json")
    if fault == "huge":
        raise Reply(200, b'{"host":"huge.vendor.test","ips":["' + b"1" * 200000 + b'"]}')


def check_batch(names, limit):
    if not names or any(not n for n in names):
        raise Reply(400, b'{"code":"MissingArgument"}')
    if len(names) > limit:
        raise Reply(400, b'{"code":"TooManyHosts"}')


# --- Alibaba -----------------------------------------------------------------------------------
def alibaba_legacy(account, endpoint, q, now):
    signed = endpoint.startswith("sign_")
    if account not in ("100000", "100001"):
        raise Reply(403, b'{"code":"InvalidAccount"}')
    if not signed and account == "100000":
        raise Reply(403, b'{"code":"UnsignedInterfaceDisabled"}')
    host = q.get("host", "")
    if signed:
        problem = check_expiry(q.get("t", ""), now)
        expected = hashlib.md5(f"{host}-{ALIBABA_SECRET}-{q.get('t', '')}".encode()).hexdigest()
        if not hmac.compare_digest(expected, q.get("s", "")):
            problem = "InvalidSignature"
        if problem:
            raise Reply(403, json.dumps({"code": problem}).encode())
    names = host.split(",")
    current.cip = q.get("ip")
    check_batch(names, 5 if endpoint.endswith("resolve") else 1)
    count(names)
    query = q.get("query", "4")
    want4, want6 = "4" in query, "6" in query
    entries = []
    for name in names:
        fault = fault_of(name)
        fault_reply(fault)
        v4, v6 = families(name, want4, want6)
        entry = {"host": name, "client_ip": q.get("ip", "127.0.0.1")}
        ttl = None
        if v4 is not None:
            entry["ips"], ttl = v4
        if v6 is not None:
            entry["ipsv6"], ttl6 = v6
            ttl = ttl6 if ttl is None else min(ttl, ttl6)
        entry["ttl"], entry["origin_ttl"] = ttl, ttl
        if fault == "othername":
            entry["host"] = "decoy.vendor.test"
            entry["ips"] = ["198.51.100.66"]
        if fault == "badip":
            entry["ips"] = ["300.1.2.3"]
        entries.append(entry)
    if endpoint.endswith("resolve"):
        return {"dns": entries}
    return entries[0]


def alibaba_v2(q, now):
    if q.get("id") not in ("100000", "100001"):
        raise Reply(403, b'{"code":"InvalidAccount"}')
    signed = {k: v for k, v in q.items() if k not in ("s", "sid", "net", "sdk")}
    if "s" in q:
        text = "&".join(f"{k}={signed[k]}" for k in sorted(signed))
        expected = hmac.new(bytes.fromhex(ALIBABA_SECRET), text.encode(), hashlib.sha256).hexdigest()
        problem = check_expiry(q.get("exp", ""), now)
        if not hmac.compare_digest(expected, q["s"]):
            problem = "InvalidSignature"
        if problem:
            raise Reply(403, json.dumps({"code": problem}).encode())
    elif q.get("id") == "100000":
        raise Reply(403, b'{"code":"UnsignedInterfaceDisabled"}')
    mode = q.get("m", "0")
    if mode == "0":
        params = q
    else:
        try:
            blob = bytes.fromhex(q.get("enc", ""))
            if mode == "1":
                plain = cbc_decrypt(ALIBABA_AES, blob)
            elif mode == "2":
                plain = AESGCM(ALIBABA_AES).decrypt(blob[:12], blob[12:], None)
            else:
                raise ValueError
            params = json.loads(plain)
        except Exception:
            raise Reply(400, b'{"code":"MissingArgument"}')
    names = params.get("dn", "").split(",")
    current.cip = params.get("cip")  # inside `enc` when encrypted, a signed parameter when not
    check_batch(names, 5)
    count(names)
    query = params.get("q", "4")
    answers, tamper = [], False
    for name in names:
        fault = fault_of(name)
        fault_reply(fault)
        tamper = tamper or fault == "tampered"
        v4, v6 = families(name, "4" in query, "6" in query)
        answer = {"dn": name}
        if v4 is not None:
            answer["v4"] = {"ips": v4[0], "ttl": v4[1]}
            if not v4[0]:
                answer["v4"]["no_ip_code"] = "RRNotExist"
        if v6 is not None:
            answer["v6"] = {"ips": v6[0], "ttl": v6[1]}
            if not v6[0]:
                answer["v6"]["no_ip_code"] = "RRNotExist"
        if fault == "othername":
            answer = {"dn": "decoy.vendor.test", "v4": {"ips": ["198.51.100.66"], "ttl": 60}}
        if fault == "badip":
            answer["v4"] = {"ips": ["300.1.2.3"], "ttl": 60}
        answers.append(answer)
    data = {"cip": params.get("cip", "127.0.0.1"), "answers": answers}
    if mode == "0":
        return {"code": "success", "mode": 0, "data": data}
    plain = json.dumps(data).encode()
    if mode == "1":
        sealed = bytearray(cbc_encrypt(ALIBABA_AES, plain))
    else:
        nonce = os.urandom(12)
        sealed = bytearray(nonce + AESGCM(ALIBABA_AES).encrypt(nonce, plain, None))
    if tamper:
        if mode == "1":
            del sealed[-1]
        else:
            sealed[-1] ^= 0x55  # GCM: any altered byte fails authentication
    return {"code": "success", "mode": int(mode), "data": base64.b64encode(bytes(sealed)).decode()}


# --- Tencent -----------------------------------------------------------------------------------
def tencent(q, now):
    if "token" in q:
        if not hmac.compare_digest(q["token"], TENCENT_TOKEN):
            raise Reply(401, b"", "text/plain")
        dn, alg = q.get("dn", ""), None
    else:
        if q.get("id") != "12345":
            raise Reply(401, b"", "text/plain")
        alg = q.get("alg", "des")
        try:
            blob = bytes.fromhex(q.get("dn", ""))
            dn = (cbc_decrypt(TENCENT_KEY[:16], blob) if alg == "aes" else des_decrypt(TENCENT_KEY, blob)).decode()
        except Exception:
            raise Reply(401, b"", "text/plain")  # a wrong key decrypts to garbage: the service cannot tell
    if ";" in dn:  # the iOS SDK's optional ";expiry" suffix
        dn, expiry = dn.rsplit(";", 1)
        if check_expiry(expiry, now):
            raise Reply(401, b"", "text/plain")
    names = dn.split(",")
    check_batch(names, 10)
    count(names)
    kind = q.get("type", "a").lower()
    current.cip = q.get("ip")
    cip = q.get("ip", "127.0.0.1")
    lines, tamper = [], False
    for name in names:
        fault = fault_of(name)
        if fault in ("429", "500", "garbage", "html", "huge"):
            if fault == "429":
                raise Reply(429, b"", "text/plain")
            if fault == "500":
                raise Reply(500, b"", "text/plain")
            if fault == "html":
                raise Reply(200, b"<html>busy</html>", "text/html")
            if fault == "huge":
                raise Reply(200, b"1" * 200000, "text/plain")
            raise Reply(200, bytes(range(256)), "text/plain")
        if fault == "empty":
            if len(names) == 1 and kind == "a" and alg is None:
                raise Reply(200, b"", "text/plain")
        tamper = tamper or fault == "tampered"

        def part(result):
            ips, ttl = result
            return f"{';'.join(ips)},{ttl}" if ips else "0"

        if kind in ("addrs",):
            v4, v6 = families(name, True, True)
            body = f"{part(v4)}-{part(v6)}"
        else:
            v = lookup(name, dns.rdatatype.AAAA if kind == "aaaa" else dns.rdatatype.A)
            body = part(v)
        label = name
        if fault == "othername":
            label, body = "decoy.vendor.test", "198.51.100.66,60"
        if fault == "badip":
            body = "300.1.2.3,60"
        lines.append(f"{label}.:{body}|{cip}")
    text = "\n".join(lines).encode()
    if alg is None:
        raise Reply(200, text, "text/plain")
    sealed = bytearray(cbc_encrypt(TENCENT_KEY[:16], text) if alg == "aes" else des_encrypt(TENCENT_KEY, text))
    if tamper:
        del sealed[-1]  # CBC and ECB have no integrity check: a cut block is what a client can detect
    raise Reply(200, sealed.hex().encode(), "text/plain")


# --- Baidu -------------------------------------------------------------------------------------
def baidu(q, now):
    if q.get("account_id") != "123456":
        return 403, {"msg": "account invalid", "data": {}}
    dn = q.get("dn", "")
    expected = hashlib.md5(f"{dn}-{BAIDU_SECRET}-{q.get('t', '')}".encode()).hexdigest()
    if not hmac.compare_digest(expected, q.get("sign", "")):
        return 403, {"msg": "sign invalid", "data": {}}
    if check_expiry(q.get("t", ""), now):
        return 403, {"msg": "timestamp expired", "data": {}}
    names = dn.split(",")
    count(names)
    if len(names) > 10:
        return 400, {"msg": "too many domains", "data": {}}
    kind = q.get("type", "ipv4")
    current.cip = q.get("ip")
    data = {}
    for name in names:
        fault = fault_of(name)
        if fault == "429":
            return 429, {"msg": "rate limit exceeded", "data": {}}
        if fault == "500":
            return 500, {"msg": "internal error", "data": {}}
        fault_reply(fault if fault in ("garbage", "html", "empty", "huge") else None)
        v4, v6 = families(name, kind in ("ipv4", "dual"), kind in ("ipv6", "dual"))
        entry = {}
        if v4 is not None:
            entry["ipv4"] = {"ip": v4[0], "ttl": v4[1]}
        if v6 is not None:
            entry["ipv6"] = {"ip": v6[0], "ttl": v6[1]}
        if fault == "othername":
            name, entry = "decoy.vendor.test", {"ipv4": {"ip": ["198.51.100.66"], "ttl": 60}}
        if fault == "badip":
            entry["ipv4"] = {"ip": ["300.1.2.3"], "ttl": 60}
        data[name] = entry
    return 200, {"msg": "ok", "data": data, "clientip": q.get("ip", "127.0.0.1"), "timestamp": now}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY the body waits for the
    # client's delayed ACK (40 ms on Linux) and every latency measured against the fake is that.
    disable_nagle_algorithm = True
    skew = 0
    deny = False

    def log_message(self, *_):
        pass

    def date_time_string(self, timestamp=None):
        return super().date_time_string(time.time() + self.skew)

    def reply(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        parts = [p for p in url.path.split("/") if p]
        now = int(time.time() + self.skew)
        if url.path == "/stats":
            with stats_lock:
                answer = dict(stats, tagged=tagged.get(q.get("tag"), 0))
            return self.reply(200, json.dumps(answer).encode(), "application/json")
        with stats_lock:
            stats["requests"] += 1
        try:
            if self.deny:
                if parts == ["d"]:
                    raise Reply(503, b"", "text/plain")
                if parts[:2] == ["v4", "resolve"]:
                    raise Reply(503, b'{"msg":"service unavailable"}')
                raise Reply(403, b'{"code":"ServiceLevelDeny"}')
            if parts == ["v2", "d"]:
                result = alibaba_v2(q, now)
            elif parts == ["v4", "resolve"]:
                status, result = baidu(q, now)
                raise Reply(status, json.dumps(result).encode())
            elif len(parts) == 2 and parts[1] in ("d", "sign_d", "resolve", "sign_resolve"):
                result = alibaba_legacy(parts[0], parts[1], q, now)
            elif parts == ["d"]:
                tencent(q, now)
                raise Reply(500, b"", "text/plain")
            else:
                raise Reply(404, b'{"code":"NotFound"}')
            raise Reply(200, json.dumps(result).encode())
        except Reply as r:
            self.reply(r.status, r.body, r.content_type)
        except Exception as e:  # a defect in the fake: say so loudly
            print(f"vendor fake: {e!r}", file=sys.stderr)
            self.reply(500, b'{"code":"InternalError"}', "application/json")

    def do_POST(self):
        self.reply(405, b'{"code":"MethodNotAllowed"}', "application/json")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops the SYNs of a burst of new connections (a batch
    # warm-up opens one per request over HTTP/1.1), and each dropped SYN costs a 1 s retransmit.
    request_queue_size = 256

    def server_bind(self):
        # HTTPServer's own looks the bound address up (socket.getfqdn): for 127.0.0.21 and .23,
        # which /etc/hosts does not name, that is a PTR query to the machine's resolver, off-machine.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address):
        pass  # clients that hang up or fail the TLS handshake (the wrong-name tests) are expected


def serve(host, port, tls, **behaviour):
    handler = type("H", (Handler,), behaviour)
    server = Server((host, port), handler)
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        # The handshake happens in the request's thread, so a silent client cannot stall accept().
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()


serve("127.0.0.1", args.https_port, True)
serve("127.0.0.1", args.http_port, False)
serve("127.0.0.21", args.https_port, True, deny=True)
serve("127.0.0.23", args.https_port, True, skew=7200)
if args.pidfile:
    with open(args.pidfile, "w") as f:
        f.write(str(os.getpid()))
threading.Event().wait()
