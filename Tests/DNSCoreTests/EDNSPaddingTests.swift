import DNSCore
import TestSupport
import Testing

/// EDNS padding (RFC 7830) to RFC 8467's blocks: what is padded, to what, and what is left alone.
@Suite struct EDNSPaddingTests {
    static let cookie: [UInt8] = [0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]
    static func padding(_ count: Int) -> [UInt8] { [0, 12, UInt8(count >> 8), UInt8(count & 0xff)] + Array(repeating: 0, count: count) }

    /// The OPT record's options, read back (the OPT is the message's last record in these tests).
    static func options(of message: [UInt8]) throws -> [(code: UInt16, data: [UInt8])] {
        let decoded = try DNSMessage(decoding: message)
        let opt = try #require(decoded.additionals.first { $0.type == .opt })
        guard case let .opaque(data) = opt.data else {
            Issue.record("OPT data \(opt.data)")
            return []
        }
        var options: [(code: UInt16, data: [UInt8])] = []
        var offset = 0
        while offset + 4 <= data.count {
            let length = Int(data[offset + 2]) << 8 | Int(data[offset + 3])
            options.append((UInt16(data[offset]) << 8 | UInt16(data[offset + 1]), Array(data[(offset + 4)..<(offset + 4 + length)])))
            offset += 4 + length
        }
        return options
    }

    @Test(arguments: [EDNSPadding.queryBlock, EDNSPadding.responseBlock])
    func aMessageWithAnOPTRecordIsPaddedToTheBlockWithItsOtherOptionsKept(block: Int) throws {
        for name in ["a.hd.test", "a-rather-longer-name.with.several.labels.hd.test"] {
            let query = Wire.query(name, edns: Wire.opt(size: 1232, dnssecOK: true, options: Self.cookie))
            let padded = EDNSPadding.padded(query, toMultipleOf: block)
            #expect(padded.count % block == 0)
            #expect(padded.count > query.count && padded.count - query.count <= block + 3)
            #expect(Array(padded.prefix(query.count - Self.cookie.count - 2)) == Array(query.prefix(query.count - Self.cookie.count - 2)))
            let options = try Self.options(of: padded)
            #expect(options.map(\.code) == [10, 12])
            #expect(options[0].data == Array(Self.cookie.dropFirst(4)))
            #expect(options[1].data.allSatisfy { $0 == 0 })
            #expect(EDNSPadding.hasPadding(padded))
            #expect(EDNSPadding.padded(padded, toMultipleOf: block) == padded, "padding is idempotent")
            let decoded = try DNSMessage(decoding: padded)
            #expect(decoded.questions == (try DNSMessage(decoding: query)).questions)
        }
    }

    @Test func aClientsPaddingIsReplacedNotAddedTo() throws {
        // A client's query padded to 468 goes upstream padded to 128: its own option is dropped.
        let query = Wire.query("a.hd.test", edns: Wire.opt(options: Self.padding(400)))
        let padded = EDNSPadding.padded(query, toMultipleOf: EDNSPadding.queryBlock)
        #expect(padded.count == 128)
        #expect(try Self.options(of: padded).map(\.code) == [12])
    }

    @Test func anUpstreamsPaddingIsRemovedWithTheOtherOptionsKept() throws {
        let padded = Wire.query("a.hd.test", edns: Wire.opt(options: Self.padding(50) + Self.cookie + Self.padding(0)))
        let unpadded = EDNSPadding.unpadded(padded)
        #expect(unpadded == Wire.query("a.hd.test", edns: Wire.opt(options: Self.cookie)))
        #expect(!EDNSPadding.hasPadding(unpadded))
        // Nothing to remove, no OPT record, or a message that does not walk: the same bytes.
        let plain = Wire.query("a.hd.test", edns: Wire.opt(options: Self.cookie))
        #expect(EDNSPadding.unpadded(plain) == plain)
        #expect(EDNSPadding.unpadded(Wire.query("a.hd.test")) == Wire.query("a.hd.test"))
        let broken = Wire.query("a.hd.test", edns: Wire.opt(options: Self.padding(4))) + [0]
        #expect(EDNSPadding.unpadded(broken) == broken)
    }

    @Test func aMessageThatLandsOnTheBlockGetsAnEmptyOption() throws {
        // 12 + 11 (question "a.hd.test") + 4 = 27; + OPT 11 + option header 4 = 42: pad 86 to 128.
        let query = Wire.query("a.hd.test", edns: Wire.opt())
        let once = EDNSPadding.padded(query, toMultipleOf: EDNSPadding.queryBlock)
        #expect(once.count == 128)
        // A block the padded message already fills: the option stays, with no bytes of padding.
        let exact = EDNSPadding.padded(query, toMultipleOf: query.count + 4)
        #expect(exact.count == query.count + 4)
        #expect(try Self.options(of: exact).map(\.data.count) == [0])
    }

    @Test func messagesWithoutOneOPTRecordOrThatDoNotWalkAreLeftAsTheyAre() {
        let plain = Wire.query("a.hd.test")
        let opt = Wire.opt()
        var twoOPTs = Wire.header(additionals: 2) + Wire.question("a.hd.test") + opt + opt
        let trailing = Wire.query("a.hd.test", edns: opt) + [0]
        var shortCount = Wire.query("a.hd.test", edns: opt)
        shortCount[11] = 0  // the OPT record is left over past the counted records
        let optInAnswers = Wire.header(answers: 1) + Wire.question("a.hd.test") + opt
        let optNotRoot = Wire.header(additionals: 1) + Wire.question("a.hd.test") + [1, 0x61] + opt
        let overrunOption = Wire.query("a.hd.test", edns: Wire.opt(options: [0, 10, 0, 9, 1, 2]))
        let reservedLabel = Wire.header(additionals: 1) + [0x40, 0x61, 0, 0, 1, 0, 1] + opt
        let loopingPointer = Wire.header(additionals: 1) + [0xc0, 12, 0, 1, 0, 1] + opt
        for message in [plain, twoOPTs, trailing, shortCount, optInAnswers, optNotRoot, overrunOption, reservedLabel, [], Array(plain.prefix(11))] {
            #expect(EDNSPadding.padded(message, toMultipleOf: EDNSPadding.responseBlock) == message)
            #expect(!EDNSPadding.hasPadding(message))
        }
        // A pointer is two bytes and ends a name: walked over, never followed.
        #expect(EDNSPadding.padded(loopingPointer, toMultipleOf: 128).count == 128)
        twoOPTs[11] = 1
        #expect(EDNSPadding.padded(twoOPTs, toMultipleOf: 128) == twoOPTs, "a record left over")
    }

    /// F51-P1/P2 of the red team: records after the OPT record — one whose owner is a compression
    /// pointer to a name written after the OPT, or a TSIG that signs the bytes before it — would be
    /// moved or invalidated by a rewrite, so such a message is left exactly as it is.
    @Test func aMessageWithRecordsAfterItsOPTRecordIsLeftAlone() throws {
        let opt = Wire.opt(options: Self.padding(40))
        let head = Wire.header(flags: 0x8180, answers: 0, additionals: 3) + Wire.question("q.hd.test", type: 16)
        let named = Wire.name("abc.evil.test")
        let firstA = named + [0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 192, 0, 2, 1]
        let pointerTo = head.count + opt.count
        let secondA = [0xc0 | UInt8(pointerTo >> 8), UInt8(pointerTo & 0xff)] + [0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 192, 0, 2, 2]
        let message = head + opt + firstA + secondA
        let decoded = try DNSMessage(decoding: message)
        #expect(decoded.additionals.filter { $0.type == .a }.map(\.name) == [try DomainName("abc.evil.test"), try DomainName("abc.evil.test")])
        #expect(EDNSPadding.unpadded(message) == message)
        #expect(EDNSPadding.padded(message, toMultipleOf: EDNSPadding.responseBlock) == message)
        // A TSIG (type 250) after the OPT: its MAC covers the OPT record's bytes.
        let tsig = Wire.name("k.test") + [0, 250, 0, 255, 0, 0, 0, 0, 0, 3, 1, 2, 3]
        let signed = Wire.header(flags: 0x0100, additionals: 2) + Wire.question("q.hd.test") + opt + tsig
        #expect(EDNSPadding.unpadded(signed) == signed)
        #expect(EDNSPadding.padded(signed, toMultipleOf: EDNSPadding.queryBlock) == signed)
    }

    @Test func aForwardedResponseWithTwoOPTRecordsIsMalformed() throws {
        let question = DNSMessage.Question(name: try DomainName("q.hd.test"), type: .txt)
        let one = Wire.header(id: 0, flags: 0x8180, additionals: 1) + Wire.question("q.hd.test", type: 16) + Wire.opt()
        try ResolverEngine.check(one, answers: question)
        let two = Wire.header(id: 0, flags: 0x8180, additionals: 2) + Wire.question("q.hd.test", type: 16) + Wire.opt() + Wire.opt()
        #expect(throws: DNSError.self) { try ResolverEngine.check(two, answers: question) }
        do { try ResolverEngine.check(two, answers: question) } catch { #expect(error.code == .malformedResponse) }
        // An OPT record in the answer or authority section (helper-17's variant): malformed too.
        for (answers, authorities) in [(UInt16(1), UInt16(0)), (0, 1)] {
            let misplaced =
                Wire.header(id: 0, flags: 0x8180, answers: answers, authorities: authorities) + Wire.question("q.hd.test", type: 16)
                + Wire.opt()
            #expect(throws: DNSError.self) { try ResolverEngine.check(misplaced, answers: question) }
        }
    }

    @Test func paddingThatWouldPassTheLargestMessageIsNotAdded() throws {
        // One option filling the OPT record up to a message of 65,000 bytes: a 468-block pad would
        // make it 65,052 (fits); at 65,520 + 4 it would pass 65,535 and is left off.
        func message(total: Int) -> [UInt8] {
            let head = Wire.header(additionals: 1) + Wire.question("a.hd.test")
            let filler = total - head.count - 11 - 4
            return head + Wire.opt(options: [0, 65, UInt8(filler >> 8), UInt8(filler & 0xff)] + Array(repeating: 7, count: filler))
        }
        let fits = message(total: 65_000)
        #expect(fits.count == 65_000)
        let padded = EDNSPadding.padded(fits, toMultipleOf: EDNSPadding.responseBlock)
        #expect(padded.count == 65_052 && padded.count <= DNSMessage.maxSize)
        let tooBig = message(total: 65_520)
        #expect(EDNSPadding.padded(tooBig, toMultipleOf: EDNSPadding.responseBlock) == tooBig)
        let atTheLimit = message(total: DNSMessage.maxSize - 4)
        #expect(EDNSPadding.padded(atTheLimit, toMultipleOf: 1).count == DNSMessage.maxSize)
    }
}
