/// An answer's header block as HPACK literals without indexing (RFC 7541 §6.2.2): static-table
/// names where the table has them, no Huffman coding, no dynamic table (so nothing to keep in step
/// with the peer's). Written through a raw pointer into room reserved once per block: written field
/// by field into a `ByteBuffer`, a DoH answer's four fields cost more than parsing its query.
package struct HPACKLiteralWriter {
    @usableFromInline let bytes: UnsafeMutableRawBufferPointer
    @usableFromInline package internal(set) var count = 0

    @inlinable package init(_ bytes: UnsafeMutableRawBufferPointer) {
        self.bytes = bytes
    }

    /// Room enough for a block of `status`, `headers`, `content-length` and `date` (and a table size
    /// update): every length prefix counted at its largest.
    @inlinable package static func bound(headers: [(String, String)], date: String?) -> Int {
        var bound = 1 + statusBound + contentLengthBound + fieldBound(name: "date", value: date ?? "")
        for (name, value) in headers { bound += fieldBound(name: name, value: value) }
        return bound
    }

    @usableFromInline static var integerBound: Int { 10 }  // an Int in HPACK's 7-bit groups, with its prefix byte
    @usableFromInline static var statusBound: Int { 1 + integerBound + 20 }
    @usableFromInline static var contentLengthBound: Int { 1 + 1 + 20 }

    /// A name not in the static table is written lower-cased, which may take up to three times its
    /// bytes outside ASCII.
    @inlinable static func fieldBound(name: String, value: String) -> Int {
        1 + 2 * integerBound + 3 * name.utf8.count + value.utf8.count
    }

    @inlinable package mutating func byte(_ value: UInt8) {
        precondition(count < bytes.count, "HPACK block over its bound")
        bytes[count] = value
        count += 1
    }

    /// `:status`, from the static table when it holds the code (RFC 7541 Appendix A).
    @inlinable package mutating func status(_ status: Int) {
        let index: UInt8? =
            switch status {
            case 200: 8
            case 204: 9
            case 206: 10
            case 304: 11
            case 400: 12
            case 404: 13
            case 500: 14
            default: nil
            }
        if let index {
            byte(0x80 | index)
        } else {
            integer(8, prefix: 4, flags: 0)
            string(String(status))
        }
    }

    @inlinable package mutating func field(name: String, value: String) {
        if let index = Self.nameIndex(name) {
            integer(index, prefix: 4, flags: 0)
        } else {
            byte(0)
            string(name.lowercased())
        }
        string(value)
    }

    /// `content-length` (static index 28) with its digits written in place, no string made.
    @inlinable package mutating func contentLength(_ length: Int) {
        integer(28, prefix: 4, flags: 0)
        var digits = 1, rest = length / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        byte(UInt8(digits))
        precondition(count + digits <= bytes.count, "HPACK block over its bound")
        var value = length
        for offset in stride(from: digits - 1, through: 0, by: -1) {
            bytes[count + offset] = UInt8(ascii: "0") + UInt8(value % 10)
            value /= 10
        }
        count += digits
    }

    @inlinable mutating func string(_ text: String) {
        var text = text
        integer(text.utf8.count, prefix: 7, flags: 0)
        text.withUTF8 { utf8 in
            precondition(count + utf8.count <= bytes.count, "HPACK block over its bound")
            UnsafeMutableRawBufferPointer(rebasing: bytes[count..<(count + utf8.count)]).copyMemory(from: UnsafeRawBufferPointer(utf8))
            count += utf8.count
        }
    }

    /// RFC 7541 §5.1.
    @inlinable mutating func integer(_ value: Int, prefix: Int, flags: UInt8) {
        let limit = (1 << prefix) - 1
        if value < limit {
            byte(flags | UInt8(value))
            return
        }
        byte(flags | UInt8(limit))
        var rest = value - limit
        while rest >= 128 {
            byte(UInt8(rest & 0x7F | 0x80))
            rest >>= 7
        }
        byte(UInt8(rest))
    }

    /// The static table index of a name an answer uses (RFC 7541 Appendix A), or nil: a switch, not
    /// a dictionary, as every answer writes four or five of them.
    @inlinable package static func nameIndex(_ name: String) -> Int? {
        switch name {
        case "content-type": 31
        case "cache-control": 24
        case "content-length": 28
        case "date": 33
        case "retry-after": 53
        case "accept-ranges": 18
        case "access-control-allow-origin": 20
        case "age": 21
        case "allow": 22
        case "content-disposition": 25
        case "content-encoding": 26
        case "content-language": 27
        case "content-location": 29
        case "content-range": 30
        case "etag": 34
        case "expires": 36
        case "last-modified": 44
        case "link": 45
        case "location": 46
        case "server": 54
        case "set-cookie": 55
        case "strict-transport-security": 56
        case "vary": 59
        case "via": 60
        case "www-authenticate": 61
        default: nil
        }
    }
}
