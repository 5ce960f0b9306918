/// A DNS message (RFC 1035 §4.1): decoded with every bound checked, encoded without compression.
///
/// Decoding never traps: every defect is a specific error that says what was wrong. Names are case-folded as they are
/// read, so comparisons are DNS's case-insensitive ones.
public struct DNSMessage: Sendable, Hashable {
    /// What a query asks: a name, a record type and a class (IN unless said otherwise).
    public struct Question: Sendable, Hashable {
        public var name: DomainName
        public var type: RecordType
        public var recordClass: UInt16

        public init(name: DomainName, type: RecordType, recordClass: UInt16 = DNSMessage.classIN) {
            self.name = name
            self.type = type
            self.recordClass = recordClass
        }
    }

    /// A zone's start of authority (RFC 1035 §3.3.13), which negative answers carry for their TTL.
    public struct SOA: Sendable, Hashable {
        public var primary: DomainName
        public var mailbox: DomainName
        public var serial: UInt32
        public var refresh: UInt32
        public var retry: UInt32
        public var expire: UInt32
        /// The negative-caching TTL (RFC 2308 §4).
        public var minimum: UInt32

        public init(
            primary: DomainName, mailbox: DomainName, serial: UInt32, refresh: UInt32,
            retry: UInt32, expire: UInt32, minimum: UInt32
        ) {
            self.primary = primary
            self.mailbox = mailbox
            self.serial = serial
            self.refresh = refresh
            self.retry = retry
            self.expire = expire
            self.minimum = minimum
        }
    }

    /// A record's data, interpreted for the types this library reads (A, AAAA, CNAME, SOA).
    public enum RecordData: Sendable, Hashable {
        case address(IPAddress)
        case cname(DomainName)
        case soa(SOA)
        /// Anything this library does not interpret, kept as received.
        case opaque([UInt8])
    }

    /// A resource record of the answer, authority or additional section.
    public struct Record: Sendable, Hashable {
        public var name: DomainName
        public var type: RecordType
        public var recordClass: UInt16
        /// Seconds; values with the top bit set are read as 0 (RFC 2181 §8).
        public var ttl: UInt32
        public var data: RecordData

        public init(
            name: DomainName, type: RecordType, recordClass: UInt16 = DNSMessage.classIN,
            ttl: UInt32, data: RecordData
        ) {
            self.name = name
            self.type = type
            self.recordClass = recordClass
            self.ttl = ttl
            self.data = data
        }
    }

    /// The Internet class, the only one this library asks in.
    public static let classIN: UInt16 = 1
    /// The largest message DNS can carry over any transport.
    public static let maxSize = 65_535

    public var id: UInt16
    /// Header flags word: QR, opcode, AA, TC, RD, RA, Z, AD, CD and the low 4 bits of the RCODE.
    public var flags: UInt16
    public var questions: [Question]
    public var answers: [Record]
    public var authorities: [Record]
    public var additionals: [Record]

    public init(
        id: UInt16, flags: UInt16, questions: [Question], answers: [Record] = [],
        authorities: [Record] = [], additionals: [Record] = []
    ) {
        self.id = id
        self.flags = flags
        self.questions = questions
        self.answers = answers
        self.authorities = authorities
        self.additionals = additionals
    }

    /// QR: the message is a response.
    public var isResponse: Bool { flags & 0x8000 != 0 }
    /// 0 for a standard query (RFC 1035 §4.1.1).
    public var opcode: UInt8 { UInt8((flags >> 11) & 0x0f) }

    /// The full RCODE: the header's 4 bits extended by the OPT record's 8 (RFC 6891 §6.1.3).
    public var responseCode: ResponseCode {
        var code = flags & 0x000f
        if let opt = additionals.first(where: { $0.type == .opt }) {
            code |= UInt16(opt.ttl >> 24) << 4
        }
        return ResponseCode(rawValue: code)
    }
}

// MARK: - Queries

extension DNSMessage {
    /// The block size for EDNS(0) padding of queries (RFC 8467 §4.1).
    public static let queryPaddingBlock = 128
    /// The UDP payload size advertised in the OPT record (DNS Flag Day 2020).
    public static let advertisedPayloadSize: UInt16 = 1232

    /// The one question of the query message `wire`.
    /// - Throws: ``DNSError`` with ``DNSError/Code/invalidQuery`` when `wire` is not a query with one
    ///   question.
    public static func question(ofQuery wire: [UInt8]) throws(DNSError) -> Question {
        do {
            let message = try DNSMessage(decoding: wire)
            guard !message.isResponse, message.questions.count == 1 else { throw DNSError(.invalidQuery, "not a query with one question") }
            return message.questions[0]
        } catch let error as DNSError {
            throw error
        } catch {
            throw DNSError(.invalidQuery, "not a DNS message: \(error)")
        }
    }

    /// Encodes a recursive query for `name`/`type` with an EDNS(0) OPT record padded to a multiple
    /// of 128 octets (RFC 8467).
    ///
    /// - Parameters:
    ///   - name: the name asked.
    ///   - type: the record type asked.
    ///   - id: 0 for DoH, where it keeps HTTP caches effective (RFC 8484 §4.1).
    ///   - padded: whether the OPT record carries the padding option.
    /// - Returns: the query's wire form.
    public static func query(name: DomainName, type: RecordType, id: UInt16 = 0, padded: Bool = true) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        out.append16(id)
        out.append16(0x0100)  // RD
        out.append16(1)
        out.append16(0)
        out.append16(0)
        out.append16(1)
        out.append(contentsOf: name.wire)
        out.append16(type.rawValue)
        out.append16(classIN)
        // OPT pseudo-record: root owner, type 41, class = payload size, TTL 0 (no DO), RDATA.
        out.append(0)
        out.append16(RecordType.opt.rawValue)
        out.append16(advertisedPayloadSize)
        out.append32(0)
        if padded {
            let unpadded = out.count + 2 + 4  // RDLENGTH + padding option header
            let padding = (queryPaddingBlock - unpadded % queryPaddingBlock) % queryPaddingBlock
            out.append16(UInt16(4 + padding))
            out.append16(12)  // EDNS(0) Padding option (RFC 7830)
            out.append16(UInt16(padding))
            out.append(contentsOf: repeatElement(0, count: padding))
        } else {
            out.append16(0)
        }
        return out
    }

    /// Encodes the message without name compression. Used to answer queries (the daemon, fakes).
    public func encode() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        out.append16(id)
        out.append16(flags)
        out.append16(UInt16(questions.count))
        out.append16(UInt16(answers.count))
        out.append16(UInt16(authorities.count))
        out.append16(UInt16(additionals.count))
        for question in questions {
            out.append(contentsOf: question.name.wire)
            out.append16(question.type.rawValue)
            out.append16(question.recordClass)
        }
        for record in answers + authorities + additionals {
            out.append(contentsOf: record.name.wire)
            out.append16(record.type.rawValue)
            out.append16(record.recordClass)
            out.append32(record.ttl)
            let rdata = record.data.wire
            out.append16(UInt16(truncatingIfNeeded: rdata.count))
            out.append(contentsOf: rdata)
        }
        return out
    }
}

extension DNSMessage.RecordData {
    /// The RDATA on the wire, uncompressed; names as decoded (lowercase), so for A, AAAA, CNAME and
    /// SOA this is also the canonical form of RFC 4034 §6.2. Opaque data is as received.
    public var wire: [UInt8] {
        switch self {
        case let .address(address): return address.bytes
        case let .cname(target): return target.wire
        case let .soa(soa):
            var bytes = soa.primary.wire + soa.mailbox.wire
            for value in [soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum] { bytes.append32(value) }
            return bytes
        case let .opaque(bytes): return bytes
        }
    }
}

// MARK: - Decoding

extension DNSMessage {
    /// Decodes a complete message, rejecting truncation, bad compression pointers, oversized labels
    /// and names, RDATA overruns, address records of the wrong length and trailing bytes.
    package init(decoding bytes: [UInt8]) throws(WireError) {
        guard bytes.count <= Self.maxSize else { throw .tooLarge(size: bytes.count) }
        var reader = WireReader(bytes: bytes)
        let id = try reader.read16()
        let flags = try reader.read16()
        let questionCount = Int(try reader.read16())
        let answerCount = Int(try reader.read16())
        let authorityCount = Int(try reader.read16())
        let additionalCount = Int(try reader.read16())
        // A question needs at least 5 bytes and a record 11: refuse counts that cannot fit before
        // allocating anything for them.
        let minimum = questionCount * 5 + (answerCount + authorityCount + additionalCount) * 11
        guard minimum <= reader.remaining else {
            throw .tooManyRecords(count: questionCount + answerCount + authorityCount + additionalCount)
        }
        var questions: [Question] = []
        questions.reserveCapacity(questionCount)
        for _ in 0..<questionCount {
            let name = try reader.readName()
            let type = RecordType(rawValue: try reader.read16())
            let recordClass = try reader.read16()
            questions.append(Question(name: name, type: type, recordClass: recordClass))
        }
        func records(_ count: Int) throws(WireError) -> [Record] {
            var section: [Record] = []
            section.reserveCapacity(count)
            for _ in 0..<count { section.append(try reader.readRecord()) }
            return section
        }
        let answers = try records(answerCount)
        let authorities = try records(authorityCount)
        let additionals = try records(additionalCount)
        guard reader.remaining == 0 else {
            throw .trailingData(offset: reader.offset, count: reader.remaining)
        }
        self.init(
            id: id, flags: flags, questions: questions,
            answers: answers, authorities: authorities, additionals: additionals)
    }
}

/// Bounds-checked reading of a DNS message.
struct WireReader {
    let bytes: [UInt8]
    private(set) var offset = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }

    mutating func read8() throws(WireError) -> UInt8 {
        guard offset < bytes.count else { throw .truncated(offset: offset, needed: 1) }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func read16() throws(WireError) -> UInt16 {
        guard remaining >= 2 else { throw .truncated(offset: offset, needed: 2 - remaining) }
        defer { offset += 2 }
        return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    mutating func read32() throws(WireError) -> UInt32 {
        guard remaining >= 4 else { throw .truncated(offset: offset, needed: 4 - remaining) }
        defer { offset += 4 }
        return UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16
            | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    /// Reads a possibly compressed name. Every compression pointer must point before the start of
    /// the run of labels that contains it, so each jump moves strictly backwards and a loop is
    /// impossible (RFC 1035 §4.1.4 allows only pointers to prior occurrences).
    /// The most compression pointers one name may follow (unbound's `MAX_COMPRESS_PTRS`).
    static let maxPointersPerName = 256

    mutating func readName() throws(WireError) -> DomainName {
        var wire: [UInt8] = []
        wire.reserveCapacity(64)  // most names in one allocation (at most 255 bytes)
        var position = offset
        var segmentStart = offset
        var resumeAt: Int?
        var pointers = 0
        while true {
            guard position < bytes.count else { throw .truncated(offset: position, needed: 1) }
            let length = bytes[position]
            switch length & 0xc0 {
            case 0x00:
                if length == 0 {
                    wire.append(0)
                    offset = resumeAt ?? position + 1
                    return DomainName(uncheckedWire: wire)
                }
                let end = position + 1 + Int(length)
                guard end <= bytes.count else { throw .truncated(offset: position, needed: end - bytes.count) }
                guard wire.count + Int(length) + 2 <= DomainName.maxWireLength else {
                    throw .nameTooLong(offset: offset)
                }
                wire.append(length)
                for byte in bytes[(position + 1)..<end] { wire.append(DomainName.lowercase(byte)) }
                position = end
            case 0xc0:
                guard position + 1 < bytes.count else { throw .truncated(offset: position, needed: 1) }
                let target = Int(length & 0x3f) << 8 | Int(bytes[position + 1])
                guard target < bytes.count else { throw .pointerOutOfRange(offset: position, target: target) }
                guard target < segmentStart else { throw .pointerLoop(offset: position) }
                // Backwards only, so no loop; but a chain of pointers to pointers could still make
                // one name cost thousands of jumps (a hostile 64 KiB answer: 57 million). Unbound's
                // bound (MAX_COMPRESS_PTRS): no encoder writes more.
                pointers += 1
                guard pointers <= Self.maxPointersPerName else { throw .tooManyPointers(offset: offset) }
                if resumeAt == nil { resumeAt = position + 2 }
                segmentStart = target
                position = target
            default:
                throw .badLabelType(offset: position)
            }
        }
    }

    mutating func readRecord() throws(WireError) -> DNSMessage.Record {
        let name = try readName()
        let type = RecordType(rawValue: try read16())
        let recordClass = try read16()
        let rawTTL = try read32()
        let ttl = rawTTL & 0x8000_0000 != 0 ? 0 : rawTTL
        let length = Int(try read16())
        let start = offset
        guard length <= remaining else { throw .rdataOverrun(offset: start - 2, length: length) }
        let data: DNSMessage.RecordData
        switch type {
        case .a, .aaaa:
            let expected = type == .a ? 4 : 16
            guard length == expected else { throw .badRDataLength(type: type, length: length) }
            data = .address(IPAddress(bytes: bytes[start..<(start + length)])!)
            offset += length
        case .cname:
            data = .cname(try readName())
        case .soa:
            let primary = try readName()
            let mailbox = try readName()
            data = .soa(
                .init(
                    primary: primary, mailbox: mailbox, serial: try read32(), refresh: try read32(),
                    retry: try read32(), expire: try read32(), minimum: try read32()))
        default:
            data = .opaque(Array(bytes[start..<(start + length)]))
            offset += length
        }
        guard offset == start + length else {
            throw .badRDataLength(type: type, length: length)
        }
        return DNSMessage.Record(name: name, type: type, recordClass: recordClass, ttl: ttl, data: data)
    }
}

extension Array where Element == UInt8 {
    /// Appends a big-endian 16-bit value (network order).
    @inline(__always)
    package mutating func append16(_ value: UInt16) {
        append(UInt8(value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    /// Appends a big-endian 32-bit value (network order).
    @inline(__always)
    package mutating func append32(_ value: UInt32) {
        append(UInt8(value >> 24))
        append(UInt8(truncatingIfNeeded: value >> 16))
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }
}
