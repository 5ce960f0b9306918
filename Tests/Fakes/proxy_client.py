#!/usr/bin/python3
"""A load balancer's side of the PROXY protocol v2: one DNS query with a header before it.

    proxy_client.py TRANSPORT SOURCE_IP PORT HEADER NAME [CA SNI]

TRANSPORT is udp, tcp, dot or doh (HTTP/1.1 POST over TLS, checked against CA for SNI). The socket is
bound to SOURCE_IP (a trusted proxy's address or not). HEADER is CLIENT_IP:CLIENT_PORT (a v2 header
naming that client), "none" (no header), "v1" (version 1's text header) or "bad" (a v2 header with
version 1 in its version nibble). Prints one JSON line: {"rcode": "...", "answers": [...]} or
{"error": "..."} when the connection closed or nothing came within 2 s.
"""
import json
import socket
import ssl
import struct
import sys

import dns.message
import dns.rcode

SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def header(spec, datagram, destination_port):
    if spec == "none":
        return b""
    if spec == "v1":
        return b"PROXY TCP4 198.51.100.9 127.0.0.1 4242 53\r\n"
    if spec == "bad":
        return SIGNATURE + bytes([0x11, 0x11, 0, 12]) + bytes(12)
    ip, _, port = spec.rpartition(":")
    v6 = ":" in ip
    family = socket.AF_INET6 if v6 else socket.AF_INET
    source = socket.inet_pton(family, ip)
    destination = bytes(16) if v6 else socket.inet_aton("127.0.0.1")
    body = source + destination + struct.pack("!HH", int(port), destination_port)
    return SIGNATURE + bytes([0x21, (0x20 if v6 else 0x10) | (2 if datagram else 1)]) + struct.pack("!H", len(body)) + body


def main():
    transport, source_ip, port, spec, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    query = dns.message.make_query(name, "A").to_wire()
    try:
        if transport == "udp":
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((source_ip, 0))
            sock.settimeout(2)
            sock.sendto(header(spec, True, port) + query, ("127.0.0.1", port))
            wire = sock.recv(65535)
        else:
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.bind((source_ip, 0))
            raw.settimeout(2)
            raw.connect(("127.0.0.1", port))
            raw.sendall(header(spec, False, port))
            sock = raw
            if transport in ("dot", "doh"):
                context = ssl.create_default_context(cafile=sys.argv[6])
                context.set_alpn_protocols(["dot"] if transport == "dot" else ["http/1.1"])
                sock = context.wrap_socket(raw, server_hostname=sys.argv[7])
            if transport == "doh":
                request = (f"POST /dns-query HTTP/1.1\r\nHost: {sys.argv[7]}\r\ncontent-type: application/dns-message\r\n"
                           f"accept: application/dns-message\r\ncontent-length: {len(query)}\r\nconnection: close\r\n\r\n").encode()
                sock.sendall(request + query)
                response = b""
                while True:
                    chunk = sock.recv(65535)
                    if not chunk:
                        break
                    response += chunk
                head, _, wire = response.partition(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    print(json.dumps({"error": head.split(b"\r\n")[0].decode(errors="replace") or "closed"}))
                    return
            else:
                sock.sendall(struct.pack("!H", len(query)) + query)
                length = sock.recv(2)
                if len(length) < 2:
                    print(json.dumps({"error": "closed"}))
                    return
                wire = b""
                while len(wire) < struct.unpack("!H", length)[0]:
                    chunk = sock.recv(65535)
                    if not chunk:
                        break
                    wire += chunk
        message = dns.message.from_wire(wire)
        answers = [rdata.to_text() for rrset in message.answer for rdata in rrset]
        print(json.dumps({"rcode": dns.rcode.to_text(message.rcode()), "answers": answers}))
    except (socket.timeout, TimeoutError):
        print(json.dumps({"error": "timeout"}))
    except (ConnectionError, ssl.SSLError, OSError) as error:
        print(json.dumps({"error": type(error).__name__}))


main()
