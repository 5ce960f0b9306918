/// The wire details of RFC 8484 shared by the DoH client (HTTPDNS) and the DoH server (the daemon):
/// the media type and base64url (RFC 4648 §5) without padding.
package enum DoHWire {
    /// `application/dns-message` (RFC 8484 §6).
    package static let mediaType = "application/dns-message"

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The media type of a Content-Type value, lower-cased, without parameters or surrounding
    /// blanks (`Application/DNS-Message; charset=x` → `application/dns-message`); "" for none.
    package static func mediaType(of contentType: String?) -> String {
        guard let contentType else { return "" }
        var utf8 = contentType.utf8[...]
        if let semicolon = utf8.firstIndex(of: UInt8(ascii: ";")) { utf8 = utf8[..<semicolon] }
        while let first = utf8.first, first == 0x20 || first == 0x09 { utf8 = utf8.dropFirst() }
        while let last = utf8.last, last == 0x20 || last == 0x09 { utf8 = utf8.dropLast() }
        return String(decoding: utf8.map { $0 >= 0x41 && $0 <= 0x5a ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// Why an HTTP answer is not a DNS answer, or nil when it is one: status 200 and a media type
    /// among `types` (the first is the one named as expected). `status` nil is a stream that ended
    /// with only informational (1xx) headers. One wording for every DoH client path.
    package static func failure(status: Int?, contentType: String?, accepting types: [String] = [mediaType]) -> DNSError? {
        guard let status, status == 200 else {
            var error = DNSError(.httpStatus, "HTTP status \(status.map(String.init) ?? "1xx at the end of the stream")")
            error.httpStatus = UInt16(clamping: status ?? 0)
            return error
        }
        let found = Self.mediaType(of: contentType)
        guard types.contains(found) else {
            return DNSError(.badContentType, "content type '\(found.isEmpty ? "none" : found)', expected \(types.first ?? mediaType)")
        }
        return nil
    }

    /// base64url without padding, as a DoH GET's `dns` parameter carries a query. On the hot path
    /// of every GET, so written over bytes.
    package static func encodeBase64URL(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= bytes.count {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out.append(alphabet[Int(chunk >> 18 & 63)])
            out.append(alphabet[Int(chunk >> 12 & 63)])
            out.append(alphabet[Int(chunk >> 6 & 63)])
            out.append(alphabet[Int(chunk & 63)])
            index += 3
        }
        let rest = bytes.count - index
        if rest > 0 {
            let chunk = UInt32(bytes[index]) << 16 | (rest == 2 ? UInt32(bytes[index + 1]) << 8 : 0)
            out.append(alphabet[Int(chunk >> 18 & 63)])
            out.append(alphabet[Int(chunk >> 12 & 63)])
            if rest == 2 { out.append(alphabet[Int(chunk >> 6 & 63)]) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes base64url; trailing `=` padding is tolerated, anything else outside the alphabet
    /// (or a length no encoding produces) is refused with nil.
    package static func decodeBase64URL(_ text: Substring) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decodeBase64URL(bytes: $0) }
    }

    /// ``decodeBase64URL(_:)`` over bytes: one pass, four characters to three bytes, written into
    /// the result in place (on the hot path of every DoH GET the daemon serves).
    package static func decodeBase64URL(bytes text: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var count = text.count, padding = 0
        while count > 0, text[count - 1] == UInt8(ascii: "=") {
            count -= 1
            padding += 1
        }
        guard padding <= 2, count % 4 != 1 else { return nil }
        var valid = true
        let decoded = [UInt8](unsafeUninitializedCapacity: count / 4 * 3 + 2) { out, initialized in
            var index = 0, written = 0
            while index < count {
                let group = min(4, count - index)
                var chunk: UInt32 = 0
                for offset in 0..<4 {
                    let value = offset < group ? sextet(text[index + offset]) : 0
                    guard value != 0xFF else {
                        valid = false
                        initialized = 0
                        return
                    }
                    chunk = chunk << 6 | UInt32(value)
                }
                // Room: 3 bytes a whole group, 1 or 2 for a last group of 2 or 3 characters, within
                // count / 4 * 3 + 2 (every length 0-199 round-trips in HTTPDNSResolverTests).
                precondition(written + group - 1 <= out.count, "base64url output past its room")
                out[written] = UInt8(truncatingIfNeeded: chunk >> 16)
                if group > 2 { out[written + 1] = UInt8(truncatingIfNeeded: chunk >> 8) }
                if group > 3 { out[written + 2] = UInt8(truncatingIfNeeded: chunk) }
                written += group - 1
                index += group
            }
            initialized = written
        }
        return valid ? decoded : nil
    }

    /// The value of one base64url character, 0xFF outside the alphabet.
    @inline(__always)
    private static func sextet(_ byte: UInt8) -> UInt8 {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): byte - 65
        case UInt8(ascii: "a")...UInt8(ascii: "z"): byte - 97 + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - 48 + 52
        case UInt8(ascii: "-"): 62
        case UInt8(ascii: "_"): 63
        default: 0xFF
        }
    }
}
