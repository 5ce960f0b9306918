#!/usr/bin/python3
"""Differential conformance: the same query to BIND 9.18 (authoritative for the test zones) and to
`resolve daemon` in front of it (its DNS stub over UDP and TCP, and its DoH endpoint), over a
generated corpus of what clients send — every name length from 1 to 253 octets and label lengths
from 1 to 63 in several letter cases; no EDNS, EDNS 0 and 1, buffer sizes 0 to 65535, DO and CD,
cookies (good and malformed), padding, ECS, an unknown option, several at once; the common record
types and classes; NXDOMAIN and NODATA; answers too big for 512 bytes or for the client's buffer —
and the answers are compared: RCODE, the flags that must match, the question echoed byte for byte
(0x20 case), answer RRsets as sets, OPT present or not, the client's buffer honoured, TC.

Where the daemon deliberately differs from BIND the case is named with its reason (DIFFERENCES).
dig and kdig with their default options ask a few names of each length class as well.

    /usr/bin/python3 Tests/Conformance/differential.py RESOLVE_BINARY

Needs Scripts/env/testenv.sh running. Every socket is on 127.0.0.1; the corpus is bounded.
"""
import base64
import http.client
import os
import random
import shutil
import ssl
import struct
import subprocess
import sys
import tempfile
import time

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdataclass
import dns.rdatatype

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Fakes"))
from resolve_daemon import ResolveDaemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CA = os.path.join(ROOT, ".testenv/ca/ca.pem")
BIND = ("127.0.0.1", 18053)
HTTP_PORT, DNS_PORT = 18693, 18694

# The deliberate differences, each with its reason; a comparison that differs in one of these ways
# is counted as documented, not failed.
DIFFERENCES = {
    "aa": "AA: BIND is authoritative for the zone; the daemon is a resolver answering from its cache and upstreams (AA 0, RA 1)",
    "ra": "RA: the daemon offers recursion (RA 1); this BIND is authoritative only (recursion no)",
    "udp-size": "over UDP the daemon sends at most 1,232 bytes (DNS Flag Day 2020) where this BIND is configured to send up to "
                "4,096 (max-udp-size): answers between the two sizes are TC from the daemon, whole from BIND",
    "cookie": "DNS cookies (RFC 7873): BIND answers a client cookie with a server cookie and FORMERRs malformed ones; the daemon "
              "ignores the option, which RFC 7873 §5.2 allows a server that does not implement cookies",
    "any-udp": "ANY over UDP: BIND answers minimally (RFC 8482); the daemon forwards over DoH, where BIND answers in full",
    "class": "classes other than IN: forwarded to the upstream as they are (over DoH BIND answers them as over TCP)",
    "ede": "extended DNS errors and NSID: BIND's options in the OPT record are not the daemon's",
    "cname-flattened": "a CNAME chain for A/AAAA is answered as one CNAME from the name to its canonical name, then the addresses: "
                       "the engine keeps the canonical name, not each link (the same addresses, the same owner for them)",
}


def flattened(ours, bind, qname):
    """Whether `ours` is BIND's CNAME chain from `qname` flattened to one CNAME to the same target
    with the same final records."""
    ours_cnames = [entry for entry in ours if entry[1] == dns.rdatatype.CNAME]
    bind_cnames = [entry for entry in bind if entry[1] == dns.rdatatype.CNAME]
    if len(ours_cnames) != 1 or len(bind_cnames) < 2 or ours_cnames[0][0] != qname:
        return False
    target = ours_cnames[0][3]
    chained_to = {entry[3] for entry in bind_cnames}
    return target in chained_to and {e for e in ours if e[1] != dns.rdatatype.CNAME} == {e for e in bind if e[1] != dns.rdatatype.CNAME}


def daemon_config(directory):
    return f"""upstreams:
  - {{doh: "https://doh-a.test:18443/dns-query", bootstrap: [127.0.0.1]}}
ca_file: {CA}
allow_private: true
system_dns: ["127.0.0.1:18055"]
listen: "127.0.0.1:{HTTP_PORT}"
dns_listen: "127.0.0.1:{DNS_PORT}"
tls: {{cert: {ROOT}/.testenv/ca/daemon.test.pem, key: {ROOT}/.testenv/ca/daemon.test.key}}
"""


def start_daemon(binary):
    return ResolveDaemon(binary, daemon_config, prefix="differential-")


# --- The corpus ------------------------------------------------------------------------------

def name_of_length(total, label, rng, suffix="hd.test"):
    """A name of `total` octets in presentation form (no final dot) under `suffix` when it fits,
    with labels of at most `label` octets, in random letter case."""
    if total < len(suffix) + 2:
        base = "".join(rng.choice("abcdefghij") for _ in range(total))
        return ".".join(base[i:i + label] for i in range(0, len(base), label)).strip(".") or "a"
    room = total - len(suffix) - 1  # the prefix, dots included
    labels = []
    while room > 0:
        size = min(label, room)
        if room - size == 1:  # a lone dot left: shorten this label
            size -= 1
        labels.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(size)))
        room -= size + 1
    return ".".join(labels + [suffix])


def mixed_case(name, rng):
    return "".join(c.upper() if rng.random() < 0.5 else c for c in name)


def edns_variants():
    cookie = dns.edns.GenericOption(10, b"\x01\x02\x03\x04\x05\x06\x07\x08")
    cookie_server = dns.edns.GenericOption(10, b"\x01" * 8 + b"\x02" * 16)
    cookie_short = dns.edns.GenericOption(10, b"\x01" * 7)
    cookie_long = dns.edns.GenericOption(10, b"\x01" * 41)
    padding = dns.edns.GenericOption(12, b"\x00" * 100)
    ecs = dns.edns.ECSOption("192.0.2.0", 24)
    unknown = dns.edns.GenericOption(65001, b"hello")
    return [
        ("no-edns", dict(use_edns=False)),
        ("edns0", dict(use_edns=0, payload=1232)),
        ("edns0-size0", dict(use_edns=0, payload=0)),
        ("edns0-size512", dict(use_edns=0, payload=512)),
        ("edns0-size4096", dict(use_edns=0, payload=4096)),
        ("edns0-size65535", dict(use_edns=0, payload=65535)),
        ("edns1", dict(use_edns=1, payload=1232)),
        ("do", dict(use_edns=0, payload=1232, want_dnssec=True)),
        ("cd", dict(use_edns=0, payload=1232, flags=dns.flags.RD | dns.flags.CD)),
        ("cookie", dict(use_edns=0, payload=1232, options=[cookie], cookie=True)),
        ("cookie-server", dict(use_edns=0, payload=1232, options=[cookie_server], cookie=True)),
        ("cookie-short", dict(use_edns=0, payload=1232, options=[cookie_short], cookie=True)),
        ("cookie-long", dict(use_edns=0, payload=1232, options=[cookie_long], cookie=True)),
        ("padding", dict(use_edns=0, payload=1232, options=[padding])),
        ("ecs", dict(use_edns=0, payload=1232, options=[ecs])),
        ("unknown-option", dict(use_edns=0, payload=1232, options=[unknown])),
        ("several", dict(use_edns=0, payload=4096, options=[cookie, padding, unknown], want_dnssec=True, cookie=True)),
    ]


def make(name, rdtype="A", rdclass="IN", variant=None, rng=None):
    kwargs = dict(variant[1]) if variant else dict(use_edns=False)
    kwargs.pop("cookie", None)
    flags = kwargs.pop("flags", dns.flags.RD)
    query = dns.message.make_query(name, rdtype, rdclass, **kwargs)
    query.flags = flags
    query.id = rng.randrange(65536) if rng else 0x1234
    return query


def corpus(rng):
    cases = []
    variants = edns_variants()
    # Every name length from 1 to 253, labels up to 63, random case; EDNS variants in turn.
    for total in range(1, 254):
        label = [63, 1, 7, 30][total % 4]
        name = mixed_case(name_of_length(total, label, rng), rng)
        cases.append((f"len{total}", name, "A", "IN", variants[total % len(variants)]))
    # Every label length 1..63 in one name.
    for label in range(1, 64):
        name = mixed_case("x" * label + ".www.hd.test", rng)
        cases.append((f"label{label}", name, "A", "IN", variants[label % 3]))
    # Types, classes, NXDOMAIN, NODATA, sizes, under every EDNS variant.
    typed = [
        ("www.hd.test", "A"), ("www.hd.test", "AAAA"), ("alias.hd.test", "A"), ("chain1.hd.test", "AAAA"), ("hd.test", "MX"),
        ("long.hd.test", "TXT"), ("www.hd.test", "TXT"), ("_sip._tcp.hd.test", "SRV"), ("www.hd.test", "HTTPS"), ("svc.hd.test", "HTTPS"),
        ("hd.test", "SOA"), ("hd.test", "NS"), ("10.0.18.198.in-addr.arpa", "PTR"), ("www.hd.test", "ANY"), ("nope.hd.test", "A"),
        ("v6only.hd.test", "A"), ("v4only.hd.test", "AAAA"), ("big.hd.test", "A"), ("many.hd.test", "A"), ("wide.hd.test", "A"), ("alias.hd.test", "CNAME"),
        ("www.hd.test", "CAA"), ("nope.nope.hd.test", "TXT"),
    ]
    for name, rdtype in typed:
        for variant in variants:
            cases.append((f"{rdtype}-{variant[0]}", mixed_case(name, rng), rdtype, "IN", variant))
    for rdclass in ("CH", "ANY"):
        for name, rdtype in (("www.hd.test", "A"), ("version.bind", "TXT")):
            cases.append((f"class-{rdclass}", name, rdtype, rdclass, variants[1]))
    return cases


# --- Asking ----------------------------------------------------------------------------------

def udp(query, server):
    wire = query.to_wire()
    response = dns.query.udp(query, server[0], port=server[1], timeout=5, ignore_trailing=True, raise_on_truncation=False)
    return response, len(response.to_wire()) if response else 0


def tcp(query, server):
    return dns.query.tcp(query, server[0], port=server[1], timeout=5)


def doh(query):
    context = ssl.create_default_context(cafile=CA)
    connection = http.client.HTTPSConnection("127.0.0.1", HTTP_PORT, context=context, timeout=10)
    wire = query.to_wire()
    try:
        connection.request("GET", "/dns-query?dns=" + base64.urlsafe_b64encode(wire).decode().rstrip("="),
                           headers={"Host": "daemon.test", "Accept": "application/dns-message"})
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    if response.status != 200:
        return None, response.status
    return dns.message.from_wire(body, ignore_trailing=True), len(body)


def raw_udp(wire, port):
    """The response's bytes, for the question echo (dnspython folds nothing, but compare the bytes)."""
    import socket
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(5)
    try:
        sock.sendto(wire, ("127.0.0.1", port))
        return sock.recv(65535)
    finally:
        sock.close()


def question_bytes(wire):
    index = 12
    while wire[index] != 0:
        index += 1 + wire[index]
    return wire[12:index + 5]


def rrsets(section):
    return {(rr.name.to_text().lower(), rr.rdtype, rr.rdclass, rd.to_text().lower()) for rr in section for rd in rr}


def opt_present(message):
    return message.edns >= 0


def compare(case, query, bind_udp, bind_tcp, ours_udp, ours_tcp, ours_doh, raw_ours, raw_bind):
    """A list of (difference, detail): documented ones carry the DIFFERENCES key, the rest are failures."""
    label, name, rdtype, rdclass, variant = case
    out = []
    with_edns = query.edns >= 0
    client_size = max(512, query.payload) if with_edns else 512
    if rdclass != "IN":
        out.append(("class", ""))
    # The question, byte for byte (0x20 case), from each transport.
    if question_bytes(raw_ours) != question_bytes(query.to_wire()):
        out.append((None, "the stub's UDP answer does not echo the question's bytes"))
    for transport, message in (("tcp", ours_tcp), ("doh", ours_doh)):
        if message is not None and message.question and message.question[0].name.to_text() != query.question[0].name.to_text():
            out.append((None, f"{transport}: the question's case is not echoed"))
    # RCODE (extended included): the stub over TCP and DoH against BIND over TCP.
    for transport, message in (("udp", ours_udp), ("tcp", ours_tcp), ("doh", ours_doh)):
        reference = bind_udp if transport == "udp" else bind_tcp
        if message is None:
            out.append((None, f"{transport}: no answer"))
            continue
        if message.rcode() != reference.rcode():
            if "cookie" in variant[1] and reference.rcode() == dns.rcode.FORMERR:
                out.append(("cookie", f"{transport}: BIND {dns.rcode.to_text(reference.rcode())}"))
                continue
            if rdclass != "IN":
                continue
            out.append((None, f"{transport}: RCODE {dns.rcode.to_text(message.rcode())}, BIND {dns.rcode.to_text(reference.rcode())}"))
            continue
        # The flags that must match: QR, opcode, RD and CD copied.
        for flag, bit in (("QR", dns.flags.QR), ("RD", dns.flags.RD), ("CD", dns.flags.CD)):
            if bool(message.flags & bit) != bool(query.flags & bit if flag != "QR" else True):
                out.append((None, f"{transport}: {flag} not as the query's"))
        if message.flags & dns.flags.AA != reference.flags & dns.flags.AA:
            out.append(("aa", ""))
        if message.flags & dns.flags.RA != reference.flags & dns.flags.RA:
            out.append(("ra", ""))
        # OPT iff the query had one.
        if opt_present(message) != with_edns:
            out.append((None, f"{transport}: OPT {'present' if opt_present(message) else 'missing'} for a query {'with' if with_edns else 'without'} EDNS"))
        if transport == "udp":
            size = len(raw_ours)
            if size > client_size:
                out.append((None, f"udp: {size} bytes for a client that takes {client_size}"))
            if message.flags & dns.flags.TC:
                if not bind_udp.flags & dns.flags.TC:
                    out.append(("udp-size", ""))
                continue  # a truncated answer is compared over TCP
            if bind_udp.flags & dns.flags.TC:
                out.append((None, "udp: BIND truncated where the daemon did not"))
                continue
        if rdtype == "ANY" and transport == "udp":
            out.append(("any-udp", ""))
            continue
        reference_answer = rrsets((bind_tcp if rdtype == "ANY" else reference).answer)
        if rrsets(message.answer) != reference_answer and flattened(rrsets(message.answer), reference_answer, query.question[0].name.to_text().lower()):
            out.append(("cname-flattened", ""))
        elif rrsets(message.answer) != reference_answer and rdclass == "IN":
            out.append((None, f"{transport}: answer {sorted(rrsets(message.answer))[:3]} ≠ BIND {sorted(reference_answer)[:3]}"))
        bind_authority = rrsets(reference.authority)
        ours_authority = rrsets(message.authority)
        # A negative answer carries the zone's SOA as BIND's does (RFC 2308 §3), its TTL no longer
        # than BIND's (what remains of the cached answer's).
        if message.rcode() in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN) and not message.answer:
            for ours_rrset in message.authority:
                for bind_rrset in reference.authority:
                    if bind_rrset.rdtype == ours_rrset.rdtype == dns.rdatatype.SOA and ours_rrset.ttl > bind_rrset.ttl:
                        out.append((None, f"{transport}: the SOA's TTL {ours_rrset.ttl} > BIND's {bind_rrset.ttl}"))
        if ours_authority != bind_authority:
            if rdclass == "IN":
                out.append((None, f"{transport}: authority {sorted(ours_authority)[:2]} ≠ BIND {sorted(bind_authority)[:2]}"))
    return out


def clients(rng):
    """dig and kdig with their default options, a few names of each length class."""
    results = []
    for total in (5, 20, 40, 64, 100, 180, 253):
        name = name_of_length(total, 63, rng)
        for tool, args in (("dig", ["dig", f"@127.0.0.1", "-p", str(DNS_PORT), name, "A"]),
                           ("kdig", ["kdig", f"@127.0.0.1", "-p", str(DNS_PORT), name, "A"])):
            ours = subprocess.run(args, capture_output=True, text=True, timeout=20).stdout
            bind = subprocess.run([a if a != str(DNS_PORT) else str(BIND[1]) for a in args], capture_output=True, text=True, timeout=20).stdout
            def status(text):
                for line in text.splitlines():
                    if "status:" in line:
                        return line.split("status:")[1].split(",")[0].split(";")[0].strip()
                return "no answer"
            results.append((tool, total, status(ours), status(bind)))
    return results


def main():
    binary = os.path.abspath(sys.argv[1])
    rng = random.Random(20261126)
    cases = corpus(rng)
    daemon = start_daemon(binary)
    passed = documented = 0
    failures = []
    seen_differences = {}
    started = time.time()
    try:
        for case in cases:
            label, name, rdtype, rdclass, variant = case
            query = make(name, rdtype, rdclass, variant, rng)
            try:
                bind_udp, _ = udp(query, BIND)
                bind_tcp = tcp(query, BIND)
                raw_ours = raw_udp(query.to_wire(), DNS_PORT)
                raw_bind = raw_udp(query.to_wire(), BIND[1])
                ours_udp = dns.message.from_wire(raw_ours, ignore_trailing=True)
                ours_tcp = tcp(query, ("127.0.0.1", DNS_PORT))
                ours_doh, _ = doh(query)
            except Exception as error:
                failures.append(f"{label} {name} {rdtype} {variant[0]}: {type(error).__name__}: {error}")
                continue
            differences = compare(case, query, bind_udp, bind_tcp, ours_udp, ours_tcp, ours_doh, raw_ours, raw_bind)
            unexplained = [detail for key, detail in differences if key is None]
            if unexplained:
                failures.append(f"{label} {name} {rdtype} {rdclass} {variant[0]}: " + "; ".join(unexplained))
            elif differences:
                documented += 1
                for key, _ in differences:
                    seen_differences[key] = seen_differences.get(key, 0) + 1
            else:
                passed += 1
        tool_results = clients(rng)
    finally:
        daemon.stop()
    print(f"\nDifferential conformance against BIND 9.18: {len(cases)} queries × (stub UDP, stub TCP, DoH), {time.time() - started:.0f} s")
    print(f"  identical: {passed}; differing only in documented ways: {documented}; failed: {len(failures)}")
    for key, count in sorted(seen_differences.items()):
        print(f"  documented ({count} queries): {DIFFERENCES[key]}")
    tool_failures = 0
    for tool, total, ours, bind in tool_results:
        ok = ours == bind
        tool_failures += 0 if ok else 1
        print(f"  {tool:4} default options, a {total:3}-octet name: daemon {ours}, BIND {bind}{'' if ok else '  <- differs'}")
    for failure in failures[:40]:
        print("FAILED " + failure)
    total_failed = len(failures) + tool_failures
    print(f"differential: {passed + documented + len(tool_results) - tool_failures} passed, {total_failed} failed")
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())
