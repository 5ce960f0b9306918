import DNSCore
import Foundation
import Synchronization
import TestSupport
import Testing

@testable import HTTPDNS

/// The resolver's failover, merging and policy logic, against scripted upstreams.
@Suite struct HTTPDNSResolverTests {
    func resolver(_ upstreams: [ScriptedUpstream], timeout: Duration = .seconds(3), allowPrivate: Bool = false) -> HTTPDNSResolver {
        var options = HTTPDNSOptions(timeout: timeout, allowPrivate: allowPrivate)
        options.minTTL = .zero
        return HTTPDNSResolver(options: options, upstreams: upstreams)
    }

    @Test func failingFirstUpstreamHandsOverToTheSecond() async throws {
        let first = ScriptedUpstream("https://first.test/dns-query", .fail(.httpStatus))
        let second = ScriptedUpstream("https://second.test/dns-query", .addresses(["198.18.0.1"]))
        let resolution = try await resolver([first, second]).resolve("www.hd.test", type: .a)
        #expect(resolution.addresses.map(\.ip.description) == ["198.18.0.1"])
        #expect(resolution.upstream == "https://second.test/dns-query")
        #expect(resolution.failedAttempts.map(\.code) == [.httpStatus])
        #expect(first.events.count == 1 && second.events.count == 1)
    }

    @Test func slowFirstUpstreamGetsOnlyItsShareOfTheBudget() async throws {
        let first = ScriptedUpstream("https://slow.test/dns-query", .slow(.seconds(30), ["198.18.0.9"]))
        let second = ScriptedUpstream("https://second.test/dns-query", .addresses(["198.18.0.1"]))
        let clock = ContinuousClock()
        let start = clock.now
        let resolution = try await resolver([first, second], timeout: .seconds(6)).resolve("www.hd.test", type: .a)
        let elapsed = clock.now - start
        #expect(resolution.upstream == "https://second.test/dns-query")
        #expect(resolution.failedAttempts.map(\.code) == [.timeout])
        // Half of the budget for the first of two upstreams, the rest for the second.
        let granted = try #require(first.events.first?.timeout)
        #expect(granted <= .seconds(3) && granted > .milliseconds(2500), "first upstream was granted \(granted)")
        let secondGranted = try #require(second.events.first?.timeout)
        #expect(secondGranted > .seconds(1), "second upstream was granted \(secondGranted)")
        // Succeeding at all proves the second was asked inside the budget; the bound is loose
        // because CI runs CPU-heavy suites alongside.
        #expect(elapsed < .seconds(8), "took \(elapsed)")
    }

    @Test func nxdomainIsAnAnswerAndStopsFailover() async throws {
        let first = ScriptedUpstream("https://first.test/dns-query", .nxdomain())
        let second = ScriptedUpstream("https://second.test/dns-query", .addresses(["198.18.0.1"]))
        await #expect { try await resolver([first, second]).resolve("nope.hd.test") } throws: {
            ($0 as? DNSError)?.code == .nxdomain
        }
        #expect(second.events.isEmpty)
    }

    @Test func differentFailuresCombineIntoUpstreamFailedListingEach() async throws {
        let upstreams = [
            ScriptedUpstream("https://a.test/dns-query", .fail(.connectFailed)),
            ScriptedUpstream("https://b.test/dns-query", .fail(.malformedResponse)),
        ]
        do {
            _ = try await resolver(upstreams).resolve("www.hd.test", type: .a)
            Issue.record("expected a failure")
        } catch {
            #expect(error.code == .upstreamFailed)
            #expect(error.attempts.map(\.upstream) == ["https://a.test/dns-query", "https://b.test/dns-query"])
            #expect(error.attempts.map(\.code) == [.connectFailed, .malformedResponse])
        }
    }

    @Test func sameFailureEverywhereKeepsItsSpecificCode() async throws {
        let upstreams = [
            ScriptedUpstream("https://a.test/dns-query", .fail(.timeout)),
            ScriptedUpstream("https://b.test/dns-query", .fail(.timeout)),
        ]
        await #expect { try await resolver(upstreams).resolve("www.hd.test") } throws: { ($0 as? DNSError)?.code == .timeout }
    }

    @Test func dualStackAnswerMergesFamiliesIPv6First() async throws {
        let upstream = ScriptedUpstream(
            "https://a.test/dns-query",
            replies: { type in
                type == .a ? .addresses(["198.18.0.1", "198.18.0.2"], ttl: 100) : .addresses(["2001:2::1"], ttl: 50)
            })
        let resolver = resolver([upstream])
        let resolution = try await resolver.resolve("www.hd.test")
        #expect(resolution.addresses.map(\.ip.description) == ["2001:2::1", "198.18.0.1", "198.18.0.2"])
        #expect(Set(upstream.events.map(\.type)) == [.a, .aaaa])
        let ttl = resolution.expiresAt - resolver.clock.now
        #expect(ttl <= .seconds(50) && ttl > .seconds(45), "expiry follows the smallest TTL")
    }

    @Test func oneFamilyMissingIsNotAFailure() async throws {
        let upstream = ScriptedUpstream("https://a.test/dns-query", replies: { type in type == .a ? .nodata : .addresses(["2001:2::30"]) })
        let resolution = try await resolver([upstream]).resolve("v6only.hd.test")
        #expect(resolution.addresses.map(\.ip.description) == ["2001:2::30"])
        await #expect { try await resolver([upstream]).resolve("v6only.hd.test", type: .a) } throws: {
            ($0 as? DNSError)?.code == .nodata
        }
    }

    @Test func nodataForOneTypeAndFailureForTheOtherReportsTheFailure() async throws {
        let upstream = ScriptedUpstream("https://a.test/dns-query", replies: { type in type == .a ? .nodata : .fail(.serverFailure) })
        await #expect { try await resolver([upstream]).resolve("x.hd.test") } throws: { ($0 as? DNSError)?.code == .serverFailure }
    }

    @Test func rebindingGuardDropsPrivateAnswers() async throws {
        let upstream = ScriptedUpstream("https://a.test/dns-query", .addresses(["10.0.0.2", "198.18.0.50"]))
        let mixed = try await resolver([upstream]).resolve("mixed.hd.test", type: .a)
        #expect(mixed.addresses.map(\.ip.description) == ["198.18.0.50"])

        let onlyPrivate = ScriptedUpstream("https://a.test/dns-query", .addresses(["127.0.0.1", "192.168.1.1"]))
        await #expect { try await resolver([onlyPrivate]).resolve("loopback.hd.test", type: .a) } throws: {
            ($0 as? DNSError)?.code == .rejectedPrivate
        }
        let allowed = try await resolver([onlyPrivate], allowPrivate: true).resolve("loopback.hd.test", type: .a)
        #expect(allowed.addresses.map(\.ip.description) == ["127.0.0.1", "192.168.1.1"])
    }

    @Test func ipLiteralsAreReturnedWithoutAsking() async throws {
        let upstream = ScriptedUpstream("https://a.test/dns-query", .fail(.timeout))
        for literal in ["192.0.2.7", "2001:db8::7", "[2001:db8::8]"] {
            let resolution = try await resolver([upstream]).resolve(literal)
            #expect(resolution.source == .literal)
            #expect(resolution.addresses.count == 1)
        }
        #expect(upstream.events.isEmpty)
    }

    @Test(arguments: ["", "bad name", "a..b", String(repeating: "a", count: 64) + ".test", "ünicode.test", "-x.test"])
    func invalidNamesFailBeforeAnyQuery(name: String) async throws {
        let upstream = ScriptedUpstream("https://a.test/dns-query", .addresses(["198.18.0.1"]))
        await #expect { try await resolver([upstream]).resolve(name) } throws: { ($0 as? DNSError)?.code == .invalidName }
        #expect(upstream.events.isEmpty)
    }

    @Test func cancellationEndsTheLookupPromptly() async throws {
        let manual = ManualClock()
        let upstream = ScriptedUpstream("https://slow.test/dns-query", clock: manual, .slow(.seconds(30), ["198.18.0.1"]))
        let resolver = HTTPDNSResolver(options: HTTPDNSOptions(timeout: .seconds(20)), upstreams: [upstream], clock: manual)
        let task = Task { try await resolver.resolve("www.hd.test") }
        await manual.waitForSleepers(2)  // A and AAAA asked
        let clock = ContinuousClock()
        let start = clock.now
        task.cancel()
        await #expect { try await task.value } throws: { ($0 as? DNSError)?.code == .cancelled }
        #expect(clock.now - start < .seconds(2), "the budget was 20 s")
    }
}

@Suite struct ConfigurationTests {
    @Test func everyPresetIsReachableWithoutDNS() throws {
        for preset in ResolverPreset.allCases {
            let endpoint = preset.endpoint
            #expect(endpoint.url.hasPrefix("https://"), "\(preset)")
            #expect(endpoint.bootstrap.count >= 2, "\(preset) needs at least two bootstrap addresses")
            #expect(endpoint.bootstrap.allSatisfy { $0.specialPurposeRange == nil }, "\(preset)")
            #expect(endpoint.bootstrap.contains { $0.family == .ipv4 }, "\(preset)")
            #expect(endpoint.port == 443)
        }
        let defaults = HTTPDNSConfiguration.publicDefault
        #expect(defaults.upstreams.map(\.host) == ["cloudflare-dns.com", "dns.google", "dns.quad9.net"])
        #expect(throws: Never.self) { try defaults.validate() }
    }

    @Test func anEndpointsPortComesFromItsURL() throws {
        let endpoint = try UpstreamEndpoint.doh("https://doh-a.test:18443/dns-query", bootstrap: ["127.0.0.1", "::1"])
        #expect(endpoint.port == 18443)
        #expect(endpoint.bootstrap.map(\.urlHost) == ["127.0.0.1", "[::1]"])
    }

    @Test(arguments: [
        "http://dns.test/dns-query", "dns.test/dns-query", "https://", "https://user:pw@dns.test/q",
        "https://bad_host!.test/q", "ftp://dns.test/",
    ])
    func rejectsUnusableURLs(url: String) {
        #expect { try UpstreamEndpoint.doh(url, bootstrap: ["127.0.0.1"]) } throws: {
            ($0 as? DNSError)?.code == .invalidConfiguration
        }
    }

    @Test func aNamedUpstreamWithoutBootstrapIsRejected() throws {
        let configuration = HTTPDNSConfiguration(upstreams: [try .doh("https://doh-a.test:18443/dns-query")])
        #expect { try configuration.validate() } throws: {
            ($0 as? DNSError)?.code == .invalidConfiguration && "\($0)".contains("bootstrap")
        }
        let literal = HTTPDNSConfiguration(upstreams: [try .doh("https://127.0.0.1:18443/dns-query")])
        #expect(throws: Never.self) { try literal.validate() }
        #expect { try HTTPDNSConfiguration(upstreams: []).validate() } throws: { ($0 as? DNSError)?.code == .invalidConfiguration }
    }

    @Test func unreadableCAFileIsRejected() throws {
        let configuration = HTTPDNSConfiguration(
            upstreams: [try .doh("https://127.0.0.1/dns-query")],
            caFile: "/nonexistent/ca.pem")
        #expect { try configuration.validate() } throws: { ($0 as? DNSError)?.code == .invalidConfiguration }
    }

    @Test func base64URLHasNoPaddingAndURLSafeCharacters() {
        #expect(DoHWire.encodeBase64URL([0xfb, 0xff]) == "-_8")
        #expect(DoHWire.encodeBase64URL([]) == "")
        #expect(DoHWire.encodeBase64URL([0x00, 0x00, 0x01]) == "AAAB")
    }

    @Test func base64URLDecodesWhatItEncodesAndRefusesTheRest() {
        var generator = SystemRandomNumberGenerator()
        for count in 0..<200 {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = DoHWire.encodeBase64URL(bytes)
            #expect(DoHWire.decodeBase64URL(text[...]) == bytes, "\(count) bytes")
        }
        #expect(DoHWire.decodeBase64URL("-_8=") == [0xfb, 0xff], "padding tolerated")
        #expect(DoHWire.decodeBase64URL("AAE==") == [0x00, 0x01])
        for refused in ["A", "AAAAA", "A===", "AA===", "AB=C", "AB!C", "AB+/", "AB C", "é"] {
            #expect(DoHWire.decodeBase64URL(refused[...]) == nil, "\(refused)")
        }
    }
}

@Suite struct CachePersistenceTests {
    @Test func cacheSurvivesARestartThroughAFile() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-cache-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("cache.bin").path

        let upstream = ScriptedUpstream("https://a.test/dns-query", .addresses(["198.18.0.1"]))
        let first = HTTPDNSResolver(upstreams: [upstream])
        _ = try await first.resolve("www.hd.test", type: .a)
        try first.saveCache(to: path)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["cache.bin"], "no temporary file left")

        let dead = ScriptedUpstream("https://a.test/dns-query", .fail(.timeout))
        let second = HTTPDNSResolver(upstreams: [dead])
        #expect(try second.loadCache(from: path) == 1)
        #expect(try await second.resolve("www.hd.test", type: .a).source == .cache)
        #expect(dead.events.isEmpty)
        #expect(try second.loadCache(from: directory.appendingPathComponent("missing.bin").path) == 0)
    }

    @Test func corruptFileIsReportedAndIgnored() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-corrupt-\(UInt64.random(in: 0...UInt64.max)).bin").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data("HDNSC1\0\0garbage".utf8).write(to: URL(fileURLWithPath: path))
        let resolver = HTTPDNSResolver(upstreams: [ScriptedUpstream("https://a.test/dns-query", .addresses(["198.18.0.1"]))])
        #expect { try resolver.loadCache(from: path) } throws: {
            ($0 as? DNSError)?.code == .corruptCacheFile && ($0 as? DNSError)?.message.contains("truncated") == true
        }
        #expect(try await resolver.resolve("www.hd.test", type: .a).source == .doh, "the resolver keeps serving")
    }

    @Test func aCacheThatCannotBeWrittenSaysSo() throws {
        let resolver = HTTPDNSResolver(upstreams: [ScriptedUpstream("https://a.test/dns-query", .addresses(["198.18.0.1"]))])
        #expect { try resolver.saveCache(to: "/nonexistent-directory/cache.bin") } throws: {
            ($0 as? DNSError)?.code == .cacheWriteFailed
        }
    }
}

@Suite struct StartupAndSnapshotTests {
    func temporaryPath(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-\(name)-\(UInt64.random(in: 0...UInt64.max))").path
    }

    @Test func preresolvedNamesAreCachedBeforeTheirFirstLookup() async throws {
        let upstream = ScriptedUpstream("https://a.test/dns-query", .addresses(["198.18.0.1", "2001:2::1"]))
        let tasks = DrainableTasks()
        let resolver = HTTPDNSResolver(
            configuration: .init(upstreams: [], preresolve: ["www.hd.test", "api.hd.test"]),
            upstreams: [upstream], spawner: tasks)
        await tasks.drain()
        #expect(Set(upstream.events.map(\.name)) == ["www.hd.test", "api.hd.test"])
        #expect(upstream.events.count == 4, "A and AAAA of each name, once")
        #expect(try await resolver.resolve("api.hd.test").source == .cache)
        #expect(upstream.events.count == 4)
    }

    @Test func warmWaitsForEveryNameAndReportsEach() async throws {
        let upstream = ScriptedUpstream("https://a.test/dns-query", replies: { _ in .addresses(["198.18.0.1"]) })
        let resolver = HTTPDNSResolver(upstreams: [upstream])
        let results = await resolver.warm(["www.hd.test", "bad..name", "api.hd.test"], type: .a)
        #expect(results.map(\.host) == ["www.hd.test", "bad..name", "api.hd.test"])
        #expect((try? results[0].result.get())?.source == .doh)
        #expect({ if case let .failure(error) = results[1].result { error.code == .invalidName } else { false } }())
        #expect(resolver.cachedResolution(for: "api.hd.test", type: .a) != nil)
    }

    @Test func periodicSnapshotsAreWrittenAndOnceMoreOnCancel() async throws {
        let path = temporaryPath("periodic")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let upstream = ScriptedUpstream("https://a.test/dns-query", .addresses(["198.18.0.1"]))
        let clock = ManualClock()
        let resolver = HTTPDNSResolver(upstreams: [upstream], clock: clock)
        _ = try await resolver.resolve("www.hd.test", type: .a)
        let task = resolver.persistPeriodically(to: path, every: .seconds(60))
        await clock.waitForSleepers(1)
        #expect(!FileManager.default.fileExists(atPath: path), "nothing before the first interval")
        clock.advance(by: .seconds(60))
        await clock.waitForSleepers(1)  // written, and asleep again until the next one
        let reader = HTTPDNSResolver(upstreams: [upstream])
        #expect(try reader.loadCache(from: path) == 1)

        _ = try await resolver.resolve("api.hd.test", type: .a)
        task.cancel()
        await task.value
        let after = HTTPDNSResolver(upstreams: [upstream])
        #expect(try after.loadCache(from: path) == 2, "the final snapshot on cancel holds the newest answer")
    }

    @Test func aFailedSnapshotIsReportedAndTheResolverKeepsServing() async throws {
        let errors = Mutex<[DNSError]>([])
        let upstream = ScriptedUpstream("https://a.test/dns-query", .addresses(["198.18.0.1"]))
        let clock = ManualClock()
        let resolver = HTTPDNSResolver(upstreams: [upstream], clock: clock)
        let task = resolver.persistPeriodically(to: "/nonexistent-dir.test/cache.bin", every: .seconds(60)) { error in
            errors.withLock { $0.append(error) }
        }
        await clock.waitForSleepers(1)
        clock.advance(by: .seconds(60))
        await clock.waitForSleepers(1)  // the write failed and was reported; asleep until the next interval
        task.cancel()
        await task.value
        #expect(errors.withLock { $0.first?.message.contains("cannot write") } == true)
        #expect(try await resolver.resolve("www.hd.test", type: .a).source == .doh)
    }
}

/// The entry points for code that is not async: a kept answer on the calling thread with no task,
/// a miss through a blocking wait or a completion handler.
@Suite struct SynchronousResolveTests {
    @Test func aHitIsAnsweredOnTheCallingThreadAndAMissWaits() async throws {
        let upstream = ScriptedUpstream("https://u.test/dns-query", .addresses(["198.18.0.1"]))
        var options = HTTPDNSOptions(timeout: .seconds(3))
        options.minTTL = .seconds(60)
        let resolver = HTTPDNSResolver(options: options, upstreams: [upstream])
        // From a thread that is not the concurrency pool's, as the API asks.
        let (miss, hit, failure) = await withCheckedContinuation { continuation in
            Thread {
                let miss = try? resolver.resolveBlocking("www.hd.test", type: .a)
                let hit = try? resolver.resolveBlocking("www.hd.test", type: .a)
                let failure: DNSError?
                do throws(DNSError) {
                    _ = try resolver.resolveBlocking("bad..name", type: .a)
                    failure = nil
                } catch { failure = error }
                continuation.resume(returning: (miss, hit, failure))
            }.start()
        }
        #expect(miss?.addresses.map(\.ip.description) == ["198.18.0.1"])
        #expect(hit?.source == .cache)
        #expect(failure?.code == .invalidName)
        #expect(upstream.events.count == 1)

        // The completion handler: synchronous for a kept answer, later for a lookup.
        let calledBeforeReturn = Mutex(false)
        resolver.resolve("www.hd.test", type: .a) { result in
            calledBeforeReturn.withLock { $0 = (try? result.get())?.source == .cache }
        }
        #expect(calledBeforeReturn.withLock { $0 })
        let other: Result<Resolution, DNSError> = await withCheckedContinuation { continuation in
            resolver.resolve("other.hd.test", type: .a) { continuation.resume(returning: $0) }
        }
        #expect((try? other.get())?.addresses.map(\.ip.description) == ["198.18.0.1"])
        #expect(upstream.events.count == 2)
    }
}
