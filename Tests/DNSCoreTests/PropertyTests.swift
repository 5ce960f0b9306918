import TestSupport
import Testing

@testable import DNSCore

/// Serialized: these are CPU-bound and would otherwise hold every thread of the shared pool at once.
@Suite(.serialized) struct WireCodecPropertyTests {
    static func randomName(_ rng: inout SplitMix64) -> DomainName {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8)
        let labels = (0..<Int.random(in: 1...4, using: &rng)).map { _ in
            String(decoding: (0..<Int.random(in: 1...20, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }, as: UTF8.self)
        }
        return try! DomainName(labels.joined(separator: ".") + ".test")
    }

    static func randomRecord(_ rng: inout SplitMix64, owner: DomainName) -> DNSMessage.Record {
        let ttl = UInt32.random(in: 0...0x7fff_ffff, using: &rng)
        switch Int.random(in: 0..<5, using: &rng) {
        case 0: return .init(name: owner, type: .a, ttl: ttl, data: .address(.v4(rng.next() >> 32 == 0 ? 1 : UInt32(truncatingIfNeeded: rng.next()))))
        case 1: return .init(name: owner, type: .aaaa, ttl: ttl, data: .address(.v6(rng.next(), rng.next())))
        case 2: return .init(name: owner, type: .cname, ttl: ttl, data: .cname(randomName(&rng)))
        case 3:
            return .init(
                name: owner, type: .soa, ttl: ttl,
                data: .soa(
                    .init(
                        primary: randomName(&rng), mailbox: randomName(&rng), serial: 1, refresh: 2, retry: 3, expire: 4,
                        minimum: UInt32.random(in: 0...86400, using: &rng))))
        default:
            return .init(
                name: owner, type: .txt, ttl: ttl,
                data: .opaque((0..<Int.random(in: 0...40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }))
        }
    }

    // These loops run for seconds in a debug build. Each yields now and then: a test that holds a
    // thread of the cooperative pool (2 threads on CI) stalls every other test's timers with it.

    @Test func encodeThenDecodeIsIdentity() async throws {
        var rng = SplitMix64(state: 1035)
        for round in 0..<2_000 {
            if round % 20 == 0 { await Task.yield() }
            let owner = Self.randomName(&rng)
            let message = DNSMessage(
                id: UInt16.random(in: 0...UInt16.max, using: &rng), flags: 0x8180,
                questions: [.init(name: owner, type: .a)],
                answers: (0..<Int.random(in: 0...6, using: &rng)).map { _ in Self.randomRecord(&rng, owner: owner) },
                authorities: (0..<Int.random(in: 0...2, using: &rng)).map { _ in Self.randomRecord(&rng, owner: owner) })
            let decoded = try DNSMessage(decoding: message.encode())
            #expect(decoded == message)
        }
    }

    @Test func queriesRoundTripForRandomNames() async throws {
        var rng = SplitMix64(state: 8484)
        for round in 0..<1_000 {
            if round % 20 == 0 { await Task.yield() }
            let name = Self.randomName(&rng)
            let wire = DNSMessage.query(name: name, type: .aaaa)
            #expect(wire.count % 128 == 0)
            #expect(try DNSMessage(decoding: wire).questions.first?.name == name)
        }
    }

    /// Random corruption of valid messages must end in a value or a WireError, never a trap.
    @Test func mutatedMessagesNeverTrap() async {
        var rng = SplitMix64(state: 6891)
        var decodedCount = 0
        for round in 0..<20_000 {
            if round % 100 == 0 { await Task.yield() }
            let owner = Self.randomName(&rng)
            var bytes = DNSMessage(
                id: 0, flags: 0x8180, questions: [.init(name: owner, type: .a)],
                answers: (0..<3).map { _ in Self.randomRecord(&rng, owner: owner) }
            ).encode()
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                case 1: bytes.removeLast(Int.random(in: 0...min(8, bytes.count - 1), using: &rng))
                default: bytes.insert(0xc0, at: Int.random(in: 0...bytes.count, using: &rng))
                }
            }
            if let message = try? DNSMessage(decoding: bytes) {
                decodedCount += 1
                _ = try? message.addressAnswer(for: .init(name: owner, type: .a), id: 0)
            }
        }
        // Some mutations leave a valid message (e.g. a changed TTL byte); most must not.
        #expect(decodedCount > 0 && decodedCount < 20_000)
    }
}
