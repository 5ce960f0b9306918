#!/usr/bin/python3
"""A DNS-over-TLS server on loopback that misbehaves on purpose, for the DoT upstream's tests.

    dot_server.py [IP:]PORT CERT KEY MODE LOG

Every query for NAME gets A 198.18.0.10 / AAAA 2001:2::10 (TTL 300), padded to 468-byte blocks when the
query was padded (RFC 8467), unless MODE says otherwise:

    reorder       answers each batch of queries read together in reverse order (RFC 7766 allows it)
    close-after-3 answers three queries on a connection, then closes it with the rest unanswered
    garbage       answers with a 5-byte message
    silent        completes the handshake and never answers
    other-name    answers with the question of another name (a forged answer for the wrong name)
    other-id      answers with an ID the client did not use

One line per connection ("connection N") and per query ("query NAME TYPE size=BYTES padding=BYTES|none",
the query's length and its EDNS Padding option's) goes to LOG.
"""
import socket
import ssl
import struct
import sys
import threading

import dns.edns
import dns.message
import dns.rdatatype
import dns.rrset

# PORT, or IP:PORT for another loopback address.
host, _, port_text = sys.argv[1].rpartition(":")
host, port = host or "127.0.0.1", int(port_text)
cert, key, mode, log_path = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
log_lock = threading.Lock()
connections = 0


def log(line):
    with log_lock, open(log_path, "a") as handle:
        handle.write(line + "\n")


def answer(wire):
    query = dns.message.from_wire(wire)
    question = query.question[0]
    padding = next((len(option.to_wire()) for option in query.options if option.otype == 12), None) if query.edns >= 0 else None
    log(
        f"query {question.name.to_text(omit_final_dot=True)} {dns.rdatatype.to_text(question.rdtype)}"
        f" size={len(wire)} padding={'none' if padding is None else padding}"
    )
    name = question.name
    if mode == "other-name":
        query = dns.message.make_query("www.other.test", question.rdtype)
        query.id = struct.unpack("!H", wire[:2])[0]
        name = query.question[0].name
    response = dns.message.make_response(query)
    if question.rdtype == dns.rdatatype.A:
        response.answer.append(dns.rrset.from_text(name, 300, "IN", "A", "198.18.0.10"))
    elif question.rdtype == dns.rdatatype.AAAA:
        response.answer.append(dns.rrset.from_text(name, 300, "IN", "AAAA", "2001:2::10"))
    if padding is not None:
        # As an RFC 8467 server does: a padded query's answer padded to 468-byte blocks.
        size = len(response.to_wire())
        response.use_edns(0, options=[dns.edns.GenericOption(12, b"\0" * ((468 - (size + 4) % 468) % 468))])
    out = response.to_wire()
    if mode == "other-id":
        out = struct.pack("!H", (response.id + 1) & 0xFFFF) + out[2:]
    if mode == "garbage":
        out = b"\x00\x01\x02\x03\x04"
    return struct.pack("!H", len(out)) + out


def serve(conn):
    buffer = b""
    answered = 0
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            buffer += data
            batch = []
            while len(buffer) >= 2 and len(buffer) >= 2 + struct.unpack("!H", buffer[:2])[0]:
                length = struct.unpack("!H", buffer[:2])[0]
                batch.append(buffer[2 : 2 + length])
                buffer = buffer[2 + length :]
            if mode == "silent":
                continue
            if mode == "reorder":
                batch.reverse()
            for wire in batch:
                if mode == "close-after-3" and answered == 3:
                    conn.close()
                    return
                conn.sendall(answer(wire))
                answered += 1
    except (OSError, ssl.SSLError):
        return
    finally:
        try:
            conn.close()
        except OSError:
            pass


context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind((host, port))
listener.listen(64)
log("listening")
while True:
    raw, _ = listener.accept()
    connections += 1
    log(f"connection {connections}")

    def handshake(raw=raw):
        try:
            conn = context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        serve(conn)

    threading.Thread(target=handshake, daemon=True).start()
