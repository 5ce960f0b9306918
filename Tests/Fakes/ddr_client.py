#!/usr/bin/python3
"""dnspython's DDR client (RFC 9462: Resolver.try_ddr, dnspython 2.5+) against a plain DNS resolver.

    ddr_client.py IP PORT NAME

Prints one JSON line: the nameservers the resolver kept after try_ddr (DoH and DoT ones only when their
certificate, checked against the system's trust store or SSL_CERT_FILE, was valid for the target name
and named IP), and for each DoT one the answer to NAME A asked over it. Run with PYTHONPATH holding
dnspython 2.7 (Scripts/lib.sh need_python_peers): Debian 12's 2.3 has no try_ddr.
"""
import json
import sys

import dns.message
import dns.nameserver
import dns.rcode
import dns.resolver

ip, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
resolver = dns.resolver.Resolver(configure=False)
resolver.nameservers = [ip]
resolver.port = port
resolver.try_ddr(lifetime=5.0)
kept = []
for server in resolver.nameservers:
    # Nothing verified: the plain nameserver stays, as the string it was given.
    entry = {"kind": server.kind() if hasattr(server, "kind") else "Do53", "text": str(server)}
    if isinstance(server, dns.nameserver.DoHNameserver):
        entry["url"] = server.url
    if isinstance(server, dns.nameserver.DoTNameserver):
        entry.update(address=server.address, port=server.port, hostname=server.hostname)
        response = server.query(dns.message.make_query(name, "A"), timeout=5.0, source=None, source_port=0)
        entry["rcode"] = dns.rcode.to_text(response.rcode())
        entry["answer"] = [rdata.to_text() for rrset in response.answer for rdata in rrset]
    kept.append(entry)
print(json.dumps({"version": dns.version.version, "nameservers": kept}))
