#!/usr/bin/python3
"""A hostile plain-DNS server for a forward zone (docs/local-data.md, split DNS), on loopback, UDP
and TCP on one port, for the query-log case (redteam-4 F19):

    fake_dns.py --port P

Every question is answered NOERROR with a message of at most 1,232 bytes made of as many CNAME
records as fit: the first one's owner is a pointer to the question's name and its RDATA one long name
(255 bytes on the wire, 250 content bytes); every other record is 14 bytes, a compressed owner and a
2-byte pointer to that long name as RDATA. The long name's bytes are 0x01 (which a log writes as
`\\\\001`, 5 bytes in JSON) or `x` (1 byte); how many are 0x01 changes from answer to answer, so the
log lines these answers make vary between ~60 and ~85 KB (see ESCAPED). Prints "ready" once listening. Loopback only.
"""
import argparse
import socket
import struct
import threading

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
args = parser.parse_args()
LIMIT = 1232
# How many of the long name's 250 content bytes are 0x01, answer by answer; each one adds 4 bytes to
# each of the 67 CNAMEs' JSON, 268 bytes to the line (~17.7 KB + 268 per escaped byte for a question
# of q0000000.fz.test from 127.0.0.1). Blocks of 200 answers of 247 or 248 (lines of 83.9-84.2 KB,
# 49 of which leave 66-82 KB of a 4 MiB buffer: more than a 64 KiB reserve, less than the next line)
# alternate with 91 answers spread over 160-250 (lines of 60-85 KB, landing anywhere).
ESCAPED = [247, 248] * 100 + [160 + (index * 37) % 91 for index in range(91)]


def long_name(escaped):
    """A 255-byte wire name (labels of 63, 63, 63, 61) whose first `escaped` content bytes are 0x01."""
    content = b"\x01" * escaped + b"x" * (250 - escaped)
    labels = [content[0:63], content[63:126], content[126:189], content[189:250]]
    return b"".join(bytes([len(label)]) + label for label in labels) + b"\x00"


NAMES = [long_name(escaped) for escaped in ESCAPED]
state = {"answers": 0}


def answer(query):
    """The response to `query` (wire), or None for what is no question."""
    if len(query) < 17 or query[2] & 0x80:
        return None
    end = 12
    while end < len(query) and query[end] != 0:
        if query[end] & 0xC0:
            return None
        end += 1 + query[end]
    if end + 5 > len(query):
        return None
    question = query[12:end + 5]
    state["answers"] += 1
    target = NAMES[state["answers"] % len(NAMES)]
    first_offset = 12 + len(question)
    target_offset = first_offset + 12
    first = struct.pack(">HHHIH", 0xC00C, 5, 1, 300, len(target)) + target
    other = struct.pack(">HHHIHH", 0xC00C, 5, 1, 300, 2, 0xC000 | target_offset)
    count = 1 + (LIMIT - 12 - len(question) - len(first)) // len(other)
    flags = 0x8000 | (query[2] & 0x01) << 8 | 0x0080  # QR, the query's RD, RA; NOERROR
    header = struct.pack(">HHHHHH", struct.unpack(">H", query[:2])[0], flags, 1, count, 0, 0)
    return header + question + first + other * (count - 1)


def serve_udp(sock):
    while True:
        query, peer = sock.recvfrom(4096)
        response = answer(query)
        if response:
            try:
                sock.sendto(response, peer)
            except OSError:
                pass


def serve_tcp_client(conn):
    try:
        with conn:
            buffer = b""
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
                while len(buffer) >= 2 and len(buffer) >= 2 + struct.unpack(">H", buffer[:2])[0]:
                    size = struct.unpack(">H", buffer[:2])[0]
                    response = answer(buffer[2:2 + size])
                    buffer = buffer[2 + size:]
                    if response:
                        conn.sendall(struct.pack(">H", len(response)) + response)
    except OSError:
        pass


def serve_tcp(sock):
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=serve_tcp_client, args=(conn,), daemon=True).start()


udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
udp.bind(("127.0.0.1", args.port))
tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("127.0.0.1", args.port))
tcp.listen(64)
threading.Thread(target=serve_tcp, args=(tcp,), daemon=True).start()
print("ready", flush=True)
serve_udp(udp)
