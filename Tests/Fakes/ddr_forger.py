#!/usr/bin/python3
"""A plain DNS resolver that lies about its designated resolvers: an on-path forger's answer to DDR.

    ddr_forger.py IP PORT RECORD...

With TRAP=IP:PORT in the environment it also listens there on TCP and prints "trap connection" for each
connection accepted: the address a forged hint names, which no client should dial. With SILENT=IP:PORT it
accepts connections there and never says a word (a designation that stalls every handshake). Answers `_dns.resolver.arpa` SVCB over UDP with the SVCB RECORDs given in presentation format
(`1 doh-a.test. alpn=h2 port=18443 key7="/dns-query{?dns}"`), every other question with REFUSED,
until killed. Prints "ready" once bound.
"""
import os
import socket
import sys
import threading

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

ip, port, texts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
records = [dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.SVCB, text) for text in texts]
if os.environ.get("TRAP"):
    trap_host, _, trap_port = os.environ["TRAP"].rpartition(":")
    trap = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    trap.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    trap.bind((trap_host, int(trap_port)))
    trap.listen(16)

    def accept():
        while True:
            connection, _ = trap.accept()
            print("trap connection", flush=True)
            connection.close()

    threading.Thread(target=accept, daemon=True).start()
held = []
if os.environ.get("SILENT"):
    silent_host, _, silent_port = os.environ["SILENT"].rpartition(":")
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    silent.bind((silent_host, int(silent_port)))
    silent.listen(64)

    def hold():
        while True:
            connection, _ = silent.accept()
            held.append(connection)

    threading.Thread(target=hold, daemon=True).start()
sock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((ip, port))
print("ready", flush=True)
while True:
    data, peer = sock.recvfrom(65535)
    try:
        query = dns.message.from_wire(data)
    except Exception:
        continue
    response = dns.message.make_response(query)
    question = query.question[0] if query.question else None
    if question is not None and question.name == dns.name.from_text("_dns.resolver.arpa") and question.rdtype == dns.rdatatype.SVCB:
        rrset = dns.rrset.RRset(question.name, dns.rdataclass.IN, dns.rdatatype.SVCB)
        for record in records:
            rrset.add(record, 300)
        response.answer.append(rrset)
    else:
        response.set_rcode(dns.rcode.REFUSED)
    sock.sendto(response.to_wire(), peer)
