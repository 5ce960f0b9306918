import DNSCore

/// A DNS query as the stub and `/dns-query` receive it, parsed as far as answering it needs and
/// checked the way an authoritative server checks one (RFC 1035 §4.1, RFC 6891 §6.1.1).
///
/// The parser walks the message once, never follows a compression pointer (a query's question has
/// nothing before it to point at) and keeps the question's bytes as the client wrote them, so that
/// answers echo its letter case (the "0x20" check some resolvers make on replies).
package struct DNSQuery: Sendable {
    /// The EDNS(0) OPT record of a query (RFC 6891 §6.1.2).
    package struct EDNS: Sendable, Equatable {
        /// The UDP payload size the client can take (the OPT record's class).
        package var udpPayloadSize: UInt16
        package var version: UInt8
        /// DNSSEC OK (RFC 3225): copied into the response's OPT record.
        package var dnssecOK: Bool
        /// The query carried a Padding option (RFC 7830): its response is padded on an encrypted
        /// transport (RFC 8467 §4.1), never on plain DNS.
        package var padded = false
    }

    /// Why a message cannot be answered normally. Each case decides the reply.
    package enum Problem: Error, Equatable, Sendable {
        /// Shorter than a header, or a response (QR set): no reply at all, so the stub can never be
        /// made to reflect traffic at a third party.
        case unanswerable(String)
        /// Malformed: FORMERR (RFC 1035 §4.1.1), with the query's `id` and `flags` when known.
        case formatError(String, id: UInt16, flags: UInt16)
        /// An opcode other than QUERY: NOTIMP. The question is echoed when it parsed.
        case notImplemented(opcode: UInt8, id: UInt16, flags: UInt16)
        /// EDNS version above 0: BADVERS with an OPT record of version 0 (RFC 6891 §6.1.3).
        case badVersion(DNSQuery)

        package static func == (lhs: Problem, rhs: Problem) -> Bool {
            switch (lhs, rhs) {
            case let (.unanswerable(a), .unanswerable(b)): a == b
            case let (.formatError(a, i, f), .formatError(b, j, g)): a == b && i == j && f == g
            case let (.notImplemented(a, i, f), .notImplemented(b, j, g)): a == b && i == j && f == g
            case let (.badVersion(a), .badVersion(b)): a.wire == b.wire
            default: false
            }
        }

        /// A short reason for logs and HTTP 400 bodies.
        package var reason: String {
            switch self {
            case let .unanswerable(why), let .formatError(why, _, _): why
            case let .notImplemented(opcode, _, _): "opcode \(opcode) is not a standard query"
            case let .badVersion(query): "EDNS version \(query.edns?.version ?? 0) is not supported"
            }
        }
    }

    package static let headerSize = 12

    /// The message as received.
    package let wire: [UInt8]
    package let id: UInt16
    package let flags: UInt16
    /// The question's name, type and class as the client wrote them (offset 12 up to here).
    package let questionEnd: Int
    /// The question with its name case-folded (for the engine and the cache).
    package let question: DNSMessage.Question
    package let edns: EDNS?

    /// The question's owner name in the client's letter case, in wire form.
    package var questionNameBytes: ArraySlice<UInt8> { wire[Self.headerSize..<(questionEnd - 4)] }

    var recursionDesired: Bool { flags & 0x0100 != 0 }
    package var checkingDisabled: Bool { flags & 0x0010 != 0 }
    /// DO or AD set: the client understands the AD bit (RFC 6840 §5.7).
    var wantsAuthenticData: Bool { flags & 0x0020 != 0 || edns?.dnssecOK == true }

    /// Parses and checks `wire`.
    /// - Throws: ``Problem``, which says how (and whether) to reply.
    package init(_ wire: [UInt8]) throws(Problem) {
        guard wire.count >= Self.headerSize else {
            throw .unanswerable("\(wire.count) bytes is shorter than a DNS header")
        }
        guard wire.count <= DNSMessage.maxSize else { throw .unanswerable("\(wire.count) bytes is larger than a DNS message") }
        let id = UInt16(wire[0]) << 8 | UInt16(wire[1])
        let flags = UInt16(wire[2]) << 8 | UInt16(wire[3])
        guard flags & 0x8000 == 0 else { throw .unanswerable("a response (QR set), not a query") }
        func count(_ at: Int) -> Int { Int(wire[at]) << 8 | Int(wire[at + 1]) }
        let questions = count(4), answers = count(6), authorities = count(8), additionals = count(10)
        let opcode = UInt8((flags >> 11) & 0x0f)

        var reader = QueryReader(wire: wire, offset: Self.headerSize)
        guard questions == 1 else {
            if opcode != 0 { throw .notImplemented(opcode: opcode, id: id, flags: flags) }
            throw .formatError("a query must have exactly one question, not \(questions)", id: id, flags: flags)
        }
        let name: DomainName
        let type: UInt16, recordClass: UInt16
        do throws(QueryReader.Failure) {
            name = try reader.questionName()
            type = try reader.read16()
            recordClass = try reader.read16()
        } catch {
            if opcode != 0 { throw .notImplemented(opcode: opcode, id: id, flags: flags) }
            throw .formatError("the question is malformed: \(error.reason)", id: id, flags: flags)
        }
        let questionEnd = reader.offset
        var edns: EDNS?
        do throws(QueryReader.Failure) {
            for _ in 0..<(answers + authorities) { try reader.skipRecord() }
            for _ in 0..<additionals {
                if let opt = try reader.record(opt: edns != nil) { edns = opt }
            }
            guard reader.offset == wire.count else {
                throw QueryReader.Failure(reason: "\(wire.count - reader.offset) bytes after the last record")
            }
        } catch {
            throw .formatError(error.reason, id: id, flags: flags)
        }
        self.wire = wire
        self.id = id
        self.flags = flags
        self.questionEnd = questionEnd
        self.question = DNSMessage.Question(name: name, type: RecordType(rawValue: type), recordClass: recordClass)
        self.edns = edns
        guard opcode == 0 else { throw .notImplemented(opcode: opcode, id: id, flags: flags) }
        if let edns, edns.version != 0 { throw .badVersion(self) }
    }

    /// The query type the engine answers itself (A or AAAA in class IN); nil when it is forwarded.
    package var addressType: AddressQuery? {
        guard question.recordClass == DNSMessage.classIN else { return nil }
        switch question.type {
        case .a: return .a
        case .aaaa: return .aaaa
        default: return nil
        }
    }
}

/// A bounds-checked walk over a query's bytes.
private struct QueryReader {
    package struct Failure: Error {
        package var reason: String
    }

    package let wire: [UInt8]
    package var offset: Int

    package mutating func read16() throws(Failure) -> UInt16 {
        guard offset + 2 <= wire.count else { throw Failure(reason: "truncated at offset \(offset)") }
        defer { offset += 2 }
        return UInt16(wire[offset]) << 8 | UInt16(wire[offset + 1])
    }

    package mutating func read32() throws(Failure) -> UInt32 {
        UInt32(try read16()) << 16 | UInt32(try read16())
    }

    /// The question's name: labels only (a pointer in the first name can only point into the
    /// header), at most 255 octets, case-folded.
    package mutating func questionName() throws(Failure) -> DomainName {
        var folded: [UInt8] = []
        folded.reserveCapacity(32)
        while true {
            guard offset < wire.count else { throw Failure(reason: "the name runs past the end") }
            let length = Int(wire[offset])
            guard length & 0xc0 == 0 else {
                throw Failure(reason: length & 0xc0 == 0xc0 ? "a compression pointer in the question" : "a reserved label type")
            }
            guard folded.count + length + 1 <= DomainName.maxWireLength else { throw Failure(reason: "the name is longer than 255 octets") }
            folded.append(UInt8(length))
            offset += 1
            if length == 0 { return DomainName(uncheckedWire: folded) }
            guard offset + length <= wire.count else { throw Failure(reason: "a label runs past the end") }
            for byte in wire[offset..<(offset + length)] {
                folded.append(byte >= 0x41 && byte <= 0x5a ? byte | 0x20 : byte)
            }
            offset += length
        }
    }

    /// Skips a name in a record (labels, ending in a root label or one pointer to earlier bytes).
    package mutating func skipName() throws(Failure) -> Bool {
        let start = offset
        var total = 0
        while true {
            guard offset < wire.count else { throw Failure(reason: "a record's name runs past the end") }
            let length = Int(wire[offset])
            switch length & 0xc0 {
            case 0:
                offset += 1
                if length == 0 { return offset == start + 1 }
                total += length + 1
                guard total < DomainName.maxWireLength, offset + length <= wire.count else {
                    throw Failure(reason: "a record's name is malformed")
                }
                offset += length
            case 0xc0:
                guard offset + 2 <= wire.count else { throw Failure(reason: "a pointer runs past the end") }
                let target = (length & 0x3f) << 8 | Int(wire[offset + 1])
                guard target >= DNSQuery.headerSize, target < start else { throw Failure(reason: "a compression pointer out of range") }
                offset += 2
                return false
            default:
                throw Failure(reason: "a reserved label type")
            }
        }
    }

    package mutating func skipRecord() throws(Failure) {
        _ = try skipName()
        offset += 8  // type, class, TTL
        let length = Int(try read16())
        guard offset + length <= wire.count else { throw Failure(reason: "a record's data runs past the end") }
        offset += length
    }

    /// Reads an additional record; returns the EDNS it carries when it is an OPT record.
    /// - Parameter seen: an OPT record was already seen (a second one is FORMERR, RFC 6891 §6.1.1).
    /// - Returns: the OPT record's EDNS, or nil for any other record.
    /// - Throws: ``Failure`` for a record that runs past the message, or a second or misplaced OPT.
    package mutating func record(opt seen: Bool) throws(Failure) -> DNSQuery.EDNS? {
        let ownerIsRoot = try skipName()
        let type = try read16()
        guard type == RecordType.opt.rawValue else {
            offset += 6
            let length = Int(try read16())
            guard offset + length <= wire.count else { throw Failure(reason: "a record's data runs past the end") }
            offset += length
            return nil
        }
        guard !seen else { throw Failure(reason: "more than one OPT record") }
        guard ownerIsRoot else { throw Failure(reason: "an OPT record whose owner is not the root") }
        let size = try read16()
        let ttl = try read32()
        let length = Int(try read16())
        guard offset + length <= wire.count else { throw Failure(reason: "the OPT record's data runs past the end") }
        // Options are (code, length, data); one that overruns the record is malformed.
        let end = offset + length
        var padded = false
        while offset < end {
            guard offset + 4 <= end else { throw Failure(reason: "an EDNS option overruns the OPT record") }
            let code = UInt16(wire[offset]) << 8 | UInt16(wire[offset + 1])
            let optionLength = Int(wire[offset + 2]) << 8 | Int(wire[offset + 3])
            offset += 4
            guard offset + optionLength <= end else { throw Failure(reason: "an EDNS option overruns the OPT record") }
            padded = padded || code == EDNSPadding.optionCode
            offset += optionLength
        }
        return DNSQuery.EDNS(
            udpPayloadSize: size, version: UInt8(truncatingIfNeeded: ttl >> 16), dnssecOK: ttl & 0x8000 != 0, padded: padded)
    }
}
