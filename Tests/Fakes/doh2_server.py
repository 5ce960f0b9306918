#!/usr/bin/python3
"""A DNS-over-HTTPS server that speaks HTTP/2 (ALPN `h2`, python3-h2) on loopback, for tests that
need the client's own HTTP/2 connection: a DoH upstream with certificate hashes (a DNS stamp's) is
asked over HTTP/2 only.

    DoH2Server(port, chain, key, answer, alerts=0).start()    # in a test; .close() to stop
    doh2_server.py PORT CHAIN KEY ADDRESS [ALERTS]             # by hand: A ADDRESS for every name

`chain` is a PEM file: the leaf, then whatever else the server is to send (extra certificates are
sent as they are, in order). `answer(wire)` returns the response's wire bytes, or None for a 502.
RFC 8484 GET (`?dns=`) and POST are both read.

`alerts`: the first `alerts` connections get, in place of a ServerHello, a plaintext TLS alert record
(fatal, `no_application_protocol`, 120: `15 03 03 00 02 02 78`) and are closed: what any on-path
attacker can send, since nothing in a TLS alert before the handshake is authenticated.
"""
import base64
import socket
import ssl
import struct
import sys
import threading
import urllib.parse

import h2.config
import h2.connection
import h2.events
import h2.exceptions

# Fatal (2), no_application_protocol (120), as a TLS 1.2-versioned plaintext alert record.
FORGED_ALERT = bytes.fromhex("15030300020278")


class DoH2Server:
    def __init__(self, port, chain, key, answer, alerts=0, host="127.0.0.1"):
        self.address = (host, port)
        self.answer = answer
        self.alerts = alerts
        self.connections = 0   # accepted TCP connections
        self.alerted = 0       # connections answered with the forged alert
        self.handshakes = 0    # TLS handshakes completed (ALPN h2)
        self.requests = 0      # DoH requests answered
        self.lock = threading.Lock()
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(chain, key)
        self.context.set_alpn_protocols(["h2"])
        self.sock = None

    def start(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(self.address)
        self.sock.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self):
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
            self.sock = None

    def _accept(self):
        sock = self.sock
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                forge = self.connections <= self.alerts
            threading.Thread(target=self._alert if forge else self._serve, args=(client,), daemon=True).start()

    def _alert(self, client):
        """Reads the ClientHello's record, answers it with the forged alert and closes."""
        try:
            client.settimeout(5)
            head = _read(client, 5)
            if len(head) == 5:
                _read(client, struct.unpack("!H", head[3:5])[0])
            client.sendall(FORGED_ALERT)
            with self.lock:
                self.alerted += 1
            client.shutdown(socket.SHUT_WR)
            client.settimeout(1)
            while client.recv(4096):  # until the client hangs up: no reset before it read the alert
                pass
        except OSError:
            pass
        finally:
            client.close()

    def _serve(self, client):
        try:
            client.settimeout(10)
            tls = self.context.wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError):
            client.close()
            return  # clients that refuse the certificate hang up mid-handshake: expected
        with self.lock:
            self.handshakes += 1
        try:
            self._http2(tls)
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError):
            pass
        finally:
            tls.close()

    def _http2(self, tls):
        connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        connection.initiate_connection()
        tls.sendall(connection.data_to_send())
        streams = {}
        while True:
            data = tls.recv(65536)
            if not data:
                return
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    streams[event.stream_id] = (dict(event.headers), bytearray())
                elif isinstance(event, h2.events.DataReceived):
                    if event.stream_id in streams:
                        streams[event.stream_id][1].extend(event.data)
                    connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id in streams:
                    headers, body = streams.pop(event.stream_id)
                    self._respond(connection, event.stream_id, headers, bytes(body))
                elif isinstance(event, h2.events.StreamReset):
                    streams.pop(event.stream_id, None)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    tls.sendall(connection.data_to_send())
                    return
            out = connection.data_to_send()
            if out:
                tls.sendall(out)

    def _respond(self, connection, stream, headers, body):
        wire = body
        if headers.get(":method") == "GET":
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(headers.get(":path", "")).query).get("dns", [""])[0]
            try:
                wire = base64.urlsafe_b64decode(query + "=" * (-len(query) % 4))
            except Exception:
                wire = b""
        answer = self.answer(wire) if wire else None
        with self.lock:
            self.requests += 1
        status, content_type, payload = ("200", "application/dns-message", answer) if answer is not None else ("502", "text/plain", b"")
        connection.send_headers(stream, [(":status", status), ("content-type", content_type), ("content-length", str(len(payload)))],
                                end_stream=not payload)
        size = connection.max_outbound_frame_size
        for offset in range(0, len(payload), size):
            connection.send_data(stream, payload[offset:offset + size], end_stream=offset + size >= len(payload))


def _read(sock, count):
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


if __name__ == "__main__":
    import time

    import dns.message
    import dns.rrset

    port, chain, key, address = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    alerts = int(sys.argv[5]) if len(sys.argv) > 5 else 0

    def answer(wire):
        query = dns.message.from_wire(wire)
        response = dns.message.make_response(query)
        question = query.question[0]
        if question.rdtype == 1:
            response.answer.append(dns.rrset.from_text(question.name, 300, "IN", "A", address))
        return response.to_wire()

    server = DoH2Server(port, chain, key, answer, alerts).start()
    while True:
        time.sleep(3600)
