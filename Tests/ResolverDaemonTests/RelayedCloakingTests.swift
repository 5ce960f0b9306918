import DNSCore
import MetricsTestKit
import Synchronization
import TestSupport
import Testing

@testable import DNSStubServer
@testable import DNSWire
@testable import HTTPDNS
@testable import ResolverDaemon

/// CNAME cloaking in the types the daemon relays (F33 of the threat model): a block list that
/// covers an alias on the upstream's chain blocks the answer for HTTPS, TXT, MX… as it does for
/// addresses, on the daemon's forwarding path (stub, DoT and DoH listeners alike) and in the
/// library's HTTPS/SVCB lookups.
@Suite struct RelayedCloakingTests {
    /// A DoH upstream that answers every relayed query with a CNAME chain from the question's name
    /// (the chain `chains` gives for its first label, else none) ending in one TXT or HTTPS record.
    final class ChainUpstream: MessageExchanging, Sendable {
        let identifier = "https://fake.test/dns-query"
        let source = Resolution.Source.doh
        let asked = Mutex<[String]>([])
        let chains: [String: [String]]

        init(_ chains: [String: [String]]) { self.chains = chains }

        func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
            .nodata(negativeTTL: 60)
        }

        func exchange(_ query: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8] {
            guard let message = try? DNSMessage(decoding: query), let question = message.questions.first else {
                throw DNSError(.invalidQuery, "not a query")
            }
            asked.withLock { $0.append("\(question.name) \(question.type)") }
            let first = question.name.description.split(separator: ".").first.map(String.init) ?? ""
            var answers: [DNSMessage.Record] = []
            var owner = question.name
            for alias in chains[first] ?? [] {
                // A chain that loops names an alias seen before.
                let target = try! DomainName(alias)
                answers.append(.init(name: owner, type: .cname, ttl: 300, data: .cname(target)))
                owner = target
            }
            let payload: [UInt8] =
                switch question.type {
                case .txt: [4] + Array("cdn!".utf8)
                case .a: [198, 18, 0, 1]
                default: [0, 1, 0]
                }
            let pixel = try! DomainName("pixel.tracker.test")
            switch first {
            case "dup":
                // Two CNAMEs at one owner: this resolver would follow the first, a client may take
                // the second (dnspython keeps the last).
                answers = [
                    .init(name: question.name, type: .cname, ttl: 300, data: .cname(try! DomainName("clean.cdn.test"))),
                    .init(name: question.name, type: .cname, ttl: 300, data: .cname(pixel)),
                    .init(name: pixel, type: question.type, ttl: 300, data: .opaque(payload)),
                ]
            case "chaos":
                // A CNAME of class CH, then the listed name's record.
                answers = [
                    .init(name: question.name, type: .cname, recordClass: 3, ttl: 300, data: .cname(pixel)),
                    .init(name: pixel, type: question.type, ttl: 300, data: .opaque(payload)),
                ]
            case "x":
                // A DNAME to the listed zone without its synthesized CNAME (RFC 6672 breaks it; a client
                // that does DNAME itself follows it).
                let owner = try! DomainName(question.name.description.split(separator: ".").dropFirst().joined(separator: "."))
                answers = [
                    .init(name: owner, type: RecordType(rawValue: 39), ttl: 300, data: .opaque((try! DomainName("tracker.test")).wire)),
                    .init(name: try! DomainName("x.tracker.test"), type: question.type, ttl: 300, data: .opaque(payload)),
                ]
            default:
                answers.append(.init(name: owner, type: question.type, ttl: 300, data: .opaque(payload)))
            }
            return DNSMessage(id: message.id, flags: 0x8180, questions: [question], answers: answers).encode()
        }
    }

    static let chains: [String: [String]] = [
        "cloaked": ["edge.site-cdn.test", "pixel.tracker.test", "end.cdn.test"],
        "deep": (1...40).map { "hop\($0).neutral.test" } + ["last.tracker.test"],
        "clean": ["edge.site-cdn.test", "end.cdn.test"],
        "loop": ["a.loop.test", "b.loop.test", "a.loop.test"],
    ]

    func resolver(_ block: LocalZone.BlockAnswer = .nxdomain, metrics: TestMetrics = TestMetrics()) throws -> (HTTPDNSResolver, ChainUpstream) {
        var builder = LocalZone.Builder()
        builder.blockAnswer = block
        builder.addBlockList(Array("tracker.test\nads.test\n".utf8), source: "list")
        try builder.addRecord("local.tracker.test A 10.0.0.1")
        try builder.addRecord("home.site.test CNAME clean.site.test")
        try builder.addRecord("away.site.test CNAME pixel.tracker.test")
        let upstream = ChainUpstream(Self.chains)
        let configuration = HTTPDNSConfiguration(upstreams: [], localZone: try builder.build())
        return (HTTPDNSResolver(configuration: configuration, options: HTTPDNSOptions(), upstreams: [upstream], metrics: metrics), upstream)
    }

    func ask(_ resolver: HTTPDNSResolver, _ name: String, _ type: RecordType) async throws -> DNSMessage {
        let wire = DNSMessage(id: 0x4242, flags: 0x0100, questions: [.init(name: try DomainName(name), type: type)]).encode()
        let answer = await DNSResponder.answer(try DNSQuery(wire), resolver: resolver)
        let message = try DNSMessage(decoding: answer.bytes)
        #expect(message.id == 0x4242)
        return message
    }

    @Test(arguments: [RecordType.txt, .https, .mx])
    func aListedAliasOnARelayedChainBlocksTheAnswer(type: RecordType) async throws {
        let metrics = TestMetrics()
        let (resolver, upstream) = try resolver(metrics: metrics)
        let cloaked = try await ask(resolver, "cloaked.site.test", type)
        #expect(cloaked.responseCode == .nameError, "\(cloaked.answers)")
        #expect(cloaked.answers.isEmpty, "no record of the chain is passed on: \(cloaked.answers)")
        // The listed alias 41 steps down the chain: found wherever it is.
        let deep = try await ask(resolver, "deep.site.test", type)
        #expect(deep.responseCode == .nameError && deep.answers.isEmpty, "\(deep.answers)")
        #expect(try metrics.expectCounter("httpdns_local_answers_total", [("kind", "blocked")]).totalValue == 2)
        // Both were asked upstream (the asked names are not listed): blocked on what came back.
        #expect(upstream.asked.withLock { $0 } == ["cloaked.site.test \(type)", "deep.site.test \(type)"])
    }

    /// Names a client could reach that this resolver's own walk would not (redteam of the F33 fix):
    /// the second of two CNAMEs at one owner, a CNAME of another class, a DNAME's records without
    /// their CNAME. Every owner and CNAME target in the answer is checked.
    @Test(arguments: ["dup.site.test", "chaos.site.test", "x.dname.site.test"])
    func everyNameInTheAnswerIsChecked(name: String) async throws {
        let (resolver, _) = try resolver()
        for type in [RecordType.txt, .https] {
            let answer = try await ask(resolver, name, type)
            #expect(answer.responseCode == .nameError && answer.answers.isEmpty, "\(name) \(type): \(answer.answers)")
        }
        await #expect {
            try await resolver.serviceBindings(for: name)
        } throws: {
            ($0 as? DNSError)?.code == .nxdomain
        }
    }

    /// F48-10: an A query for a name DNS allows but a host name does not is relayed (and the relayed
    /// block check reads its whole chain), not looked up as a host by the engine.
    @Test func anAddressQueryForANameThatIsNoHostNameIsRelayed() async throws {
        let (resolver, upstream) = try resolver()
        let name = try DomainName(presentation: "cloaked.a*b.site.test")
        let hostName = try DomainName("cloaked.site.test")
        #expect(!name.isHostName && hostName.isHostName)
        let wire = DNSMessage(id: 7, flags: 0x0100, questions: [.init(name: name, type: .a)]).encode()
        let answer = try DNSMessage(decoding: await DNSResponder.answer(try DNSQuery(wire), resolver: resolver).bytes)
        #expect(answer.responseCode == .nameError && answer.answers.isEmpty, "blocked on the relayed chain: \(answer.responseCode) \(answer.answers)")
        #expect(upstream.asked.withLock { $0 } == ["cloaked.a*b.site.test A"], "relayed as a message")
    }

    /// R5: a query is at most 4,096 bytes; a larger one (EDNS options) is FORMERR — relayed types
    /// and addresses alike, cached or not — and nothing is looked up or sent upstream.
    @Test func aQueryAboveTheSizeCapIsAFormatErrorNeverLookedUp() async throws {
        let (resolver, upstream) = try resolver()
        func query(_ name: String, _ type: RecordType, size: Int) throws -> DNSQuery {
            let bare = DNSMessage(id: 9, flags: 0x0100, questions: [.init(name: try DomainName(name), type: type)]).encode()
            // An OPT record (11 bytes) holding one option of code 65001 that fills it up to `size`.
            let optionLength = size - bare.count - 11 - 4
            var wire = bare
            wire[11] = 1  // ARCOUNT
            wire += [0, 0, 41, 0x04, 0xD0, 0, 0, 0, 0]
            wire += [UInt8((optionLength + 4) >> 8), UInt8((optionLength + 4) & 0xff)]
            wire += [0xFD, 0xE9, UInt8(optionLength >> 8), UInt8(optionLength & 0xff)]
            wire += [UInt8](repeating: 0, count: optionLength)
            #expect(wire.count == size)
            return try DNSQuery(wire)
        }
        let cap = DNSResponder.maxQuery
        let atTheCap = try DNSMessage(decoding: await DNSResponder.answer(try query("clean.site.test", .txt, size: cap), resolver: resolver).bytes)
        #expect(atTheCap.responseCode == .noError && upstream.asked.withLock { $0 } == ["clean.site.test TXT"])
        for (name, type) in [("clean.site.test", RecordType.txt), ("other.site.test", .a), ("third.site.test", .aaaa)] {
            let above = try query(name, type, size: cap + 1)
            #expect(DNSResponder.answerWithoutWaiting(above, resolver: resolver).map { $0.bytes[3] & 0x0f } == 1, "FORMERR at once")
            let answer = try DNSMessage(decoding: await DNSResponder.answer(above, resolver: resolver).bytes)
            #expect(answer.responseCode == .formatError && answer.answers.isEmpty, "\(name) \(type)")
        }
        #expect(upstream.asked.withLock { $0 }.count == 1, "nothing over the cap looked up or sent upstream")
        // An address query at the cap is looked up as any other.
        let address = try DNSMessage(decoding: await DNSResponder.answer(try query("other.site.test", .a, size: cap), resolver: resolver).bytes)
        #expect(address.responseCode != .formatError)
    }

    @Test func unlistedChainsAndLoopsAreRelayedAsTheUpstreamSentThem() async throws {
        let (resolver, _) = try resolver()
        let clean = try await ask(resolver, "clean.site.test", .txt)
        #expect(clean.responseCode == .noError)
        #expect(clean.answers.map(\.type) == [.cname, .cname, .txt])
        let loop = try await ask(resolver, "loop.site.test", .txt)
        #expect(loop.responseCode == .noError && loop.answers.count == 4)
    }

    /// The library's HTTPS/SVCB lookups ask local data first, as the daemon does for every type: a
    /// local name is never blocked nor sent upstream, a local alias leaving the local data is
    /// followed (and blocked when it leads to a listed name).
    @Test func serviceBindingLookupsAskLocalDataFirst() async throws {
        let (resolver, upstream) = try resolver()
        await #expect {
            try await resolver.serviceBindings(for: "local.tracker.test")
        } throws: {
            ($0 as? DNSError)?.code == .nodata
        }
        let home = try await resolver.serviceBindings(for: "home.site.test")
        #expect(home.host == "home.site.test" && home.records.count == 1, "\(home)")
        #expect(home.canonicalName == "end.cdn.test")
        await #expect {
            try await resolver.serviceBindings(for: "away.site.test")
        } throws: {
            ($0 as? DNSError)?.code == .nxdomain
        }
        #expect(upstream.asked.withLock { $0 } == ["clean.site.test HTTPS"])
    }

    @Test func theBlockAnswerIsTheConfiguredOne() async throws {
        let refused = try await ask(try resolver(.refused).0, "cloaked.site.test", .https)
        #expect(refused.responseCode == .refused)
        // null-ip has no address to give a TXT question: NOERROR without records (NODATA).
        let null = try await ask(try resolver(.nullIP).0, "cloaked.site.test", .txt)
        #expect(null.responseCode == .noError && null.answers.isEmpty, "\(null.answers)")
    }

    @Test func theLibrarysServiceBindingLookupsAreBlockedToo() async throws {
        let (resolver, upstream) = try resolver()
        await #expect {
            try await resolver.serviceBindings(for: "cloaked.site.test")
        } throws: {
            ($0 as? DNSError)?.code == .nxdomain && ($0 as? DNSError)?.message.contains("pixel.tracker.test in its answer") == true
        }
        // A listed name itself never reaches the upstream.
        await #expect {
            try await resolver.serviceBindings(for: "x.ads.test")
        } throws: {
            ($0 as? DNSError)?.code == .nxdomain
        }
        #expect(upstream.asked.withLock { $0 } == ["cloaked.site.test HTTPS"])
    }
}
