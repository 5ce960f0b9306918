import DNSCore
import TestSupport
import Testing

@testable import DNSStubServer
@testable import DNSWire

@Suite struct DNSQueryTests {
    @Test func aQueryKeepsItsQuestionBytesAndFoldsTheNameForTheEngine() throws {
        let query = try DNSQuery(Wire.query("WwW.Hd.TeSt", edns: Wire.opt(size: 4096, dnssecOK: true)))
        #expect(query.id == 0x1234)
        #expect(query.question.name == (try DomainName("www.hd.test")))
        #expect(Array(query.questionNameBytes) == Wire.name("WwW.Hd.TeSt"))
        #expect(query.addressType == .a)
        #expect(query.edns == DNSQuery.EDNS(udpPayloadSize: 4096, version: 0, dnssecOK: true))
        #expect(query.recursionDesired)
    }

    @Test func aPaddedQueryIsPaddedBackOnlyOnEncryptedTransports() throws {
        let padding: [UInt8] = [0, 12, 0, 3, 0, 0, 0]
        let padded = try DNSQuery(Wire.query("a.hd.test", edns: Wire.opt(options: [0, 10, 0, 0] + padding)))
        let unpadded = try DNSQuery(Wire.query("a.hd.test", edns: Wire.opt(options: [0, 10, 0, 0])))
        #expect(padded.edns?.padded == true)
        #expect(unpadded.edns?.padded == false)
        let response = DNSResponseWriter(answering: padded).finish()
        for transport in DNSTransport.allCases {
            let sent = transport.outgoing(response, answering: padded)
            if transport.isEncrypted {
                #expect(sent.count == EDNSPadding.responseBlock, "\(transport)")
                #expect(EDNSPadding.hasPadding(sent))
                #expect(try DNSMessage(decoding: sent).questions == [padded.question])
            } else {
                #expect(sent == response, "\(transport): never padded")
            }
            #expect(transport.outgoing(response, answering: unpadded) == response, "\(transport): not asked for")
        }
    }

    @Test func messagesThatGetNoReplyAtAll() {
        for wire in [[], [1, 2, 3], Array(Wire.header().prefix(11))] {
            #expect(throws: DNSQuery.Problem.self) { try DNSQuery(wire) }
            if case .unanswerable? = problem(wire) {} else { Issue.record("\(wire) should be unanswerable") }
        }
        // QR set: a response is never answered (no reflection).
        let response = Wire.header(flags: 0x8180) + Wire.question("www.hd.test")
        guard case .unanswerable? = problem(response) else {
            Issue.record("a response must get nothing")
            return
        }
    }

    @Test func malformedQueriesAreFormatErrorsWithTheirIDAndFlags() {
        let cases: [(String, [UInt8])] = [
            ("no question", Wire.header(questions: 0)),
            ("two questions", Wire.header(questions: 2) + Wire.question("a.test") + Wire.question("b.test")),
            ("a pointer in the question", Wire.header() + [0xc0, 0x0c, 0, 1, 0, 1]),
            ("a reserved label type", Wire.header() + [0x40, 0, 0, 1, 0, 1]),
            ("a label past the end", Wire.header() + [5, 0x61, 0x62]),
            ("no type and class", Wire.header() + Wire.name("www.hd.test")),
            ("trailing garbage", Wire.query("www.hd.test") + [0xde, 0xad]),
            ("an additional count with no record", Wire.header(additionals: 1) + Wire.question("www.hd.test")),
            ("two OPT records", Wire.header(additionals: 2) + Wire.question("www.hd.test") + Wire.opt() + Wire.opt()),
            (
                "an OPT not owned by the root",
                Wire.header(additionals: 1) + Wire.question("www.hd.test") + [1, 0x61, 0] + Array(Wire.opt().dropFirst())
            ),
            ("an option overrunning the OPT", Wire.query("www.hd.test", edns: Wire.opt(options: [0, 10, 0, 8, 1, 2]))),
            (
                "a name over 255 octets",
                Wire.header() + Array(repeating: [63] + Array(repeating: UInt8(0x61), count: 63), count: 5).flatMap { $0 } + [0, 0, 1, 0, 1]
            ),
        ]
        for (what, wire) in cases {
            guard case let .formatError(_, id, flags)? = problem(wire) else {
                Issue.record("\(what): expected FORMERR, got \(String(describing: problem(wire)))")
                continue
            }
            #expect(id == 0x1234, "\(what)")
            #expect(flags == 0x0100, "\(what)")
            let reply = DNSAnswers.reply(to: problem(wire)!)!
            #expect(reply.count == 12, "\(what): header only")
            #expect(reply[3] & 0x0f == 1, "\(what): FORMERR")
            #expect(reply[2] & 0x80 != 0, "\(what): QR")
        }
    }

    @Test func otherOpcodesAreNotImplementedAndNewerEDNSVersionsBadVersion() throws {
        for opcode: UInt16 in [1, 2, 4, 5, 15] {
            let wire = Wire.header(flags: opcode << 11) + Wire.question("www.hd.test")
            guard case .notImplemented(let got, _, _)? = problem(wire) else {
                Issue.record("opcode \(opcode)")
                continue
            }
            #expect(got == UInt8(opcode))
            let reply = DNSAnswers.reply(to: problem(wire)!)!
            #expect(reply[3] & 0x0f == 4, "NOTIMP")
            #expect((reply[2] >> 3) & 0x0f == UInt8(opcode), "the opcode is copied")
        }
        let wire = Wire.query("www.hd.test", edns: Wire.opt(version: 1))
        guard case .badVersion? = problem(wire) else {
            Issue.record("EDNS version 1 must be BADVERS")
            return
        }
        let reply = try DNSMessage(decoding: DNSAnswers.reply(to: problem(wire)!)!)
        #expect(reply.responseCode.rawValue == 16, "BADVERS")
        let opt = try #require(reply.additionals.first { $0.type == .opt })
        #expect((opt.ttl >> 16) & 0xff == 0, "the OPT says version 0")
    }

    private func problem(_ wire: [UInt8]) -> DNSQuery.Problem? {
        do {
            _ = try DNSQuery(wire)
            return nil
        } catch {
            return error
        }
    }
}

@Suite struct DNSResponseWriterTests {
    @Test func answersPointAtTheQuestionAndEchoItsCase() throws {
        let query = try DNSQuery(Wire.query("WwW.Hd.TeSt"))
        var writer = DNSResponseWriter(answering: query)
        writer.appendAddress(owner: DNSResponseWriter.questionNameOffset, ttl: 300, IPAddress("198.18.0.10")!)
        let bytes = writer.finish()
        #expect(Array(bytes[12..<(12 + 13)]) == Wire.name("WwW.Hd.TeSt"))
        let message = try DNSMessage(decoding: bytes)
        #expect(message.id == 0x1234)
        #expect(message.flags == 0x8180)
        #expect(message.answers.count == 1)
        #expect(message.answers[0].name == (try DomainName("www.hd.test")))
        #expect(message.additionals.isEmpty, "no OPT without EDNS in the query")
    }

    @Test func fortyAddressesTakeNoMoreRoomThanBINDGivesThem() throws {
        // BIND 9.18 answers big.hd.test (40 A records) in 680 bytes with EDNS.
        let query = try DNSQuery(Wire.query("big.hd.test", edns: Wire.opt(size: 4096)))
        var writer = DNSResponseWriter(answering: query)
        for index in 1...40 { writer.appendAddress(owner: DNSResponseWriter.questionNameOffset, ttl: 300, IPAddress("198.18.3.\(index)")!) }
        let bytes = writer.finish()
        #expect(bytes.count <= 680, "\(bytes.count) bytes")
        let message = try DNSMessage(decoding: bytes)
        #expect(message.answers.count == 40)
        #expect(message.additionals.first?.type == .opt, "an EDNS query gets OPT back (RFC 6891 §6.1.1)")
        #expect(message.additionals.first?.recordClass == 1232)
    }

    /// docs/threat-model.md F5: 4,078 addresses behind a CNAME made a response over 65,535 bytes, and the
    /// stub's TCP length trapped. Records that do not fit are left out; the OPT always fits.
    @Test func aResponseNeverOutgrowsADNSMessage() throws {
        let longName = (0..<3).map { _ in String(repeating: "a", count: 62) }.joined(separator: ".") + ".test"
        for edns in [nil, Wire.opt(size: 4096, dnssecOK: true)] {
            let query = try DNSQuery(Wire.query(longName, edns: edns))
            var writer = DNSResponseWriter(answering: query)
            let target = writer.appendCNAME(
                owner: DNSResponseWriter.questionNameOffset, ttl: 60, target: try DomainName(longName.replacingOccurrences(of: "a", with: "b")))
            for index in 0..<20_000 { writer.appendAddress(owner: target, ttl: 60, IPAddress("198.18.\(index / 256 % 256).\(index % 256)")!) }
            let omitted = writer.omittedRecords
            #expect(omitted > 0)
            writer.extendedError = (6, String(repeating: "x", count: 500))
            let bytes = writer.finish()
            #expect(bytes.count <= DNSResponseWriter.maxMessageSize, "\(bytes.count) bytes")
            let message = try DNSMessage(decoding: bytes)
            #expect(message.answers.count == 1 + 20_000 - omitted && message.answers.count > 4_000)
            #expect((message.additionals.first?.type == .opt) == (edns != nil))
        }
        // The last guard: an oversized message becomes a header-only SERVFAIL with its ID.
        let oversized = Wire.header(id: 0xabcd, flags: 0x8180) + [UInt8](repeating: 0, count: 70_000)
        let sent = DNSAnswers.sendable(oversized)
        #expect(sent.count == 12 && sent[0] == 0xab && sent[1] == 0xcd && sent[3] & 0x0f == 2)
        #expect(DNSAnswers.sendable([1, 2, 3]) == [1, 2, 3])
    }

    @Test func aCNAMEsTargetOwnsTheAddresses() throws {
        let query = try DNSQuery(Wire.query("alias.hd.test", type: 28))
        var writer = DNSResponseWriter(answering: query)
        let target = writer.appendCNAME(owner: DNSResponseWriter.questionNameOffset, ttl: 60, target: try DomainName("www.hd.test"))
        writer.appendAddress(owner: target, ttl: 60, IPAddress("2001:2::10")!)
        let message = try DNSMessage(decoding: writer.finish())
        #expect(message.answers.map(\.type) == [.cname, .aaaa])
        #expect(message.answers[1].name == (try DomainName("www.hd.test")))
    }

    @Test func aForwardedAnswerGetsTheClientsIDAndCaseBack() throws {
        let query = try DNSQuery(Wire.query("WwW.hd.TEST", type: 16, id: 0xbeef))
        var upstream = Wire.header(id: 0, flags: 0x8180) + Wire.question("www.hd.test", type: 16)
        DNSResponseWriter.restoreQuestion(&upstream, from: query)
        #expect(upstream[0] == 0xbe && upstream[1] == 0xef)
        #expect(Array(upstream[12..<25]) == Wire.name("WwW.hd.TEST"))
        // A response for another name keeps its own question.
        var other = Wire.header(id: 0, flags: 0x8180) + Wire.question("xxx.hd.test", type: 16)
        DNSResponseWriter.restoreQuestion(&other, from: query)
        #expect(Array(other[12..<25]) == Wire.name("xxx.hd.test"))
    }
}

@Suite struct DNSSECResponseTests {
    static func resolution(_ status: DNSSECStatus?) -> Resolution {
        var resolution = Resolution(
            host: "www.sig.test", addresses: [ResolvedAddress(ip: IPAddress("192.0.2.11")!, ttl: 300)], source: .doh, upstream: "u",
            elapsed: .zero, expiresAt: ResolverInstant(offset: .seconds(300)))
        resolution.dnssec = status
        return resolution
    }

    @Test func adOnlyForSecureAnswersToClientsThatSetDOOrAD() throws {
        let now = ResolverInstant(offset: .zero)
        let withDO = try DNSQuery(Wire.query("www.sig.test", edns: Wire.opt(dnssecOK: true)))
        let withAD = try DNSQuery(Wire.header(flags: 0x0120) + Wire.question("www.sig.test"))
        let plain = try DNSQuery(Wire.query("www.sig.test"))
        func ad(_ query: DNSQuery, _ status: DNSSECStatus?) -> Bool {
            DNSAnswers.response(to: query, Self.resolution(status), now: now).bytes[3] & 0x20 != 0
        }
        #expect(ad(withDO, .secure) && ad(withAD, .secure))
        #expect(!ad(plain, .secure))
        #expect(!ad(withDO, .insecure) && !ad(withDO, .indeterminate("x")) && !ad(withDO, nil))
    }

    @Test func bogusIsServfailWithExtendedError6AndABoundedReason() throws {
        let query = try DNSQuery(Wire.query("www.nokey.sig.test", edns: Wire.opt(dnssecOK: true)))
        let reason = "no DNSKEY matches — " + String(repeating: "é", count: 200)
        let bytes = DNSAnswers.response(to: query, DNSError(.dnssecBogus, reason), negativeTTL: 30).bytes
        let message = try DNSMessage(decoding: bytes)
        #expect(message.responseCode == .serverFailure)
        let opt = try #require(message.additionals.first { $0.type == .opt })
        guard case .opaque(let options) = opt.data else {
            Issue.record("OPT data not opaque")
            return
        }
        #expect(Array(options[0..<2]) == [0, 15], "option code 15 (EDE)")
        let length = Int(options[2]) << 8 | Int(options[3])
        #expect(length == options.count - 4 && length <= 202)
        #expect(Array(options[4..<6]) == [0, 6], "info code 6: DNSSEC Bogus")
        let text = Array(options[6...])
        #expect(String(validating: text, as: UTF8.self) != nil, "the cut keeps whole characters")
        #expect(String(decoding: text, as: UTF8.self).hasPrefix("no DNSKEY matches"))
        // Without EDNS there is nowhere to put it: plain SERVFAIL.
        let plain = try DNSQuery(Wire.query("www.nokey.sig.test"))
        let bare = try DNSMessage(decoding: DNSAnswers.response(to: plain, DNSError(.dnssecBogus, reason), negativeTTL: 30).bytes)
        #expect(bare.responseCode == .serverFailure && bare.additionals.isEmpty)
    }

    static let authority = NegativeAuthority(
        zone: try! DomainName("hd.test"),
        soa: DNSMessage.SOA(
            primary: try! DomainName("ns.hd.test"), mailbox: try! DomainName("hostmaster.hd.test"), serial: 7, refresh: 3600,
            retry: 600, expire: 86400, minimum: 60),
        ttl: 42)

    @Test func aNegativeAnswerCarriesTheZonesSOAInItsAuthoritySection() throws {
        for (code, rcode) in [(DNSError.Code.nxdomain, ResponseCode.nameError), (.nodata, .noError)] {
            for edns in [nil, Wire.opt(dnssecOK: true)] {
                let query = try DNSQuery(Wire.query("No.Pe.HD.test", edns: edns))
                var error = DNSError(code, "scripted")
                error.authority = Self.authority
                let answer = DNSAnswers.response(to: query, error, negativeTTL: 300)
                #expect(answer.minTTL == 42, "HTTP caches keep it as long as the SOA says")
                let message = try DNSMessage(decoding: answer.bytes)
                #expect(message.responseCode == rcode && message.answers.isEmpty)
                #expect(Array(answer.bytes[8..<10]) == [0, 1], "NSCOUNT 1")
                let soa = try #require(message.authorities.first)
                #expect(message.authorities.count == 1 && soa.type == .soa && soa.ttl == 42 && soa.name.description == "hd.test")
                #expect(soa.data == .soa(Self.authority.soa))
                // The owner is a pointer to the question's "HD.test" (offset 12 + 3 + 3): two bytes.
                let owner = 12 + Wire.question("No.Pe.HD.test").count
                #expect(Array(answer.bytes[owner..<(owner + 2)]) == [0xc0, 18])
                #expect(message.additionals.count == (edns == nil ? 0 : 1), "the OPT record after it")
            }
        }
    }

    @Test func theSOAGoesOnlyWithANegativeAnswerForANameInItsZone() throws {
        let query = try DNSQuery(Wire.query("www.other.test"))
        var error = DNSError(.nxdomain, "scripted")
        error.authority = Self.authority
        let outside = try DNSMessage(decoding: DNSAnswers.response(to: query, error, negativeTTL: 300).bytes)
        #expect(outside.authorities.isEmpty, "hd.test says nothing about www.other.test")
        error = DNSError(.serverFailure, "scripted")
        error.authority = Self.authority
        let failed = try DNSMessage(decoding: DNSAnswers.response(to: try DNSQuery(Wire.query("www.hd.test")), error, negativeTTL: 300).bytes)
        #expect(failed.authorities.isEmpty && failed.responseCode == .serverFailure)
        // Without one (a vendor API, the system resolver): no authority, the configured TTL for HTTP.
        let bare = DNSAnswers.response(to: try DNSQuery(Wire.query("www.hd.test")), DNSError(.nodata, "x"), negativeTTL: 30)
        #expect(try DNSMessage(decoding: bare.bytes).authorities.isEmpty && bare.minTTL == 30)
    }

    @Test func theWrittenSOANeverPassesTheNegativeTTLAndNeverGoesUnderAD() throws {
        var error = DNSError(.nxdomain, "scripted")
        error.authority = Self.authority
        error.authority?.ttl = 86400
        let query = try DNSQuery(Wire.query("www.hd.test", edns: Wire.opt(dnssecOK: true)))
        let capped = try DNSMessage(decoding: DNSAnswers.response(to: query, error, negativeTTL: 30).bytes)
        #expect(capped.authorities.first?.ttl == 30)
        // A proven denial (AD) goes without the SOA of the plain answer (F48-5).
        error.dnssec = .secure
        let proven = DNSAnswers.response(to: query, error, negativeTTL: 30).bytes
        let message = try DNSMessage(decoding: proven)
        #expect(proven[3] & 0x20 != 0 && message.authorities.isEmpty)
        // Without DO/AD asked there is no AD, and the SOA goes.
        let plain = try DNSMessage(decoding: DNSAnswers.response(to: try DNSQuery(Wire.query("www.hd.test")), error, negativeTTL: 30).bytes)
        #expect(plain.authorities.count == 1)
    }

    @Test func theSuffixOfTheQuestionNameIsFoundOnlyAtALabelBoundary() {
        let message = Wire.header() + Wire.question("ab.hd.test")
        #expect(DNSResponseWriter.suffixOffset(of: try! DomainName("hd.test"), inNameAt: 12, of: message) == 15)
        #expect(DNSResponseWriter.suffixOffset(of: try! DomainName("ab.hd.test"), inNameAt: 12, of: message) == 12)
        #expect(DNSResponseWriter.suffixOffset(of: try! DomainName("."), inNameAt: 12, of: message) == 23)
        #expect(DNSResponseWriter.suffixOffset(of: try! DomainName("b.hd.test"), inNameAt: 12, of: message) == nil)
        // A name cut short, a pointer, a label past the end: nil, never a read past the end.
        #expect(DNSResponseWriter.suffixOffset(of: try! DomainName("hd.test"), inNameAt: 12, of: Array(message.prefix(18))) == nil)
        #expect(DNSResponseWriter.suffixOffset(of: try! DomainName("hd.test"), inNameAt: 12, of: Wire.header() + [0xc0, 12]) == nil)
        #expect(DNSResponseWriter.suffixOffset(of: try! DomainName("hd.test"), inNameAt: 12, of: Wire.header() + [40, 1, 2]) == nil)
    }
}
