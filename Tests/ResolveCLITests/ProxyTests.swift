import DNSCore
import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// The daemon's forward proxy (`proxy_listen`) with real clients: curl `-x` (CONNECT), Python's
    /// urllib with `HTTPS_PROXY`, and raw sockets for bad input. The system DNS (dnsmasq) lies for
    /// bank.hd.test; through the proxy the genuine origin answers (TLS verified end to end by the client).
    @Suite(.serialized) struct ProxyTests {
        typealias Env = TestEnvironment
        static let port = 18652
        static let proxyPort = 18653
        static let user = "tester", password = "proxy-test-pass-41"

        static func config(_ proxy: String, extra: String = "") -> String {
            DaemonProcess.config(
                port: port,
                extra: """
                    proxy_listen: "127.0.0.1:\(proxyPort)"
                    proxy: \(proxy)
                    limits: {request_timeout: 2}
                    \(extra)
                    """)
        }

        static let open =
            "{connect_ports: [443, \(Env.originPort), \(Env.originPlainPort)], allow_private_destinations: true, deny: [blocked.hd.test]}"
        var proxyURL: String { "http://127.0.0.1:\(Self.proxyPort)" }

        func curl(_ arguments: [String], config: String? = nil) async throws -> CLI.Output {
            var extra: [String] = []
            if let config {
                // Credentials in a config file, not in argv.
                let path = FileManager.default.temporaryDirectory.appendingPathComponent("curl-\(UUID().uuidString)").path
                try config.write(toFile: path, atomically: true, encoding: .utf8)
                extra = ["-K", path]
            }
            return try await CLI.run(
                ["-s", "--max-time", "20", "--cacert", Env.caFile, "-x", proxyURL] + extra + arguments, executable: "/usr/bin/curl")
        }

        @Test func curlTunnelsToTheGenuineOriginAndRefusalsSayWhy() async throws {
            let daemon = try await DaemonProcess(config: Self.config(Self.open), port: Self.port)
            defer { daemon.stop() }
            // bank.hd.test: the system DNS sends it to an impostor with another CA's certificate.
            let echo = try await curl(["-v", Env.origin("/echo", host: "bank.hd.test")])
            #expect(echo.stdout == "sni=bank.hd.test host=bank.hd.test method=GET proto=HTTP/2.0 cookie=\n", "\(echo.stderr)")
            #expect(echo.stderr.contains("200 Connection established"), "\(echo.stderr)")

            let port = try await curl(["-i", "https://origin.hd.test:8443/echo"])
            #expect(port.stdout.hasPrefix("HTTP/1.1 403") && port.stdout.contains("port 8443 is not allowed"), "\(port.stdout)")
            let denied = try await curl(["-i", Env.origin("/echo", host: "blocked.hd.test")])
            #expect(denied.stdout.hasPrefix("HTTP/1.1 403") && denied.stdout.contains("allow/deny"), "\(denied.stdout)")
            let missing = try await curl(["-i", Env.origin("/echo", host: "nope.hd.test")])
            #expect(missing.stdout.hasPrefix("HTTP/1.1 502") && missing.stdout.contains("X-HTTPDNS-Error: nxdomain"), "\(missing.stdout)")
            // dead.hd.test resolves to 127.0.0.7, where nothing listens.
            let refused = try await curl(["-i", Env.origin("/echo", host: "dead.hd.test")])
            #expect(refused.stdout.hasPrefix("HTTP/1.1 502") && refused.stdout.contains("cannot connect"), "\(refused.stdout)")
            let https = try await CLI.run(
                [
                    "-c",
                    "import socket; s = socket.create_connection(('127.0.0.1', \(Self.proxyPort))); s.sendall(b'GET https://origin.hd.test/ HTTP/1.1\\r\\nHost: origin.hd.test\\r\\n\\r\\n'); print(s.recv(200).split(b'\\r\\n')[0].decode())",
                ],
                executable: "/usr/bin/python3")
            #expect(https.stdout.hasPrefix("HTTP/1.1 400"), "absolute https:// must use CONNECT: \(https.stdout)\(https.stderr)")

            let metrics = daemon.text(try await daemon.get("/metrics"))
            #expect(metrics.contains("httpdns_proxy_requests_total{outcome=\"tunnel\"} 1"), "\(metrics)")
            #expect(metrics.contains("httpdns_proxy_requests_total{outcome=\"403\"} 2"))
            #expect(metrics.contains("httpdns_proxy_bytes_total{direction=\"downstream\"}"))
        }

        @Test func plainHTTPIsForwardedToTheTrustedAddressWithKeepAliveAndStreamedBodies() async throws {
            let daemon = try await DaemonProcess(config: Self.config(Self.open), port: Self.port)
            defer { daemon.stop() }
            // bank.hd.test: the system DNS says 127.0.0.8 (the impostor, no marker); the proxy asks HTTPDNS.
            let base = "http://bank.hd.test:\(Env.originPlainPort)"
            let two = try await curl(["-v", "-i", base + "/", base + "/ok"])
            #expect(two.stdout.contains("X-Genuine-Origin: \(Env.genuineMarker)") && two.stdout.contains("genuine origin\n"), "\(two.stdout)")
            #expect(two.stdout.contains("ok\n") && two.stdout.contains("Via: 1.1 resolve"), "\(two.stdout)")
            #expect(
                two.stderr.contains("Re-using existing connection") || two.stderr.contains("Reusing existing"),
                "keep-alive to the proxy: \(two.stderr)")

            // Three requests pipelined on one connection: three answers, in order.
            let pipelined = try await CLI.run(
                [
                    "-c",
                    """
                    import socket
                    s = socket.create_connection(("127.0.0.1", \(Self.proxyPort)), timeout=10)
                    base = "http://origin.hd.test:\(Env.originPlainPort)"
                    s.sendall("".join(f"GET {base}{path} HTTP/1.1\\r\\nHost: origin.hd.test\\r\\n\\r\\n" for path in ("/ok", "/echo-credentials", "/ok")).encode())
                    data = b""
                    while data.count(b"HTTP/1.1 200") < 3:
                        chunk = s.recv(65536)
                        if not chunk: break
                        data += chunk
                    print(data.count(b"HTTP/1.1 200"), data.index(b"ok\\n") < data.index(b"authorization="))
                    """,
                ], executable: "/usr/bin/python3")
            #expect(pipelined.stdout == "3 True\n", "\(pipelined.stdout)\(pipelined.stderr)")

            // A 4 MiB chunked upload, streamed to the origin, compared byte for byte.
            let upload = FileManager.default.temporaryDirectory.appendingPathComponent("proxy-up-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: upload) }
            let payload = try #require(FileHandle(forReadingAtPath: "/dev/urandom")).readData(ofLength: 4 << 20)
            try payload.write(to: upload)
            let sent = try await curl(
                ["-i", "-T", upload.path, "-H", "Transfer-Encoding: chunked", "http://origin.hd.test:\(Env.originPlainPort)/upload-file"])
            // curl sends `Expect: 100-continue` and waits 1 s for the 100 unless the proxy passes it on.
            #expect(sent.stdout.contains("HTTP/1.1 100 Continue"), "100 Continue is forwarded: \(sent.stdout)")
            let file = sent.stdout.split(separator: "\r\n").first { $0.lowercased().hasPrefix("x-request-body-file:") }
                .map { String($0.split(separator: ":", maxSplits: 1)[1]).trimmingCharacters(in: .whitespaces) }
            #expect(sent.stdout.contains("HTTP/1.1 200"), "\(sent.stdout)\(sent.stderr)")
            #expect(sent.stdout.lowercased().contains("x-transfer-encoding: chunked"), "\(sent.stdout)")
            if let file { #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == payload, "every uploaded byte arrives") }

            // A 64 MiB download, streamed back.
            let big = try await curl(["-o", "/dev/null", "-w", "%{http_code} %{size_download}", "http://origin.hd.test:\(Env.originPlainPort)/big"])
            #expect(big.stdout == "200 \(64 << 20)", "\(big.stdout)\(big.stderr)")
            // A port outside connect_ports (and not 80) is refused for plain HTTP too.
            let port = try await curl(["-i", "http://origin.hd.test:8080/"])
            #expect(port.stdout.hasPrefix("HTTP/1.1 403"), "\(port.stdout)")
            // Every client has gone: no connection is left open (a FIN from a kept-alive client
            // closes it; half-closure is only for tunnels).
            var open = ""
            for _ in 0..<20 {
                open =
                    daemon.text(try await daemon.get("/metrics")).split(separator: "\n")
                    .first { $0.hasPrefix("httpdns_connections_open{listener=\"proxy\"}") }.map(String.init) ?? ""
                if open.hasSuffix(" 0") || open.hasSuffix(" 0.0") { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(open.hasSuffix(" 0") || open.hasSuffix(" 0.0"), "\(open)")
        }

        @Test func aLargeDownloadStreamsThroughTheTunnel() async throws {
            let daemon = try await DaemonProcess(config: Self.config(Self.open), port: Self.port)
            defer { daemon.stop() }
            let output = FileManager.default.temporaryDirectory.appendingPathComponent("proxy-big-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: output) }
            // The relay thread moving the bulk runs as SCHED_BATCH while it does (no wake-up
            // preemption: larger batches per wake-up) and returns to SCHED_OTHER once the bulk has
            // stopped, so interactive tunnels keep normal latency.
            let pid = daemon.process.processIdentifier
            async let batchSeen: Bool = {
                for _ in 0..<60 {
                    if Self.threadPolicies(pid, named: "httpdns-relay").contains(3) { return true }
                    try? await Task.sleep(for: .milliseconds(50))
                }
                return false
            }()
            let download = try await curl(["-o", output, "-w", "%{http_code} %{size_download}", Env.origin("/big")])
            #expect(await batchSeen, "a relay thread (httpdns-relay) ran as SCHED_BATCH during the 48 MB/s download")
            var policies: Set<Int> = []
            for _ in 0..<20 {
                policies = Self.threadPolicies(pid)
                if policies == [0] { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(policies == [0], "every thread is SCHED_OTHER again after the bulk: \(policies)")
            let expected = try FileManager.default.attributesOfItem(atPath: Env.root + "/.testenv/nginx/www/big.bin")[.size] as? Int
            #expect(download.stdout == "200 \(expected ?? -1)", "\(download.stdout)\(download.stderr)")
            let source = try Data(contentsOf: URL(fileURLWithPath: Env.root + "/.testenv/nginx/www/big.bin"))
            #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == source, "every byte arrives as sent")
        }

        /// The scheduling policy of each thread of `pid` (field 41 of /proc/PID/task/TID/stat), or of
        /// its threads called `name` (the relay's threads name themselves `httpdns-relay`).
        static func threadPolicies(_ pid: Int32, named name: String? = nil) -> Set<Int> {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            return Set(
                tasks.compactMap { tid -> Int? in
                    if let name {
                        let comm = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/comm", encoding: .utf8)
                        guard comm?.trimmingCharacters(in: .newlines) == name else { return nil }
                    }
                    return schedulingPolicy(statFile: "/proc/\(pid)/task/\(tid)/stat")
                })
        }

        @Test func authenticationPrivateDestinationsAndReload() async throws {
            let users = FileManager.default.temporaryDirectory.appendingPathComponent("proxy-users-\(UUID().uuidString)").path
            try "# test users\n\(Self.user):\(Self.password)\n".write(toFile: users, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(atPath: users) }
            let strict = "{connect_ports: [\(Env.originPort)], auth_file: \(users)}"
            let daemon = try await DaemonProcess(config: Self.config(strict), port: Self.port)
            defer { daemon.stop() }
            let anonymous = try await curl(["-i", Env.origin("/echo")])
            #expect(anonymous.stdout.hasPrefix("HTTP/1.1 407") && anonymous.stdout.contains("Proxy-Authenticate: Basic"), "\(anonymous.stdout)")
            let wrong = try await curl(["-i", Env.origin("/echo")], config: "proxy-user = \"\(Self.user):wrong\"\n")
            #expect(wrong.stdout.hasPrefix("HTTP/1.1 407"), "\(wrong.stdout)")
            // Right password, but the origin is on loopback: no SSRF into the host's network by default.
            let credentials = "proxy-user = \"\(Self.user):\(Self.password)\"\n"
            let loopback = try await curl(["-i", Env.origin("/echo")], config: credentials)
            #expect(loopback.stdout.hasPrefix("HTTP/1.1 403") && loopback.stdout.contains("private"), "\(loopback.stdout)")
            #expect(!daemon.logText.contains(Self.password), "the password is never logged")

            // SIGHUP: private destinations allowed now.
            try Self.config("{connect_ports: [\(Env.originPort)], auth_file: \(users), allow_private_destinations: true}")
                .write(to: daemon.configFile, atomically: true, encoding: .utf8)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try await daemon.waitForLog("configuration reloaded"), "\(daemon.logText)")
            let allowed = try await curl([Env.origin("/echo")], config: credentials)
            #expect(allowed.stdout.hasPrefix("sni=origin.hd.test"), "\(allowed.stdout)\(allowed.stderr)")
        }

        @Test func resolveProxyRunsTheProxyAloneInTheForeground() async throws {
            try Env.requireRunning()
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("proxy-cmd-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let config = directory.appendingPathComponent("c.yaml")
            // No proxy_listen and a policy the flags widen; `listen` and `dns_listen` are ignored by `resolve proxy`.
            try DaemonProcess.config(port: Self.port, extra: "dns_listen: \"127.0.0.1:\(Self.proxyPort)\"")
                .write(to: config, atomically: true, encoding: .utf8)
            let policy = ["--listen", "127.0.0.1:\(Self.proxyPort)", "--connect-port", "\(Env.originPort)", "--allow-private-destinations"]
            // From a config file, and from flags alone (a one-off: no file at all).
            let fromFlags = ["--doh", Env.dohA, "--bootstrap", "doh-a.test=127.0.0.1", "--ca-file", Env.caFile, "--allow-private"]
            for arguments in [["--config", config.path], fromFlags] {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: CLI.binary)
                process.arguments = ["proxy"] + arguments + policy
                process.standardError = FileHandle.nullDevice
                try process.run()
                defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
                var echo = CLI.Output(status: -1, stdout: "", stderr: "")
                for _ in 0..<50 {
                    echo = try await curl([Env.origin("/echo", host: "bank.hd.test")])
                    if echo.status == 0 { break }
                    try await Task.sleep(for: .milliseconds(100))
                }
                #expect(echo.stdout.hasPrefix("sni=bank.hd.test"), "\(arguments): \(echo.stdout)\(echo.stderr)")
                if arguments == fromFlags {
                    // A second proxy on the same address stops with the reason instead of sharing the
                    // port with the first (the relay's listeners use SO_REUSEPORT among themselves).
                    let second = try await CLI.run(["10", CLI.binary, "proxy"] + fromFlags + policy, executable: "/usr/bin/timeout")
                    #expect(second.status != 0 && second.status != 124, "exits at once: \(second.status)")
                    #expect(second.stderr.contains("Address already in use"), "\(second.stderr)")
                    let still = try await curl([Env.origin("/echo", host: "bank.hd.test")])
                    #expect(still.stdout.hasPrefix("sni=bank.hd.test"), "the first proxy still serves: \(still.stdout)")
                }
                process.terminate()
                for _ in 0..<80 where process.isRunning { try await Task.sleep(for: .milliseconds(100)) }
                #expect(!process.isRunning && process.terminationStatus == 0, "SIGTERM: a clean exit")
            }
        }

        /// Headless Chromium with `--proxy-server`: the genuine page of a hijacked name arrives, with the
        /// test CA trusted through an NSS database; without it the same load fails (TLS is the browser's).
        /// Chromium's own lookups are mapped to NOTFOUND and the policy admits hd.test only, so its
        /// background requests (update, accounts) are refused by the proxy and nothing leaves loopback.
        @Test func aHeadlessBrowserLoadsTheGenuinePage() async throws {
            let daemon = try await DaemonProcess(
                config: Self.config("{connect_ports: [\(Env.originPort)], allow: [hd.test], allow_private_destinations: true}"), port: Self.port)
            defer { daemon.stop() }
            func load(trustingTheTestCA: Bool) async throws -> String {
                let home = FileManager.default.temporaryDirectory.appendingPathComponent("chromium-\(UUID().uuidString)")
                defer { try? FileManager.default.removeItem(at: home) }
                let nss = home.appendingPathComponent(".pki/nssdb").path
                try FileManager.default.createDirectory(atPath: nss, withIntermediateDirectories: true)
                _ = try await CLI.run(["-d", "sql:" + nss, "-N", "--empty-password"], executable: "/usr/bin/certutil")
                if trustingTheTestCA {
                    let added = try await CLI.run(
                        ["-d", "sql:" + nss, "-A", "-t", "C,,", "-n", "swift-httpdns test CA", "-i", Env.caFile], executable: "/usr/bin/certutil")
                    #expect(added.status == 0, "\(added.stderr)")
                }
                let script = """
                    HOME='\(home.path)' exec timeout 60 /usr/bin/chromium --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \\
                      --disable-background-networking --disable-component-update --disable-sync --disable-default-apps \\
                      --disable-domain-reliability --no-pings --dns-prefetch-disable \\
                      --host-resolver-rules='MAP * ~NOTFOUND, EXCLUDE 127.0.0.1' --proxy-server=\(proxyURL) \\
                      --user-data-dir='\(home.path)/profile' --dump-dom '\(Env.origin("/echo", host: "bank.hd.test"))'
                    """
                return try await CLI.run(["-c", script], executable: "/bin/sh").stdout
            }
            let trusted = try await load(trustingTheTestCA: true)
            #expect(trusted.contains("sni=bank.hd.test host=bank.hd.test"), "the genuine origin's page: \(trusted)")
            #expect(!trusted.contains("please enter your password"), "never the impostor's")
            let untrusted = try await load(trustingTheTestCA: false)
            #expect(!untrusted.contains("sni=bank.hd.test"), "without the test CA the browser refuses: TLS is end to end")
            let metrics = daemon.text(try await daemon.get("/metrics"))
            #expect(metrics.contains("httpdns_proxy_requests_total{outcome=\"tunnel\"}"), "\(metrics)")
        }

        @Test func pythonsURLLibUsesItThroughHTTPSProxy() async throws {
            let daemon = try await DaemonProcess(config: Self.config(Self.open), port: Self.port)
            defer { daemon.stop() }
            let script = """
                import os, ssl, urllib.request
                os.environ["HTTPS_PROXY"] = "\(proxyURL)"
                context = ssl.create_default_context(cafile="\(Env.caFile)")
                print(urllib.request.urlopen("\(Env.origin("/echo", host: "bank.hd.test"))", context=context, timeout=10).read().decode(), end="")
                """
            let output = try await CLI.run(["-c", script], executable: "/usr/bin/python3")
            #expect(output.stdout.hasPrefix("sni=bank.hd.test host=bank.hd.test"), "\(output.stdout)\(output.stderr)")
        }

        /// The end of a stream crosses the tunnel at once, whether the FIN comes with the last bytes
        /// or after them: the origin's (`Connection: close`: the answer, close_notify and FIN — read
        /// to EOF) and the client's (a kept-alive request and a half-close at once: the origin closes
        /// only when it sees that FIN). The
        /// relay skips the read that would find nothing after a short one only when the edge
        /// carried no FIN, so neither may hang here.
        @Test func finsCrossTheTunnelWithOrAfterTheLastBytes() async throws {
            let daemon = try await DaemonProcess(config: Self.config(Self.open), port: Self.port)
            defer { daemon.stop() }
            let script = """
                import socket, ssl, time
                context = ssl.create_default_context(cafile="\(Env.caFile)")
                def tunnel():
                    s = socket.create_connection(("127.0.0.1", \(Self.proxyPort)), timeout=5)
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    s.sendall(b"CONNECT origin.hd.test:\(Env.originPort) HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
                    head = b""
                    while b"\\r\\n\\r\\n" not in head:
                        head += s.recv(100)
                    assert head.startswith(b"HTTP/1.1 200"), head
                    return s
                request = b"GET /echo HTTP/1.1\\r\\nHost: origin.hd.test\\r\\nConnection: close\\r\\n\\r\\n"
                complete = slowest = 0
                for index in range(40):
                    started = time.monotonic()
                    tls = context.wrap_socket(tunnel(), server_hostname="origin.hd.test")
                    if index % 2:
                        # A kept-alive request and the client's FIN right behind it: the origin ends
                        # the connection only once that FIN has crossed (nginx would wait 75 s).
                        tls.sendall(request.replace(b"close", b"keep-alive"))
                        socket.socket.shutdown(tls, socket.SHUT_WR)  # SSLSocket.shutdown would drop TLS
                    else:
                        tls.sendall(request)
                    answer = b""
                    try:
                        while True:
                            chunk = tls.recv(65536)
                            if not chunk:
                                break
                            answer += chunk
                    except socket.timeout:
                        answer = b""  # a FIN that never crossed
                    except ssl.SSLError:
                        pass  # the origin's FIN with no close_notify after ours: still an end
                    tls.close()
                    slowest = max(slowest, time.monotonic() - started)
                    complete += b"sni=origin.hd.test" in answer
                print(complete, round(slowest, 2))
                """
            let output = try await CLI.run(["-c", script], executable: "/usr/bin/python3")
            let fields = output.stdout.split(separator: " ").map { String($0).trimmingCharacters(in: .whitespacesAndNewlines) }
            #expect(fields.first == "40", "every answer read to its end: \(output.stdout)\(output.stderr)")
            #expect((Double(fields.last ?? "") ?? 99) < 2, "no stream waited for a FIN (timeout 5 s): \(output.stdout)")
        }

        @Test func badInputGetsAStatusOrAClose() async throws {
            let daemon = try await DaemonProcess(config: Self.config(Self.open), port: Self.port)
            defer { daemon.stop() }
            // Each case: what is sent, then the first line read back ("" when closed without one).
            let script = """
                import socket, sys, time
                def exchange(data, half_close=False, wait=5):
                    s = socket.create_connection(("127.0.0.1", \(Self.proxyPort)), timeout=wait)
                    if data: s.sendall(data)
                    if half_close: s.shutdown(socket.SHUT_WR)
                    try:
                        answer = s.recv(4096)
                    except socket.timeout:
                        answer = b"TIMEOUT"
                    s.close()
                    return answer.split(b"\\r\\n")[0].decode(errors="replace")
                print(exchange(b"GARBAGE\\r\\n\\r\\n"))
                print(exchange(b"CONNECT origin.hd.test HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"))
                print(exchange(b"CONNECT origin.hd.test:\(Env.originPort) HTTP/1.1\\r\\nX-Big: " + b"a" * 20000 + b"\\r\\n\\r\\n"))
                print(exchange(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"))
                start = time.time(); print(exchange(b"", wait=8) or "closed", round(time.time() - start))
                print(exchange(b"CONNECT origin.hd.test:\(Env.originPort) HTTP/1.1\\r\\n", half_close=True) or "closed")
                print(exchange(b"CONNECT origin.hd.test:\(Env.originPort) HTTP/1.1\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"))
                print(exchange(b"CONNECT origin.hd.test:\(Env.originPort) HTTP/1.1\\r\\nContent-Length: 7\\r\\n\\r\\n"))
                print(exchange(b"CONNECT origin.hd.test:\(Env.originPort) HTTP/1.1\\r\\nContent-Length: 0\\r\\n\\r\\n"))
                """
            let output = try await CLI.run(["-c", script], executable: "/usr/bin/python3")
            let lines = output.lines
            #expect(lines.count == 9, "\(output.stdout)\(output.stderr)")
            guard lines.count == 9 else { return }
            #expect(lines[0].hasPrefix("HTTP/1.1 400"), "malformed request line: \(lines[0])")
            #expect(lines[1].hasPrefix("HTTP/1.1 400"), "CONNECT without a port: \(lines[1])")
            #expect(lines[2].hasPrefix("HTTP/1.1 431"), "an absurd header: \(lines[2])")
            #expect(lines[3].hasPrefix("HTTP/1.1 400"), "origin-form to a proxy: \(lines[3])")
            #expect(["closed 2", "closed 3"].contains(lines[4]), "a client that never sends is closed after request_timeout: \(lines[4])")
            #expect(lines[5] == "closed" || lines[5].hasPrefix("HTTP/1.1 400"), "half-closed mid-head: \(lines[5])")
            // Body framing on a CONNECT: refused, not tunnelled by a second path; a zero length is no body.
            #expect(lines[6].hasPrefix("HTTP/1.1 400"), "CONNECT with a transfer coding: \(lines[6])")
            #expect(lines[7].hasPrefix("HTTP/1.1 400"), "CONNECT with a body length: \(lines[7])")
            #expect(lines[8] == "HTTP/1.1 200 Connection established", "CONNECT with Content-Length: 0: \(lines[8])")
            // And it still serves.
            let echo = try await curl([Env.origin("/echo")])
            #expect(echo.stdout.hasPrefix("sni=origin.hd.test"), "\(echo.stdout)\(echo.stderr)")
        }

        /// `idle_timeout`: a tunnel with no byte either way for that long is closed; one that keeps
        /// talking (TLS through it, every 0.5 s) outlives it.
        @Test func anIdleTunnelIsClosedAndABusyOneIsNot() async throws {
            let idle = "{connect_ports: [\(Env.originPort)], allow_private_destinations: true, limits: {idle_timeout: 1}}"
            let daemon = try await DaemonProcess(config: Self.config(idle), port: Self.port)
            defer { daemon.stop() }
            let script = """
                import socket, ssl, time
                def tunnel():
                    s = socket.create_connection(("127.0.0.1", \(Self.proxyPort)), timeout=5)
                    s.sendall(b"CONNECT origin.hd.test:\(Env.originPort) HTTP/1.1\\r\\nHost: origin.hd.test\\r\\n\\r\\n")
                    assert s.recv(200).startswith(b"HTTP/1.1 200"), "no tunnel"
                    return s
                quiet = tunnel()
                start = time.time()
                closed = quiet.recv(10) == b""
                print("idle", closed, round(time.time() - start, 1))
                context = ssl.create_default_context(cafile="\(Env.caFile)")
                busy = context.wrap_socket(tunnel(), server_hostname="origin.hd.test")
                answered = 0
                for _ in range(6):
                    busy.sendall(b"GET /echo HTTP/1.1\\r\\nHost: origin.hd.test\\r\\n\\r\\n")
                    answered += b"sni=origin.hd.test" in busy.recv(65536)
                    time.sleep(0.5)
                print("busy", answered)
                """
            let output = try await CLI.run(["-c", script], executable: "/usr/bin/python3")
            let lines = output.lines
            #expect(lines.count == 2, "\(output.stdout)\(output.stderr)")
            guard lines.count == 2 else { return }
            let idleLine = lines[0].split(separator: " ")
            #expect(idleLine.count == 3 && idleLine[1] == "True", "\(lines[0])")
            if let seconds = Double(idleLine.last ?? "") { #expect((0.8...2.5).contains(seconds), "closed after \(seconds) s") }
            #expect(lines[1] == "busy 6", "a tunnel in use for 3 s with idle_timeout 1 s stays open: \(lines[1])")
        }
    }
}
