import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// EDNS padding (RFC 7830, RFC 8467's block-length policy) on the wire: answers on the daemon's
    /// DoT and DoH listeners are padded to 468-byte blocks when kdig's query was padded, and never
    /// over plain UDP or TCP; the daemon's queries to a DoT upstream (its own and the clients' it
    /// relays) arrive at the upstream (Tests/Fakes/dot_server.py, which logs each query's length and
    /// Padding option) padded to 128-byte blocks.
    @Suite(.serialized) struct PaddingTests {
        static let port = 18531
        static let dotPort = 18532
        static let dnsPort = 18533

        /// `;; Received N B` from kdig's output.
        static func received(_ output: String) -> Int? {
            guard let range = output.range(of: #";; Received (\d+) B"#, options: .regularExpression) else { return nil }
            return Int(output[range].dropFirst(12).dropLast(2))
        }

        @Test func encryptedAnswersArePaddedToBlocksAndPlainOnesNever() async throws {
            try TestEnvironment.requireRunning()
            let (upstreamPort, upstream, log) = try await FakeDoTServer.start("ok")
            defer {
                kill(upstream, SIGKILL)
                try? FileManager.default.removeItem(at: log)
            }
            let daemon = try await DaemonProcess(
                config: """
                    upstreams:
                      - {dot: "127.0.0.1:\(upstreamPort)", tls_name: doh-a.test}
                    ca_file: \(TestEnvironment.caFile)
                    allow_private: true
                    system_dns: ["127.0.0.1:\(TestEnvironment.systemDNSPort)"]
                    listen: "127.0.0.1:\(Self.port)"
                    \(DaemonProcess.tlsConfig)
                    dot_listen: "127.0.0.1:\(Self.dotPort)"
                    dns_listen: "127.0.0.1:\(Self.dnsPort)"
                    records: ["nas.home.test A 192.168.1.10"]
                    """, port: Self.port, https: true)
            defer { daemon.stop() }
            let tls = ["+tls-ca=\(TestEnvironment.caFile)", "+tls-hostname=localhost", "+timeout=5", "+retry=0"]
            let transports: [(label: String, arguments: [String], encrypted: Bool)] = [
                ("dot", ["@127.0.0.1", "-p", "\(Self.dotPort)", "+tls"] + tls, true),
                ("doh", ["@127.0.0.1", "-p", "\(Self.port)", "+https=/dns-query"] + tls, true),
                ("udp", ["@127.0.0.1", "-p", "\(Self.dnsPort)", "+notcp", "+timeout=5", "+retry=0"], false),
                ("tcp", ["@127.0.0.1", "-p", "\(Self.dnsPort)", "+tcp", "+timeout=5", "+retry=0"], false),
            ]
            // An address the engine looks up, a local record, a relayed type, and a name that is not
            // there (the fake upstream answers A for every name, NODATA for TXT).
            let questions = [["p1.hd.test", "A"], ["nas.home.test", "A"], ["p2.hd.test", "TXT"], ["p1.hd.test", "AAAA"]]
            for transport in transports {
                for question in questions {
                    let padded = try await CLI.run(transport.arguments + question + ["+padding"], executable: "/usr/bin/kdig")
                    let what = "\(transport.label) \(question): \(padded.stdout)\(padded.stderr)"
                    #expect(padded.stdout.contains("status: NOERROR"), "\(what)")
                    let size = try #require(Self.received(padded.stdout), "\(what)")
                    if transport.encrypted {
                        #expect(size % 468 == 0, "\(what)")
                        #expect(padded.stdout.contains("PADDING"), "\(what)")
                    } else {
                        #expect(size % 468 != 0 && size < 468, "\(what)")
                        #expect(!padded.stdout.contains("PADDING"), "\(what)")
                    }
                    // Not asked for (EDNS without the option): not padded, on any transport; the
                    // query, relayed, still goes upstream padded.
                    let unpadded = try await CLI.run(transport.arguments + question + ["+edns", "+nopadding"], executable: "/usr/bin/kdig")
                    #expect(!unpadded.stdout.contains("PADDING"), "\(transport.label) \(question): \(unpadded.stdout)")
                    #expect(Self.received(unpadded.stdout).map { $0 < 468 } == true, "\(transport.label) \(question): \(unpadded.stdout)")
                }
            }
            // A relayed query with no OPT record at all goes upstream without one (adding EDNS would
            // change what it asks).
            let bare = try await CLI.run(
                ["@127.0.0.1", "-p", "\(Self.dnsPort)", "+tries=1", "+time=5", "+noedns", "bare.hd.test", "TXT"], executable: "/usr/bin/dig")
            #expect(bare.stdout.contains("status: NOERROR"), "\(bare.stdout)")

            // What the upstream received: every query with an OPT record padded to 128-byte blocks.
            let lines = ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").filter { $0.hasPrefix("query ") }
            let asked = Set(lines.map { $0.split(separator: " ")[1] })
            #expect(asked.isSuperset(of: ["p1.hd.test", "p2.hd.test", "bare.hd.test"]), "\(lines)")
            for line in lines {
                let fields = Dictionary(
                    uniqueKeysWithValues: line.split(separator: " ").dropFirst(3).map { field in
                        let parts = field.split(separator: "=", maxSplits: 1)
                        return (String(parts[0]), String(parts.count > 1 ? parts[1] : ""))
                    })
                let size = try #require(fields["size"].flatMap { Int($0) }, "\(line)")
                if line.contains("bare.hd.test") {
                    #expect(fields["padding"] == "none", "\(line)")
                    #expect(size % 128 != 0, "\(line)")
                } else {
                    #expect(fields["padding"] != "none", "\(line)")
                    #expect(size % 128 == 0, "\(line)")
                }
            }
        }
    }
}
