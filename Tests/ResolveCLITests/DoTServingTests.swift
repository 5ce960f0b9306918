import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// `dot_listen`: DNS over TLS served to kdig (`+tls`, certificate verified against the test CA),
    /// to Debian's stubby (a real DoT stub, as systemd-resolved and Android's Private DNS are DoT
    /// clients), to a pipelining client that sends 20 queries before reading, and refused to a
    /// silent client and a client that does not speak TLS.
    @Suite(.serialized) struct DoTServingTests {
        static let port = 18519
        static let dotPort = 18520
        let daemon: DaemonProcess
        let directory: URL

        init() async throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("dot-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            daemon = try await DaemonProcess(
                config: DaemonProcess.config(
                    port: Self.port,
                    extra: """
                        \(DaemonProcess.tlsConfig)
                        dot_listen: "127.0.0.1:\(Self.dotPort)"
                        limits: {request_timeout: 1}
                        records: ["nas.home.test A 192.168.1.10"]
                        """), port: Self.port, https: true)
        }

        func kdig(_ arguments: [String]) async throws -> CLI.Output {
            try await CLI.run(
                [
                    "@127.0.0.1", "-p", "\(Self.dotPort)", "+tls", "+tls-ca=\(TestEnvironment.caFile)", "+tls-hostname=localhost",
                    "+timeout=5", "+retry=0",
                ] + arguments, executable: "/usr/bin/kdig")
        }

        /// Runs Python (Debian's, with its `ssl`) on `script`; its stdout.
        func python(_ script: String) async throws -> String {
            let file = directory.appendingPathComponent("client-\(UUID().uuidString).py")
            try script.write(to: file, atomically: true, encoding: .utf8)
            let output = try await CLI.run([file.path, TestEnvironment.caFile, "\(Self.dotPort)"], executable: "/usr/bin/python3")
            return output.stdout + output.stderr
        }

        @Test func dotClientsGetAnswersAndHostileOnesAreClosed() async throws {
            var stubbyPID: Int32?
            defer {
                if let stubbyPID { kill(stubbyPID, SIGKILL) }
                daemon.stop()
                try? FileManager.default.removeItem(at: directory)
            }
            // kdig over TLS: the trusted answer, a local record, a forwarded type.
            let www = try await kdig(["www.hd.test", "A"])
            #expect(www.stdout.contains("198.18.0.10"), "\(www.stdout)\(www.stderr)")
            #expect(www.stdout.contains("TLS session (TLS1.3)"), "\(www.stdout)")
            #expect(try await kdig(["nas.home.test", "A"]).stdout.contains("192.168.1.10"))
            #expect(try await kdig(["www.hd.test", "TXT"]).stdout.contains("hd-test-txt"))

            // Pipelining: 20 queries written before any answer is read, each answered once.
            let pipelined = try await python(
                """
                import socket, ssl, struct, sys
                context = ssl.create_default_context(cafile=sys.argv[1])
                names = [f"p{i}.bench.hd.test" if i % 2 else "www.hd.test" for i in range(20)]
                def query(i, name):
                    wire = struct.pack(">HHHHHH", 0x100 + i, 0x0100, 1, 0, 0, 0)
                    wire += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\\0\\0\\1\\0\\1"
                    return struct.pack(">H", len(wire)) + wire
                with socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10) as raw:
                    with context.wrap_socket(raw, server_hostname="localhost") as tls:
                        tls.sendall(b"".join(query(i, n) for i, n in enumerate(names)))
                        seen = []
                        buffer = b""
                        while len(seen) < 20:
                            chunk = tls.recv(65536)
                            if not chunk: break
                            buffer += chunk
                            while len(buffer) >= 2 and len(buffer) >= 2 + struct.unpack(">H", buffer[:2])[0]:
                                size = struct.unpack(">H", buffer[:2])[0]
                                message, buffer = buffer[2:2 + size], buffer[2 + size:]
                                seen.append(struct.unpack(">H", message[:2])[0] - 0x100)
                        print("answered", sorted(seen) == list(range(20)), len(seen))
                """)
            #expect(pipelined.contains("answered True 20"), "\(pipelined)")

            // stubby, Debian's DoT stub, with our daemon as its only upstream (authenticated by name).
            let stubbyPort = unusedLoopbackPort()
            let config = directory.appendingPathComponent("stubby.yml")
            try """
            resolution_type: GETDNS_RESOLUTION_STUB
            dns_transport_list: [GETDNS_TRANSPORT_TLS]
            tls_authentication: GETDNS_AUTHENTICATION_REQUIRED
            tls_ca_file: "\(TestEnvironment.caFile)"
            idle_timeout: 10000
            listen_addresses: [127.0.0.1@\(stubbyPort)]
            round_robin_upstreams: 0
            upstream_recursive_servers:
              - address_data: 127.0.0.1
                tls_port: \(Self.dotPort)
                tls_auth_name: "localhost"
            """.write(to: config, atomically: true, encoding: .utf8)
            stubbyPID = try await CLI.startDetached(
                ["/usr/bin/stubby", "-C", config.path], log: directory.appendingPathComponent("stubby.log").path)
            var answer = ""
            for _ in 0..<30 where !answer.contains("198.18.0.10") {
                try await Task.sleep(for: .milliseconds(200))
                answer = try await CLI.run(
                    ["@127.0.0.1", "-p", "\(stubbyPort)", "+tries=1", "+time=3", "+short", "www.hd.test", "A"], executable: "/usr/bin/dig"
                )
                .stdout
            }
            #expect(
                answer.contains("198.18.0.10"),
                "\(answer) \((try? String(contentsOf: directory.appendingPathComponent("stubby.log"), encoding: .utf8)) ?? "")")
            let metrics = daemon.text(try await daemon.get("/metrics"))
            #expect(metrics.contains("httpdns_dns_stub_queries_total{transport=\"dot\"}"), "\(metrics)")

            // A silent client is closed after limits.request_timeout (1 s); one that does not speak
            // TLS at once.
            let hostile = try await python(
                """
                import socket, sys, time
                port = int(sys.argv[2])
                silent = socket.create_connection(("127.0.0.1", port), timeout=5)
                start = time.monotonic()
                closed = silent.recv(1) == b""
                print("silent closed", closed, round(time.monotonic() - start))
                plain = socket.create_connection(("127.0.0.1", port), timeout=5)
                plain.sendall(b"\\x00\\x1d" + b"\\x12\\x34\\x01\\x00\\x00\\x01" + b"\\x00" * 23)
                data = plain.recv(4096)
                rest = plain.recv(4096) if data else b""
                print("plain", "alert" if data[:1] == b"\\x15" else repr(data[:8]), "closed", rest == b"")
                """)
            #expect(hostile.contains("silent closed True 1"), "\(hostile)")
            #expect(hostile.contains("plain alert closed True") || hostile.contains("plain b'' closed True"), "\(hostile)")
        }
    }
}
