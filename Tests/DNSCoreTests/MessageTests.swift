import Testing

@testable import DNSCore

/// Builds raw messages byte by byte, so tests can write exactly the defect they need.
struct WireBuilder {
    var bytes: [UInt8] = []

    init(id: UInt16 = 0, flags: UInt16 = 0x8180, qd: UInt16 = 1, an: UInt16 = 0, ns: UInt16 = 0, ar: UInt16 = 0) {
        for value in [id, flags, qd, an, ns, ar] { u16(value) }
    }

    mutating func u16(_ value: UInt16) { bytes += [UInt8(value >> 8), UInt8(value & 0xff)] }
    mutating func u32(_ value: UInt32) {
        u16(UInt16(value >> 16))
        u16(UInt16(value & 0xffff))
    }
    mutating func name(_ text: String) {
        for label in text.split(separator: ".") {
            bytes.append(UInt8(label.utf8.count))
            bytes += label.utf8
        }
        bytes.append(0)
    }
    mutating func question(_ text: String, type: UInt16 = 1) {
        name(text)
        u16(type)
        u16(1)
    }
    mutating func record(_ owner: String, type: UInt16, ttl: UInt32 = 300, rdata: [UInt8]) {
        name(owner)
        u16(type)
        u16(1)
        u32(ttl)
        u16(UInt16(rdata.count))
        bytes += rdata
    }
}

@Suite struct MessageDecodingTests {
    @Test func decodesAnAnswerWithCompressedNames() throws {
        var w = WireBuilder(an: 2)
        w.question("Www.HD.test")  // question at offset 12
        w.bytes += [0xc0, 12]
        w.u16(5)
        w.u16(1)
        w.u32(120)  // CNAME owner = pointer to question name
        w.u16(6)
        w.bytes += [3] + Array("cdn".utf8) + [0xc0, 16]  // cdn.hd.test via pointer into the name
        let cdnOffset = w.bytes.count - 6
        w.bytes += [0xc0, UInt8(cdnOffset)]
        w.u16(1)
        w.u16(1)
        w.u32(60)
        w.u16(4)
        w.bytes += [198, 18, 0, 9]
        let message = try DNSMessage(decoding: w.bytes)
        #expect(message.answers.count == 2)
        #expect(message.answers[0].name.description == "www.hd.test")
        #expect(message.answers[0].data == .cname(try DomainName("cdn.hd.test")))
        #expect(message.answers[1].name.description == "cdn.hd.test")
        #expect(message.answers[1].data == .address(IPAddress("198.18.0.9")!))
        let answer = try message.addressAnswer(for: .init(name: try DomainName("www.hd.test"), type: .a), id: 0)
        #expect(
            answer
                == .addresses(
                    [ResolvedAddress(ip: IPAddress("198.18.0.9")!, ttl: 60)],
                    canonicalName: try DomainName("cdn.hd.test")))
    }

    @Test func rejectsTruncatedInputAtEveryLength() throws {
        var w = WireBuilder(an: 1)
        w.question("www.hd.test")
        w.record("www.hd.test", type: 1, rdata: [198, 18, 0, 10])
        #expect(throws: Never.self) { try DNSMessage(decoding: w.bytes) }
        for length in 0..<w.bytes.count {
            #expect(throws: WireError.self, "length \(length)") { try DNSMessage(decoding: Array(w.bytes[..<length])) }
        }
        #expect(throws: WireError.truncated(offset: 0, needed: 2)) { try DNSMessage(decoding: []) }
    }

    @Test func rejectsPointerLoops() {
        var w = WireBuilder()
        w.bytes += [0xc0, 12]  // points at itself
        w.u16(1)
        w.u16(1)
        #expect(throws: WireError.pointerLoop(offset: 12)) { try DNSMessage(decoding: w.bytes) }

        // A label followed by a pointer back to that label: strictly backwards from the pointer, but
        // not from the start of the name, so it would loop forever.
        var x = WireBuilder()
        x.bytes += [1, UInt8(ascii: "a"), 0xc0, 12]
        x.u16(1)
        x.u16(1)
        #expect(throws: WireError.pointerLoop(offset: 14)) { try DNSMessage(decoding: x.bytes) }
    }

    /// A name reached through a chain of pointers to pointers (each strictly backwards): 256 jumps
    /// are followed, 257 are `tooManyPointers` — a hostile answer cannot make one name cost
    /// thousands of jumps.
    @Test(arguments: [255, 256])
    func pointerChainsAreFollowedUpToTheirBound(links: Int) throws {
        var w = WireBuilder(an: 2)
        w.question("a.test")  // the name at 12
        // A TXT record whose data is the chain: each pointer points at the one before, the first at 12.
        w.bytes += [0xc0, 12]
        w.u16(16)
        w.u16(1)
        w.u32(300)
        w.u16(UInt16(2 * links))
        let chainStart = w.bytes.count
        for link in 0..<links {
            let target = link == 0 ? 12 : chainStart + 2 * (link - 1)
            w.bytes += [0xc0 | UInt8(target >> 8), UInt8(target & 0xff)]
        }
        // An A record owned by a pointer to the chain's last link: 1 + links jumps to the name.
        let owner = w.bytes.count
        let last = chainStart + 2 * (links - 1)
        w.bytes += [0xc0 | UInt8(last >> 8), UInt8(last & 0xff)]
        w.u16(1)
        w.u16(1)
        w.u32(300)
        w.u16(4)
        w.bytes += [198, 18, 0, 1]
        if links + 1 <= 256 {
            let message = try DNSMessage(decoding: w.bytes)
            #expect(message.answers.last?.name.description == "a.test")
        } else {
            #expect(throws: WireError.tooManyPointers(offset: owner)) { try DNSMessage(decoding: w.bytes) }
        }
    }

    @Test func rejectsForwardAndOutOfRangePointers() {
        var w = WireBuilder()
        w.bytes += [0xc0, 0xff]
        w.u16(1)
        w.u16(1)
        #expect(throws: WireError.pointerOutOfRange(offset: 12, target: 255)) { try DNSMessage(decoding: w.bytes) }

        var forward = WireBuilder()
        forward.bytes += [0xc0, 16]  // forward, inside the message
        forward.u16(1)
        forward.u16(1)
        #expect(throws: WireError.pointerLoop(offset: 12)) { try DNSMessage(decoding: forward.bytes) }
    }

    @Test func rejectsReservedLabelTypes() {
        var w = WireBuilder()
        w.bytes += [0x41, 0, 0]
        w.u16(1)
        w.u16(1)
        #expect(throws: WireError.badLabelType(offset: 12)) { try DNSMessage(decoding: w.bytes) }
    }

    @Test func rejectsNamesOver255Octets() {
        var w = WireBuilder()
        for _ in 0..<5 {
            w.bytes.append(60)
            w.bytes += Array(repeating: UInt8(ascii: "a"), count: 60)
        }
        w.bytes.append(0)
        w.u16(1)
        w.u16(1)
        #expect(throws: WireError.nameTooLong(offset: 12)) { try DNSMessage(decoding: w.bytes) }
    }

    @Test func rejectsRDataOverruns() {
        var w = WireBuilder(an: 1)
        w.question("www.hd.test")
        w.name("www.hd.test")
        w.u16(1)
        w.u16(1)
        w.u32(300)
        w.u16(40)
        w.bytes += [198, 18, 0, 10]
        // RDLENGTH sits at offset 12 + 17 (question) + 13 (owner) + 8 = 50.
        #expect(throws: WireError.rdataOverrun(offset: 50, length: 40)) { try DNSMessage(decoding: w.bytes) }
    }

    @Test(arguments: [(UInt16(1), 3), (1, 16), (28, 4), (28, 15)])
    func rejectsAddressRecordsWithWrongLength(type: UInt16, length: Int) {
        var w = WireBuilder(an: 1)
        w.question("www.hd.test", type: type)
        w.record("www.hd.test", type: type, rdata: Array(repeating: 1, count: length))
        #expect(throws: WireError.badRDataLength(type: RecordType(rawValue: type), length: length)) {
            try DNSMessage(decoding: w.bytes)
        }
    }

    @Test func rejectsCNAMEWhoseNameDoesNotFillItsRData() {
        var w = WireBuilder(an: 1)
        w.question("www.hd.test")
        var target = WireBuilder(qd: 0)
        target.bytes = []
        target.name("x.test")
        w.record("www.hd.test", type: 5, rdata: target.bytes + [0, 0])
        #expect(throws: WireError.badRDataLength(type: .cname, length: target.bytes.count + 2)) {
            try DNSMessage(decoding: w.bytes)
        }
    }

    @Test func rejectsTrailingGarbage() {
        var w = WireBuilder()
        w.question("www.hd.test")
        w.bytes += [0xde, 0xad]
        #expect(throws: WireError.trailingData(offset: w.bytes.count - 2, count: 2)) { try DNSMessage(decoding: w.bytes) }
    }

    @Test func rejectsRecordCountsThatCannotFit() {
        var w = WireBuilder(qd: 1, an: 65535)
        w.question("www.hd.test")
        #expect(throws: WireError.tooManyRecords(count: 65536)) { try DNSMessage(decoding: w.bytes) }
    }

    @Test func readsTTLsWithTheTopBitSetAsZero() throws {
        var w = WireBuilder(an: 1)
        w.question("www.hd.test")
        w.record("www.hd.test", type: 1, ttl: 0x8000_0001, rdata: [198, 18, 0, 10])
        #expect(try DNSMessage(decoding: w.bytes).answers[0].ttl == 0)
    }
}

@Suite struct QueryEncodingTests {
    @Test func queriesArePaddedToMultiplesOf128() throws {
        for name in ["a.test", "www.hd.test", String(repeating: "x", count: 63) + ".test", "a.b.c.d.e.f.g.test"] {
            let wire = DNSMessage.query(name: try DomainName(name), type: .aaaa)
            #expect(wire.count % 128 == 0, "\(name): \(wire.count) octets")
            let decoded = try DNSMessage(decoding: wire)
            #expect(decoded.id == 0)
            #expect(decoded.flags == 0x0100)
            #expect(decoded.questions == [.init(name: try DomainName(name), type: .aaaa)])
            let opt = try #require(decoded.additionals.first)
            #expect(opt.type == .opt)
            #expect(opt.recordClass == DNSMessage.advertisedPayloadSize)
            guard case let .opaque(rdata) = opt.data else {
                Issue.record("OPT RDATA")
                continue
            }
            #expect(rdata[0] == 0 && rdata[1] == 12, "padding option code")
            #expect(rdata[4...].allSatisfy { $0 == 0 })
        }
    }

    @Test func unpaddedQueryHasAnEmptyOPT() throws {
        let wire = DNSMessage.query(name: try DomainName("www.hd.test"), type: .a, id: 0x1234, padded: false)
        #expect(wire.count == 12 + 13 + 4 + 11)
        #expect(Array(wire[0..<2]) == [0x12, 0x34])
    }
}

@Suite struct AddressAnswerTests {
    let question = DNSMessage.Question(name: try! DomainName("www.hd.test"), type: .a)

    func response(
        flags: UInt16 = 0x8180, id: UInt16 = 0, question: DNSMessage.Question? = nil,
        answers: [DNSMessage.Record] = [], authorities: [DNSMessage.Record] = []
    ) -> DNSMessage {
        DNSMessage(id: id, flags: flags, questions: [question ?? self.question], answers: answers, authorities: authorities)
    }

    func a(_ owner: String, _ ip: String, ttl: UInt32 = 300) -> DNSMessage.Record {
        .init(name: try! DomainName(owner), type: .a, ttl: ttl, data: .address(IPAddress(ip)!))
    }

    func cname(_ owner: String, _ target: String, ttl: UInt32 = 300) -> DNSMessage.Record {
        .init(name: try! DomainName(owner), type: .cname, ttl: ttl, data: .cname(try! DomainName(target)))
    }

    @Test func followsTheCNAMEChainAndCapsTTLs() throws {
        let message = response(answers: [
            cname("www.hd.test", "b.hd.test", ttl: 50), cname("b.hd.test", "c.hd.test", ttl: 400),
            a("c.hd.test", "198.18.0.1", ttl: 300),
        ])
        let answer = try message.addressAnswer(for: question, id: 0)
        #expect(answer == .addresses([.init(ip: IPAddress("198.18.0.1")!, ttl: 50)], canonicalName: try DomainName("c.hd.test")))
    }

    @Test func ignoresRecordsForNamesOutsideTheChain() throws {
        // A hostile resolver slips in an address for another name: it must not be returned.
        let message = response(answers: [
            a("evil.test", "203.0.113.66"), a("www.hd.test", "198.18.0.10"),
            a("other.hd.test", "198.18.0.99"),
        ])
        let answer = try message.addressAnswer(for: question, id: 0)
        #expect(answer == .addresses([.init(ip: IPAddress("198.18.0.10")!, ttl: 300)], canonicalName: question.name))
    }

    @Test func onlyUnrelatedRecordsMeansNoData() throws {
        let message = response(answers: [a("evil.test", "203.0.113.66")])
        #expect(try message.addressAnswer(for: question, id: 0) == .nodata(negativeTTL: nil))
    }

    @Test func comparesTheQuestionCaseInsensitively() throws {
        let echoed = DNSMessage.Question(name: try DomainName("WWW.Hd.TEST"), type: .a)
        let message = response(question: echoed, answers: [a("WwW.hd.test", "198.18.0.10")])
        #expect(throws: Never.self) { try message.addressAnswer(for: question, id: 0) }
    }

    @Test func rejectsResponsesThatDoNotAnswerTheQuery() throws {
        #expect(throws: WireError.notAResponse) { try response(flags: 0x0100).addressAnswer(for: question, id: 0) }
        #expect(throws: WireError.opcodeMismatch(got: 2)) { try response(flags: 0x9180).addressAnswer(for: question, id: 0) }
        #expect(throws: WireError.idMismatch(expected: 0, got: 7)) { try response(id: 7).addressAnswer(for: question, id: 0) }
        let other = DNSMessage.Question(name: try DomainName("other.hd.test"), type: .a)
        #expect(throws: WireError.self) { try response(question: other).addressAnswer(for: question, id: 0) }
        let otherType = DNSMessage.Question(name: question.name, type: .aaaa)
        #expect(throws: WireError.self) { try response(question: otherType).addressAnswer(for: question, id: 0) }
    }

    @Test func negativeAnswersCarryTheSOAMinimum() throws {
        let soa = DNSMessage.Record(
            name: try DomainName("hd.test"), type: .soa, ttl: 300,
            data: .soa(
                .init(
                    primary: try DomainName("ns.hd.test"), mailbox: try DomainName("admin.hd.test"),
                    serial: 1, refresh: 2, retry: 3, expire: 4, minimum: 60)))
        #expect(try response(flags: 0x8183, authorities: [soa]).addressAnswer(for: question, id: 0) == .nxdomain(negativeTTL: 60))
        var shortSOA = soa
        shortSOA.ttl = 10
        #expect(try response(authorities: [shortSOA]).addressAnswer(for: question, id: 0) == .nodata(negativeTTL: 10))
    }

    @Test func errorRcodesThrowSpecificCodes() {
        #expect { try response(flags: 0x8182).addressAnswer(for: question, id: 0) } throws: {
            ($0 as? DNSError)?.code == .serverFailure
        }
        #expect { try response(flags: 0x8185).addressAnswer(for: question, id: 0) } throws: {
            ($0 as? DNSError)?.code == .refused
        }
    }

    @Test func rejectsCNAMELoopsAndOverlongChains() throws {
        let loop = response(answers: [cname("www.hd.test", "b.hd.test"), cname("b.hd.test", "www.hd.test")])
        #expect { try loop.addressAnswer(for: question, id: 0) } throws: { ($0 as? DNSError)?.code == .malformedResponse }
        var chain = [cname("www.hd.test", "c0.hd.test")]
        for i in 0..<20 { chain.append(cname("c\(i).hd.test", "c\(i + 1).hd.test")) }
        #expect { try response(answers: chain).addressAnswer(for: question, id: 0) } throws: {
            ($0 as? DNSError)?.code == .malformedResponse
        }
    }
}

/// F26 of redteam-4: a listed alias in the middle of a CNAME chain becomes the answer's canonical
/// name, so that the block lists' check of canonical names sees it.
@Suite struct FlaggedAliasTests {
    @Test func aFlaggedAliasInTheChainIsTheCanonicalName() throws {
        let question = DNSMessage.Question(name: try DomainName("mid.news.test"), type: .a)
        var message = DNSMessage(id: 0, flags: 0x8180, questions: [question])
        message.answers = [
            .init(name: try DomainName("mid.news.test"), type: .cname, ttl: 60, data: .cname(try DomainName("ads.tracker.test"))),
            .init(name: try DomainName("ads.tracker.test"), type: .cname, ttl: 60, data: .cname(try DomainName("edge.cdn.test"))),
            .init(name: try DomainName("edge.cdn.test"), type: .a, ttl: 60, data: .address(IPAddress("198.51.100.6")!)),
        ]
        let tracker = try DomainName("tracker.test")
        let flagging: @Sendable (DomainName) -> Bool = { name in
            name == tracker || name.wire.count > tracker.wire.count && name.wire.suffix(tracker.wire.count).elementsEqual(tracker.wire)
        }
        let plain = try message.answer(to: question, id: 0)
        #expect(plain == .addresses([ResolvedAddress(ip: IPAddress("198.51.100.6")!, ttl: 60)], canonicalName: try DomainName("edge.cdn.test")))
        let flagged = try message.answer(to: question, id: 0, flagging: flagging)
        #expect(flagged == .addresses([ResolvedAddress(ip: IPAddress("198.51.100.6")!, ttl: 60)], canonicalName: try DomainName("ads.tracker.test")))
    }
}
