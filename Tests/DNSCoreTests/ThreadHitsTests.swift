import Dispatch
import Synchronization
import Testing

@testable import DNSCore

/// The memo's per-thread copies (ThreadHits) must return exactly what the memo itself would: never
/// an item the memo has dropped or changed, another memo's item, another host's item, or an item
/// past its `validUntil`.
@Suite struct ThreadHitsTests {
    static let start = ResolverInstant(offset: .seconds(1_000))

    static func resolution(_ host: String, _ address: String) -> Resolution {
        Resolution(
            host: host, addresses: [ResolvedAddress(ip: IPAddress(address)!, ttl: 60)], source: .doh, upstream: nil,
            elapsed: .zero, expiresAt: start + .seconds(60))
    }

    static func address(_ resolution: Resolution?) -> String? { resolution?.addresses.first?.ip.description }

    static func keep(_ memo: ResolutionMemo, _ host: String, _ address: String, validFor: Duration = .seconds(1)) {
        memo.store(resolution(host, address), for: host, type: .a, validUntil: start + validFor, generation: memo.currentGeneration)
    }

    @Test func aThreadsCopyEndsWithTheMemosChange() {
        let memo = ResolutionMemo()
        Self.keep(memo, "www.hd.test", "198.18.0.1")
        for _ in 0..<3 { #expect(Self.address(memo.resolution(for: "www.hd.test", type: .a, now: Self.start)) == "198.18.0.1") }
        memo.invalidate()
        #expect(memo.resolution(for: "www.hd.test", type: .a, now: Self.start) == nil, "the copy outlived an invalidation")
        Self.keep(memo, "www.hd.test", "198.18.0.2")
        #expect(Self.address(memo.resolution(for: "www.hd.test", type: .a, now: Self.start)) == "198.18.0.2")
        memo.removeAll()
        #expect(memo.resolution(for: "www.hd.test", type: .a, now: Self.start) == nil)
    }

    @Test func aLabelReachesTheThreadsCopy() {
        let memo = ResolutionMemo()
        Self.keep(memo, "www.hd.test", "198.18.0.1")
        let unlabelled = memo.resolution(for: "www.hd.test", type: .a, now: Self.start)
        #expect(unlabelled?.dnssec == nil)
        memo.label("www.hd.test", type: .a, with: .secure, addresses: unlabelled?.addresses ?? [])
        #expect(memo.resolution(for: "www.hd.test", type: .a, now: Self.start)?.dnssec == .secure)
    }

    @Test func theCopyEndsAtTheItemsValidUntil() {
        let memo = ResolutionMemo()
        Self.keep(memo, "www.hd.test", "198.18.0.1", validFor: .milliseconds(300))
        #expect(memo.resolution(for: "www.hd.test", type: .a, now: Self.start + .milliseconds(299)) != nil)
        #expect(memo.resolution(for: "www.hd.test", type: .a, now: Self.start + .milliseconds(300)) == nil)
        #expect(memo.resolution(for: "www.hd.test", type: .a, now: Self.start + .seconds(5)) == nil)
    }

    @Test func twoMemosAndTwoTypesNeverShareACopy() {
        let first = ResolutionMemo()
        let second = ResolutionMemo()
        Self.keep(first, "www.hd.test", "198.18.0.1")
        Self.keep(second, "www.hd.test", "198.18.0.2")
        for _ in 0..<3 {
            #expect(Self.address(first.resolution(for: "www.hd.test", type: .a, now: Self.start)) == "198.18.0.1")
            #expect(Self.address(second.resolution(for: "www.hd.test", type: .a, now: Self.start)) == "198.18.0.2")
            #expect(first.resolution(for: "www.hd.test", type: .aaaa, now: Self.start) == nil)
            #expect(first.resolution(for: "www.hd.test", type: .both, now: Self.start) == nil)
        }
    }

    /// More names than the table has slots, many sharing one: each read gives its own host's answer.
    @Test func namesThatShareASlotGetTheirOwnAnswers() {
        let memo = ResolutionMemo(capacity: 100_000)
        let hosts = (0..<12_000).map { "n\($0).hd.test" } + ["a.test", "ab", "x", "", "abcdefgh", "abcdefgi"]
        for (index, host) in hosts.enumerated() { Self.keep(memo, host, "198.18.\(index / 256 % 256).\(index % 256)") }
        var wrong = 0
        for _ in 0..<2 {
            for (index, host) in hosts.enumerated() {
                let found = memo.resolution(for: host, type: .a, now: Self.start)
                if found?.host != host || Self.address(found) != "198.18.\(index / 256 % 256).\(index % 256)" { wrong += 1 }
            }
        }
        #expect(wrong == 0)
    }

    /// Copies made on many threads all end when the memo changes on another.
    @Test func copiesOnOtherThreadsEndWithTheChange() {
        let memo = ResolutionMemo()
        let hosts = (0..<64).map { "h\($0).hd.test" }
        for host in hosts { Self.keep(memo, host, "198.18.0.1") }
        let seen = Mutex<[String: Int]>([:])
        func readEverywhere() {
            DispatchQueue.concurrentPerform(iterations: 16) { _ in
                for _ in 0..<50 {
                    for host in hosts {
                        let found = memo.resolution(for: host, type: .a, now: Self.start)
                        let key = found.map { $0.host == host ? Self.address($0) ?? "?" : "another host" } ?? "nil"
                        seen.withLock { $0[key, default: 0] += 1 }
                    }
                }
            }
        }
        readEverywhere()
        #expect(seen.withLock { $0 } == ["198.18.0.1": 16 * 50 * 64])
        memo.invalidate()
        for host in hosts { Self.keep(memo, host, "198.18.0.2") }
        seen.withLock { $0 = [:] }
        readEverywhere()
        #expect(seen.withLock { $0 } == ["198.18.0.2": 16 * 50 * 64], "a thread kept serving the answer from before the change")
    }
}
