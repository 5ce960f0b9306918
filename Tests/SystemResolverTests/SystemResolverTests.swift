import DNSCore
import TestSupport
import Testing

@testable import SystemResolver

/// c-ares against the loopback dnsmasq of Scripts/env/testenv.sh, never the machine's resolv.conf.
@Suite struct SystemResolverTests {
    static let server = "127.0.0.1:\(TestEnvironment.systemDNSPort)"

    func question(_ name: String, _ type: RecordType = .a) throws -> DNSMessage.Question {
        DNSMessage.Question(name: try DomainName(name), type: type)
    }

    @Test func answersWithAddressesAndTTLs() async throws {
        try TestEnvironment.requireRunning()
        let resolver = try SystemResolver(servers: [Self.server])
        defer { resolver.shutdown() }
        guard case let .addresses(addresses, _) = try await resolver.query(try question("www.hd.test"), timeout: .seconds(2)) else {
            Issue.record("expected addresses")
            return
        }
        #expect(addresses.map(\.ip.description) == ["198.18.0.10"])
        #expect(addresses.allSatisfy { $0.ttl > 0 && $0.ttl <= 300 })
        guard case let .addresses(v6, _) = try await resolver.query(try question("www.hd.test", .aaaa), timeout: .seconds(2)) else {
            Issue.record("expected AAAA")
            return
        }
        #expect(v6.map(\.ip.description) == ["2001:2::10"])
        #expect(resolver.identifier == "dns://\(Self.server)")
    }

    @Test func reportsWhatTheLyingServerSays() async throws {
        try TestEnvironment.requireRunning()
        let resolver = try SystemResolver(servers: [Self.server])
        defer { resolver.shutdown() }
        let answer = try await resolver.query(try question("hijacked.hd.test"), timeout: .seconds(2))
        guard case let .addresses(addresses, _) = answer else {
            Issue.record("expected addresses")
            return
        }
        #expect(addresses.map(\.ip.description) == ["127.0.0.66"])
    }

    @Test func negativeAnswersAndRefusals() async throws {
        try TestEnvironment.requireRunning()
        let resolver = try SystemResolver(servers: [Self.server])
        defer { resolver.shutdown() }
        #expect(try await resolver.query(try question("nope.hd.test"), timeout: .seconds(2)) == .nxdomain(negativeTTL: 60))
        let nodata = try await resolver.query(try question("v6only.hd.test"), timeout: .seconds(2))
        guard case .nodata = nodata else {
            Issue.record("expected NODATA, got \(nodata)")
            return
        }
        await #expect { try await resolver.query(try question("outside.example.test"), timeout: .seconds(2)) } throws: {
            ($0 as? DNSError)?.code == .refused
        }
    }

    @Test func silentServerTimesOutWithinTheBudget() async throws {
        let silent = try SilentUDPListener()
        let resolver = try SystemResolver(servers: ["127.0.0.1:\(silent.port)"], attemptTimeout: .seconds(5), tries: 1)
        defer { resolver.shutdown() }
        let start = ContinuousClock.now
        await #expect { try await resolver.query(try question("www.hd.test"), timeout: .milliseconds(400)) } throws: {
            ($0 as? DNSError)?.code == .timeout
        }
        let elapsed = ContinuousClock.now - start
        #expect(elapsed >= .milliseconds(350) && elapsed < .milliseconds(4500), "took \(elapsed); the attempt timeout is 5 s")
    }

    /// A client's EDNS padding was for an encrypted hop: a relayed query goes to a plain DNS server
    /// without it, its other options kept (F51-P3).
    @Test func aRelayedQuerysPaddingIsNotSentOverPlainDNS() async throws {
        let listener = try SilentUDPListener()
        let resolver = try SystemResolver(servers: ["127.0.0.1:\(listener.port)"], attemptTimeout: .seconds(1), tries: 1)
        defer { resolver.shutdown() }
        let cookie: [UInt8] = [0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]
        let unpadded = Wire.query("x.corp.test", type: 16, edns: Wire.opt(options: cookie))
        let padded = EDNSPadding.padded(unpadded, toMultipleOf: EDNSPadding.queryBlock)
        #expect(padded.count == 128 && EDNSPadding.hasPadding(padded))
        let exchange = Task { try? await resolver.exchange(padded, timeout: .milliseconds(500)) }
        let sent = try #require(listener.receive(withinMilliseconds: 2_000))
        _ = await exchange.value
        #expect(!EDNSPadding.hasPadding(sent))
        #expect(Array(sent.dropFirst(2)) == Array(unpadded.dropFirst(2)), "the same query but for c-ares's ID")
    }

    @Test func closedPortIsRefusedQuickly() async throws {
        let resolver = try SystemResolver(servers: ["127.0.0.1:\(unusedLoopbackPort())"], attemptTimeout: .seconds(1), tries: 1)
        defer { resolver.shutdown() }
        await #expect { try await resolver.query(try question("www.hd.test"), timeout: .seconds(2)) } throws: {
            [.refused, .timeout].contains(($0 as? DNSError)?.code)
        }
    }

    @Test func cancellationReturnsPromptly() async throws {
        let silent = try SilentUDPListener()
        let resolver = try SystemResolver(servers: ["127.0.0.1:\(silent.port)"], attemptTimeout: .seconds(5), tries: 1)
        defer { resolver.shutdown() }
        let task = Task { try await resolver.query(try question("www.hd.test"), timeout: .seconds(10)) }
        try await Task.sleep(for: .milliseconds(100))
        let start = ContinuousClock.now
        task.cancel()
        await #expect { try await task.value } throws: { ($0 as? DNSError)?.code == .cancelled }
        #expect(ContinuousClock.now - start < .seconds(3), "the attempt timeout is 5 s (margin for a loaded 2-core CI)")
    }

    @Test func manyConcurrentQueries() async throws {
        try TestEnvironment.requireRunning()
        let resolver = try SystemResolver(servers: [Self.server])
        defer { resolver.shutdown() }
        let answered = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<200 {
                group.addTask {
                    if case .addresses = try await resolver.query(try self.question("c\(index).bench.hd.test"), timeout: .seconds(3)) { return 1 }
                    return 0
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(answered == 200)
    }

    @Test(arguments: ["", "127.0.0.1:0", "127.0.0.1:70000", "dns.test:53", "[::1", "1.2.3"])
    func rejectsUnusableServers(server: String) {
        #expect { try SystemResolver(servers: [server]) } throws: { ($0 as? DNSError)?.code == .invalidConfiguration }
    }

    @Test func normalizesServerSpellings() throws {
        #expect(try SystemResolver.normalize("127.0.0.1") == "127.0.0.1:53")
        #expect(try SystemResolver.normalize("::1") == "[::1]:53")
        #expect(try SystemResolver.normalize("[::1]:5353") == "[::1]:5353")
        #expect(try SystemResolver.normalize("127.0.0.1:18055") == "127.0.0.1:18055")
    }
}
