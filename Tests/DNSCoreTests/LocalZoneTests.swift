import TestSupport
import Testing

@testable import DNSCore

/// Local records, hosts files and block lists (`records:`, `hosts_files:`, `block:`): what each
/// form of line means, and what a question is answered with.
@Suite struct LocalZoneTests {
    func name(_ text: String) throws -> DomainName { try DomainName(text) }

    func zone(records: [String] = [], hosts: String? = nil, block: String? = nil, allow: String? = nil) throws -> LocalZone {
        var builder = LocalZone.Builder()
        for record in records { try builder.addRecord(record) }
        if let hosts { try builder.addHosts(hosts, source: "hosts") }
        if let block { builder.addBlockList(Array(block.utf8), source: "block.txt") }
        if let allow { builder.addAllowList(Array(allow.utf8), source: "allow.txt") }
        return try builder.build()
    }

    @Test func nameSetCoversWhatEachEntrySays() throws {
        var set = NameSet()
        set.insert(try name("Ads.Example.test"), .subtree)
        set.insert(try name("tracker.test"), .below)
        set.insert(try name("exact.test"), .apex)
        #expect(set.covers(try name("ads.example.test")))
        #expect(set.covers(try name("x.y.ADS.example.test")))
        #expect(!set.covers(try name("example.test")))
        #expect(!set.covers(try name("xads.example.test")))
        #expect(set.covers(try name("a.tracker.test")))
        #expect(!set.covers(try name("tracker.test")))
        #expect(set.covers(try name("exact.test")))
        #expect(!set.covers(try name("www.exact.test")))
        // Inserting a name again merges what it covers.
        set.insert(try name("exact.test"), .below)
        #expect(set.covers(try name("www.exact.test")))
        #expect(set.count == 3)
    }

    @Test func nameSetGrowsAndFindsEveryName() throws {
        var set = NameSet()
        var random = SplitMix64(state: 7)
        var names: [DomainName] = []
        for index in 0..<20_000 {
            let label = String(random.next() % 1_000_000_000, radix: 36)
            names.append(try name("n\(index)-\(label).list.test"))
        }
        for entry in names { set.insert(entry, .apex) }
        #expect(set.count == names.count)
        #expect(names.allSatisfy { set.covers($0) })
        #expect(!set.covers(try name("absent.list.test")))
        // About 35 bytes a name here: the names' wire forms and a 4-byte slot at least half full.
        #expect(set.memoryBytes < names.count * 80, "\(set.memoryBytes) bytes for \(names.count) names")
    }

    @Test func blockListFormsAreReadAsPeersReadThem() throws {
        let list = """
            # a comment
            ! an adblock comment
            ads.test
            *.wild.test
            0.0.0.0 hosts-one.test hosts-two.test # trailing comment
            127.0.0.1 localhost
            ::1 ip6-localhost
            ||adblock.test^
            @@||ok.adblock.test^
            ||with-options.test^$third-party
            /regex.*/
            bad..name.test
            UPPER.Test.
            """
        var builder = LocalZone.Builder()
        let count = builder.addBlockList(Array(list.utf8), source: "list")
        let zone = try builder.build()
        #expect(count.names == 7)
        #expect(count.skipped == 3)
        #expect(count.firstSkippedLine == 10)
        for blocked in [
            "ads.test", "sub.ads.test", "a.wild.test", "hosts-one.test", "hosts-two.test", "adblock.test", "x.adblock.test", "upper.test",
        ] {
            #expect(zone.isBlocked(try name(blocked)), "\(blocked)")
        }
        for open in ["wild.test", "www.hosts-one.test", "localhost", "ok.adblock.test", "a.ok.adblock.test", "with-options.test", "test"] {
            #expect(!zone.isBlocked(try name(open)), "\(open)")
        }
    }

    @Test func anAllowEntryWinsOverTheBlockList() throws {
        let zone = try zone(block: "ads.test\n", allow: "good.ads.test\n")
        #expect(zone.answer(try name("x.ads.test"), type: .a) == .blocked(.nxdomain))
        #expect(zone.answer(try name("good.ads.test"), type: .a) == nil)
        #expect(zone.answer(try name("www.good.ads.test"), type: .a) == nil)
    }

    @Test func recordsAnswerTheirNameForEveryType() throws {
        let zone = try zone(records: [
            "nas.home.test A 192.168.1.10",
            "nas.home.test 600 IN AAAA fd00::10",
            "home.test TXT \"v=spf1 -all\" \"second \\\"quoted\\\"\" bare",
            "www.home.test CNAME nas.home.test",
            "cdn.home.test CNAME edge.cdn.test",
        ])
        let nas = try name("nas.home.test")
        guard case let .records(a, nil) = zone.answer(nas, type: .a) else {
            Issue.record("no A")
            return
        }
        #expect(a.map(\.data) == [.address(IPAddress("192.168.1.10")!)])
        #expect(a.first?.ttl == 300)
        guard case let .records(aaaa, nil) = zone.answer(nas, type: .aaaa) else {
            Issue.record("no AAAA")
            return
        }
        #expect(aaaa.first?.ttl == 600)
        // The name is local: a type it lacks is NODATA, not a lookup.
        #expect(zone.answer(nas, type: .mx) == .records([], continueAt: nil))
        guard case let .records(txt, nil) = zone.answer(try name("home.test"), type: .txt) else {
            Issue.record("no TXT")
            return
        }
        #expect(txt.first?.data == .text([Array("v=spf1 -all".utf8), Array("second \"quoted\"".utf8), Array("bare".utf8)]))
        // A CNAME chain through local data ends at the target's records…
        guard case let .records(chain, nil) = zone.answer(try name("www.home.test"), type: .a) else {
            Issue.record("no chain")
            return
        }
        #expect(chain.map(\.type) == [.cname, .a])
        // …and where it leaves the local data, the target is looked up as usual.
        guard case let .records(out, target?) = zone.answer(try name("cdn.home.test"), type: .aaaa) else {
            Issue.record("no exit")
            return
        }
        #expect(out.map(\.type) == [.cname])
        #expect(target == (try name("edge.cdn.test")))
        // Asked for the CNAME itself: the CNAME, not followed.
        guard case let .records(alias, nil) = zone.answer(try name("www.home.test"), type: .cname) else {
            Issue.record("no CNAME")
            return
        }
        #expect(alias.count == 1)
        // Not local: nil.
        #expect(zone.answer(try name("other.test"), type: .a) == nil)
    }

    @Test func addressesGetPTRRecordsUnlessGivenTheirOwn() throws {
        let zone = try zone(
            records: ["nas.home.test A 192.168.1.10", "printer.home.test AAAA 2001:db8::1", "10.1.168.192.in-addr.arpa PTR storage.home.test"],
            hosts: "192.168.1.20 laptop.home.test laptop\n")
        func ptr(_ ip: String) -> [DomainName] {
            guard case let .records(list, nil) = zone.answer(LocalZone.reverseName(of: IPAddress(ip)!), type: .ptr) else { return [] }
            return list.compactMap { if case let .name(target) = $0.data { target } else { nil } }
        }
        #expect(ptr("192.168.1.10") == [try name("storage.home.test")])
        #expect(ptr("2001:db8::1") == [try name("printer.home.test")])
        #expect(Set(ptr("192.168.1.20")) == [try name("laptop.home.test"), try name("laptop")])
        #expect(LocalZone.reverseName(of: IPAddress("2001:db8::1")!).description.hasPrefix("1.0.0.0.0.0.0.0"))
        #expect(LocalZone.reverseName(of: IPAddress("2001:db8::1")!).description.hasSuffix("8.b.d.0.1.0.0.2.ip6.arpa"))
    }

    @Test func badRecordsAreRefusedWithWhatIsWrong() throws {
        let cases: [(String, String)] = [
            ("nas.home.test A 2001:db8::1", "not an IPv4 address"),
            ("nas.home.test AAAA 192.0.2.1", "not an IPv6 address"),
            ("nas.home.test MX 10 mail.test", "not one of A, AAAA, CNAME, PTR, TXT"),
            ("nas..test A 192.0.2.1", "empty label"),
            ("nas.home.test A", "too few fields"),
            ("nas.home.test 4294967295 A 192.0.2.1", "over 2147483647"),
            ("t.test TXT \"unterminated", "unterminated"),
            ("t.test TXT \"\(String(repeating: "x", count: 256))\"", "255 at most"),
        ]
        for (line, problem) in cases {
            var builder = LocalZone.Builder()
            #expect(throws: DNSError.self, "\(line)") { try builder.addRecord(line) }
            do { try builder.addRecord(line) } catch { #expect(error.message.contains(problem), "\(line): \(error.message)") }
        }
        var builder = LocalZone.Builder()
        try builder.addRecord("www.home.test CNAME nas.home.test")
        #expect(throws: DNSError.self) { try builder.addRecord("www.home.test A 192.0.2.1") }
        var other = LocalZone.Builder()
        try other.addRecord("www.home.test A 192.0.2.1")
        #expect(throws: DNSError.self) { try other.addRecord("www.home.test CNAME nas.home.test") }
        #expect(throws: DNSError.self) { try other.addHosts("not-an-ip name.test\n", source: "hosts") }
    }

    /// Any bytes as a list: no crash, and every name the reader took is covered afterwards.
    @Test func arbitraryListBytesNeverCrashTheReader() throws {
        var random = SplitMix64(state: 33)
        let alphabet = Array("ab.-_*|^@!#$ \t\r\n0:1\u{00}\u{ff}".utf8)
        for _ in 0..<300 {
            let bytes = (0..<Int(random.next() % 400)).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
            var builder = LocalZone.Builder()
            let count = builder.addBlockList(bytes, source: "fuzz")
            let zone = try builder.build()
            #expect(zone.blockedCount <= count.names)
            _ = zone.answer(try name("a.b"), type: .a)
        }
    }
}
