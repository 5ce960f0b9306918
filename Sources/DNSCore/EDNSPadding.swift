/// EDNS(0) padding (RFC 7830) to RFC 8467's block-length policy, for messages on encrypted
/// transports: a query to a DoH or DoT upstream is padded to a multiple of 128 bytes, a response on
/// the daemon's DoT and DoH listeners to a multiple of 468 when its query carried the option. Plain
/// DNS is never padded (padding there only makes a reflected answer larger).
///
/// A message is padded in place of whatever padding it had: the OPT record's padding options are
/// dropped, its other options kept in order, and one padding option of zeros appended. Nothing else
/// in the message is touched; one without an OPT record is left as it is (adding EDNS would change
/// what the message asks or says), and so is one that cannot be walked — the caller sends it
/// unpadded rather than not at all.
package enum EDNSPadding {
    /// RFC 8467 §4.1: clients pad queries to a multiple of 128 bytes.
    package static let queryBlock = 128
    /// RFC 8467 §4.1: servers pad responses to a multiple of 468 bytes.
    package static let responseBlock = 468
    /// The Padding option's code (RFC 7830 §3).
    package static let optionCode: UInt16 = 12

    /// `message` with its OPT record's padding set so that the whole message is a multiple of
    /// `block` bytes (the smallest padding that does it, 0 to `block - 1` bytes after the option's
    /// 4-byte header). Unchanged when the message has no OPT record or more than one, has records
    /// after it (a TSIG, or records whose compression pointers would move), does not walk
    /// to its end (a name, record or option running past it, bytes left over), or would pass
    /// 65,535 bytes padded.
    package static func padded(_ message: [UInt8], toMultipleOf block: Int) -> [UInt8] {
        guard block > 0 else { return message }
        return rewritten(message, padding: block)
    }

    /// `message` without the Padding options of its OPT record (an upstream's, relayed to a client
    /// that did not ask for padding or over plain DNS); unchanged when it has none, or no single
    /// OPT record, or does not walk to its end.
    package static func unpadded(_ message: [UInt8]) -> [UInt8] {
        rewritten(message, padding: nil)
    }

    /// The message with its OPT record's padding options dropped and, when `block` is given, one
    /// appended that brings the length to a multiple of it.
    private static func rewritten(_ message: [UInt8], padding block: Int?) -> [UInt8] {
        guard let rdata = optRecord(in: message) else { return message }
        var kept: [UInt8] = []
        var dropped = false
        var offset = rdata.lowerBound
        while offset < rdata.upperBound {
            guard offset + 4 <= rdata.upperBound else { return message }
            let code = UInt16(message[offset]) << 8 | UInt16(message[offset + 1])
            let length = Int(message[offset + 2]) << 8 | Int(message[offset + 3])
            guard offset + 4 + length <= rdata.upperBound else { return message }
            if code != optionCode { kept.append(contentsOf: message[offset..<(offset + 4 + length)]) } else { dropped = true }
            offset += 4 + length
        }
        var option: [UInt8] = []
        if let block {
            let unpadded = message.count - rdata.count + kept.count + 4
            let padding = (block - unpadded % block) % block
            guard unpadded + padding <= DNSMessage.maxSize, kept.count + 4 + padding <= Int(UInt16.max) else { return message }
            option.append16(optionCode)
            option.append16(UInt16(padding))
            option.append(contentsOf: repeatElement(0, count: padding))
        } else if !dropped {
            return message
        }
        var out: [UInt8] = []
        out.reserveCapacity(message.count - rdata.count + kept.count + option.count)
        out.append(contentsOf: message[..<(rdata.lowerBound - 2)])
        out.append16(UInt16(kept.count + option.count))
        out.append(contentsOf: kept)
        out.append(contentsOf: option)
        out.append(contentsOf: message[rdata.upperBound...])
        return out
    }

    /// Whether `message`'s OPT record carries a padding option (any length).
    package static func hasPadding(_ message: [UInt8]) -> Bool {
        guard let rdata = optRecord(in: message) else { return false }
        var offset = rdata.lowerBound
        while offset + 4 <= rdata.upperBound {
            if UInt16(message[offset]) << 8 | UInt16(message[offset + 1]) == optionCode { return true }
            offset += 4 + (Int(message[offset + 2]) << 8 | Int(message[offset + 3]))
        }
        return false
    }

    /// The one OPT record's RDATA range in `message`'s additional section; nil when there is none,
    /// more than one, it is not the message's last record, or the message does not walk cleanly to
    /// its last byte.
    private static func optRecord(in message: [UInt8]) -> Range<Int>? {
        guard message.count >= 12 else { return nil }
        func count(_ at: Int) -> Int { Int(message[at]) << 8 | Int(message[at + 1]) }
        var offset = 12
        for _ in 0..<count(4) {
            guard let end = nameEnd(in: message, from: offset), end + 4 <= message.count else { return nil }
            offset = end + 4
        }
        let records = count(6) + count(8)
        let additional = count(10)
        var found: Range<Int>?
        for index in 0..<(records + additional) {
            guard let end = nameEnd(in: message, from: offset), end + 10 <= message.count else { return nil }
            let type = count(end)
            let length = count(end + 8)
            let rdata = (end + 10)..<(end + 10 + length)
            guard rdata.upperBound <= message.count else { return nil }
            if type == Int(RecordType.opt.rawValue) {
                // Only in the additional section, only once, owned by the root (RFC 6891 §6.1.1).
                guard index >= records, found == nil, end == offset + 1, message[offset] == 0 else { return nil }
                found = rdata
            }
            offset = rdata.upperBound
        }
        // The OPT record must be the last record: bytes after it would move, and a compression
        // pointer in a later record into a later name would then point elsewhere (F51-P1); and a
        // TSIG or SIG(0) record, which must come last, signs the bytes padding would change (F51-P2).
        guard offset == message.count, let found, found.upperBound == message.count else { return nil }
        return found
    }

    /// Where the name starting at `start` ends (the byte after its root label or pointer); nil when
    /// it runs past the message or has a reserved label type.
    private static func nameEnd(in message: [UInt8], from start: Int) -> Int? {
        var offset = start
        while offset < message.count {
            let length = Int(message[offset])
            switch length & 0xc0 {
            case 0xc0: return offset + 2 <= message.count ? offset + 2 : nil
            case 0:
                if length == 0 { return offset + 1 }
                offset += 1 + length
            default: return nil
            }
        }
        return nil
    }
}
