import DNSCore

/// Writes a response to a ``DNSQuery`` straight into wire form: the header, the question exactly as
/// the client wrote it (letter case included), answer records whose owner names are compression
/// pointers (RFC 1035 §4.1.4), and an OPT record when the query carried one (RFC 6891 §6.1.1).
///
/// Owner names as pointers keep answers as small as BIND's (40 A records: 680 bytes rather than
/// 1,109), so more fit in a UDP datagram before TC and a reflected answer is no larger than the peer's.
package struct DNSResponseWriter {
    /// The UDP payload size advertised in responses, and the most sent over UDP (DNS Flag Day 2020).
    package static let udpPayloadSize: UInt16 = 1232
    /// Where the question's name starts; answers owned by it point here.
    package static let questionNameOffset = DNSQuery.headerSize
    /// The largest DNS message there is: TCP's and DoH's 2-byte length (RFC 1035 §4.2.2,
    /// RFC 8484 §6). Records that would take a response past it are left out.
    package static let maxMessageSize = DNSMessage.maxSize
    /// The most the OPT record adds in ``finish(extendedRcode:)``: 11 bytes, an EDE option of
    /// 6 bytes and 200 of text.
    package static let optReserve = 11 + 6 + 200

    private(set) var bytes: [UInt8]
    private var answerCount: UInt16 = 0
    private var authorityCount: UInt16 = 0
    /// Records left out because they would not fit in ``maxMessageSize``.
    private(set) var omittedRecords = 0
    private let edns: DNSQuery.EDNS?
    /// An Extended DNS Error (RFC 8914) for the OPT record: info code and extra text.
    package var extendedError: (code: UInt16, text: String)?

    /// Sets AD: the data is secure by our own validation (RFC 4035 §3.2.3, RFC 6840 §5.7).
    package mutating func markAuthentic() { bytes[3] |= 0x20 }

    /// Sets AA: the answer is this server's own data (local records, a blocked name).
    mutating func markAuthoritative() { bytes[2] |= 0x04 }

    /// Starts a response to `query` with `rcode` (its low 4 bits; the rest goes into the OPT record).
    package init(answering query: DNSQuery, rcode: UInt16 = 0, truncated: Bool = false) {
        bytes = []
        bytes.reserveCapacity(query.questionEnd + 128)
        edns = query.edns
        Self.appendHeader(
            &bytes, id: query.id, flags: Self.responseFlags(query.flags, rcode: rcode, truncated: truncated),
            questions: 1)
        bytes.append(contentsOf: query.wire[Self.questionNameOffset..<query.questionEnd])
    }

    /// A response with no question: FORMERR or NOTIMP for a query whose question could not be read.
    init(id: UInt16, queryFlags: UInt16, rcode: UInt16) {
        bytes = []
        edns = nil
        Self.appendHeader(&bytes, id: id, flags: Self.responseFlags(queryFlags, rcode: rcode, truncated: false), questions: 0)
    }

    /// QR set; the opcode, RD and CD copied (RFC 1035 §4.1.1, RFC 4035 §3.2.2); RA set: this server
    /// answers recursively from its trusted upstreams.
    static func responseFlags(_ query: UInt16, rcode: UInt16, truncated: Bool) -> UInt16 {
        0x8000 | (query & 0x7800) | (truncated ? 0x0200 : 0) | (query & 0x0100) | 0x0080 | (query & 0x0010) | (rcode & 0x000f)
    }

    private static func appendHeader(_ bytes: inout [UInt8], id: UInt16, flags: UInt16, questions: UInt16) {
        bytes.append16(id)
        bytes.append16(flags)
        bytes.append16(questions)
        bytes.append16(0)
        bytes.append16(0)
        bytes.append16(0)
    }

    /// Appends a CNAME owned by the name at `owner`; returns where its target's name starts, for
    /// the records that the target owns.
    mutating func appendCNAME(owner: Int, ttl: UInt32, target: DomainName) -> Int {
        appendOwner(owner, type: .cname, ttl: ttl)
        bytes.append16(UInt16(target.wire.count))
        let start = bytes.count
        bytes.append(contentsOf: target.wire)
        return start
    }

    /// Appends an A or AAAA record owned by the name at `owner`, unless it would take the message
    /// past ``maxMessageSize`` (then it is counted in ``omittedRecords``): an answer with 4,000
    /// addresses, which any zone owner or vendor can send, must not become an unsendable message.
    mutating func appendAddress(owner: Int, ttl: UInt32, _ ip: IPAddress) {
        let data = ip.bytes
        guard bytes.count + 12 + data.count + (edns == nil ? 0 : Self.optReserve) <= Self.maxMessageSize else {
            omittedRecords += 1
            return
        }
        appendOwner(owner, type: data.count == 4 ? .a : .aaaa, ttl: ttl)
        bytes.append16(UInt16(data.count))
        bytes.append(contentsOf: data)
    }

    /// Appends a record of any type with `rdata` as it is (names in it uncompressed), owned by the
    /// name at `owner`, unless it would take the message past ``maxMessageSize``.
    mutating func appendRecord(owner: Int, type: RecordType, ttl: UInt32, rdata: [UInt8]) {
        guard rdata.count <= 0xffff, bytes.count + 12 + rdata.count + (edns == nil ? 0 : Self.optReserve) <= Self.maxMessageSize else {
            omittedRecords += 1
            return
        }
        appendOwner(owner, type: type, ttl: ttl)
        bytes.append16(UInt16(rdata.count))
        bytes.append(contentsOf: rdata)
    }

    private mutating func appendOwner(_ owner: Int, type: RecordType, ttl: UInt32) {
        assert(authorityCount == 0, "answers go before the authority section")
        bytes.append16(0xc000 | UInt16(owner))
        bytes.append16(type.rawValue)
        bytes.append16(DNSMessage.classIN)
        bytes.append32(ttl)
        answerCount += 1
    }

    /// Appends the zone's SOA to the authority section (a negative answer's, RFC 2308 §3), after
    /// every answer record. Its owner is a pointer into the question's name when the zone is that
    /// name or a suffix of it as the client wrote it, else written out; the SOA's own names are
    /// written out. At most 3 × 255 + 20 bytes of RDATA, so it always fits a message that holds
    /// only the question.
    mutating func appendAuthority(_ authority: NegativeAuthority) {
        let rdata = DNSMessage.RecordData.soa(authority.soa).wire
        let owner = Self.suffixOffset(of: authority.zone, inNameAt: Self.questionNameOffset, of: bytes)
        let ownerBytes = owner == nil ? authority.zone.wire.count : 2
        guard bytes.count + ownerBytes + 10 + rdata.count + (edns == nil ? 0 : Self.optReserve) <= Self.maxMessageSize else {
            omittedRecords += 1
            return
        }
        if let owner {
            bytes.append16(0xc000 | UInt16(owner))
        } else {
            bytes.append(contentsOf: authority.zone.wire)
        }
        bytes.append16(RecordType.soa.rawValue)
        bytes.append16(DNSMessage.classIN)
        bytes.append32(authority.ttl)
        bytes.append16(UInt16(rdata.count))
        bytes.append(contentsOf: rdata)
        authorityCount += 1
    }

    /// Where, inside the uncompressed name at `start` in `message`, the labels that spell `zone`
    /// begin (compared case-insensitively); nil when the name does not end in it or is not plainly
    /// written there (a pointer, or a length past the end).
    static func suffixOffset(of zone: DomainName, inNameAt start: Int, of message: [UInt8]) -> Int? {
        var index = start
        while index < message.count {
            let length = Int(message[index])
            guard length <= DomainName.maxLabelLength else { return nil }
            if index + zone.wire.count <= message.count,
                zone.wire.indices.allSatisfy({ Self.lowercase(message[index + $0]) == zone.wire[$0] })
            {
                return index
            }
            if length == 0 { return nil }
            index += length + 1
        }
        return nil
    }

    /// The finished message: answer count filled in, and the OPT record when the query had EDNS.
    /// - Parameter extendedRcode: the upper 8 bits of a 12-bit RCODE (1 for BADVERS).
    /// - Returns: the message's wire form.
    package consuming func finish(extendedRcode: UInt8 = 0) -> [UInt8] {
        var out = bytes
        bytes = []
        out[6] = UInt8(answerCount >> 8)
        out[7] = UInt8(truncatingIfNeeded: answerCount)
        out[8] = UInt8(authorityCount >> 8)
        out[9] = UInt8(truncatingIfNeeded: authorityCount)
        if let edns {
            out[11] = 1
            Self.appendOPT(&out, extendedRcode: extendedRcode, dnssecOK: edns.dnssecOK, extendedError: extendedError)
        }
        return out
    }

    /// OPT: root owner, our payload size, version 0, DO copied (RFC 3225 §3), no options.
    /// With an Extended DNS Error, one EDE option (code 15): info code, then UTF-8 extra text
    /// (cut to 200 bytes at a character boundary).
    static func appendOPT(_ out: inout [UInt8], extendedRcode: UInt8, dnssecOK: Bool, extendedError: (code: UInt16, text: String)? = nil) {
        out.append(0)
        out.append16(RecordType.opt.rawValue)
        out.append16(udpPayloadSize)
        out.append(extendedRcode)
        out.append(0)
        out.append16(dnssecOK ? 0x8000 : 0)
        guard let extendedError else {
            out.append16(0)
            return
        }
        var text = Array(extendedError.text.utf8)
        if text.count > 200 {
            text = Array(text[..<200])
            while let last = text.last, last & 0xC0 == 0x80 { text.removeLast() }
            if let last = text.last, last >= 0xC0 { text.removeLast() }
        }
        out.append16(UInt16(4 + 2 + text.count))
        out.append16(15)
        out.append16(UInt16(2 + text.count))
        out.append16(extendedError.code)
        out.append(contentsOf: text)
    }

    /// Puts the client's letter case back into a response that echoes its question (a forwarded
    /// answer comes back as the upstream wrote it), and its ID; the rest is left as it came.
    package static func restoreQuestion(_ response: inout [UInt8], from query: DNSQuery) {
        guard response.count >= query.questionEnd else { return }
        response[0] = UInt8(query.id >> 8)
        response[1] = UInt8(truncatingIfNeeded: query.id)
        let name = query.questionNameBytes
        var index = questionNameOffset
        for byte in name {
            let echoed = response[index]
            guard echoed == byte || lowercase(echoed) == lowercase(byte) else { return }
            index += 1
        }
        response.replaceSubrange(questionNameOffset..<(questionNameOffset + name.count), with: name)
    }

    private static func lowercase(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5a ? byte | 0x20 : byte }
}
