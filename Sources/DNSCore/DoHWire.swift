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
        var values: [UInt8] = []
        values.reserveCapacity(text.utf8.count)
        var padding = 0
        for byte in text.utf8 {
            if byte == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            guard padding == 0 else { return nil }
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(byte - 65)
            case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(byte - 97 + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(byte - 48 + 52)
            case UInt8(ascii: "-"): values.append(62)
            case UInt8(ascii: "_"): values.append(63)
            default: return nil
            }
        }
        if values.count % 4 == 1 || padding > 2 { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(values.count * 3 / 4)
        var index = 0
        while index + 1 < values.count {
            let a = values[index], b = values[index + 1]
            bytes.append(a << 2 | b >> 4)
            if index + 2 < values.count {
                let c = values[index + 2]
                bytes.append((b & 0x0f) << 4 | c >> 2)
                if index + 3 < values.count { bytes.append((c & 0x03) << 6 | values[index + 3]) }
            }
            index += 4
        }
        return bytes
    }
}
