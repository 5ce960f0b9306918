/// HPACK (RFC 7541) as this project's HTTP/2 needs it: a whole decoder for a peer's header blocks,
/// whose dynamic table and Huffman strings a peer uses freely, and the few literal fields a DoH
/// request is written with (never indexed, so no encoder table is kept; the server's answers are
/// written by ``HPACKLiteralWriter``).
package struct HPACKDecoder {
    package struct Field: Equatable, Sendable {
        package var name: String
        package var value: String

        package init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// Why a header block cannot be read: a connection error (COMPRESSION_ERROR, RFC 9113 §4.3).
    package struct Failure: Error, Equatable {
        package var reason: String
    }

    /// The table size the client allows (SETTINGS_HEADER_TABLE_SIZE, the default 4,096): a size
    /// update above it is an error.
    package let sizeLimit: Int
    /// The size the server last chose (RFC 7541 §4.2), at most sizeLimit.
    package private(set) var maxSize: Int
    /// Newest last; dynamic index 1 is the last element.
    private var entries: [Field] = []
    private var size = 0

    package init(sizeLimit: Int = 4096) {
        self.sizeLimit = sizeLimit
        self.maxSize = sizeLimit
    }

    /// Decodes one whole header block (HEADERS and its CONTINUATIONs joined).
    /// - Parameters:
    ///   - block: the block's bytes.
    ///   - maxListSize: the decoded list's bound (name + value + 32 per field, RFC 9113 §6.5.2);
    ///     past it the block is refused rather than held.
    /// - Returns: the fields in order.
    /// - Throws: ``Failure`` for a block that breaks RFC 7541 (the connection cannot go on).
    package mutating func decode(_ block: ArraySlice<UInt8>, maxListSize: Int = 65_536) throws(Failure) -> [Field] {
        var reader = Reader(bytes: block)
        var fields: [Field] = []
        var listSize = 0
        var sizeUpdatesAllowed = true
        while let first = reader.peek() {
            let field: Field
            if first & 0x80 != 0 {
                field = try lookup(reader.integer(prefix: 7))
            } else if first & 0x40 != 0 {
                field = try literal(&reader, prefix: 6)
                insert(field)
            } else if first & 0x20 != 0 {
                guard sizeUpdatesAllowed else { throw Failure(reason: "a table size update after the first field") }
                let newSize = try reader.integer(prefix: 5)
                guard newSize <= sizeLimit else { throw Failure(reason: "table size \(newSize) above the \(sizeLimit) allowed") }
                maxSize = newSize
                evict(toFit: 0)
                continue
            } else {
                // Without indexing (0000) and never indexed (0001) read the same.
                field = try literal(&reader, prefix: 4)
            }
            sizeUpdatesAllowed = false
            listSize += field.name.utf8.count + field.value.utf8.count + 32
            guard listSize <= maxListSize else { throw Failure(reason: "a header list above \(maxListSize) bytes") }
            fields.append(field)
        }
        return fields
    }

    private func lookup(_ index: Int) throws(Failure) -> Field {
        if index >= 1, index <= Self.staticTable.count {
            let entry = Self.staticTable[index - 1]
            return Field(name: entry.0, value: entry.1)
        }
        let dynamic = index - Self.staticTable.count
        guard index != 0, dynamic <= entries.count else { throw Failure(reason: "header index \(index) is not in the tables") }
        return entries[entries.count - dynamic]
    }

    private func literal(_ reader: inout Reader, prefix: Int) throws(Failure) -> Field {
        let index = try reader.integer(prefix: prefix)
        let name = index == 0 ? try reader.string() : try lookup(index).name
        return Field(name: name, value: try reader.string())
    }

    private mutating func insert(_ field: Field) {
        let entrySize = field.name.utf8.count + field.value.utf8.count + 32
        evict(toFit: entrySize)
        // An entry larger than the table empties it and is not kept (RFC 7541 §4.4).
        guard entrySize <= maxSize else { return }
        entries.append(field)
        size += entrySize
    }

    private mutating func evict(toFit incoming: Int) {
        var dropped = 0
        while size + incoming > maxSize, dropped < entries.count {
            size -= entries[dropped].name.utf8.count + entries[dropped].value.utf8.count + 32
            dropped += 1
        }
        entries.removeFirst(dropped)
    }

    private struct Reader {
        let bytes: ArraySlice<UInt8>
        var offset: Int

        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            self.offset = bytes.startIndex
        }

        func peek() -> UInt8? { offset < bytes.endIndex ? bytes[offset] : nil }

        /// An N-bit prefix integer (RFC 7541 §5.1), bounded well below overflow: no header here
        /// needs more than 2^24.
        mutating func integer(prefix: Int) throws(Failure) -> Int {
            guard offset < bytes.endIndex else { throw Failure(reason: "the block ends inside an integer") }
            let mask = (1 << prefix) - 1
            var value = Int(bytes[offset]) & mask
            offset += 1
            guard value == mask else { return value }
            var shift = 0
            while true {
                guard offset < bytes.endIndex else { throw Failure(reason: "the block ends inside an integer") }
                // Four continuation bytes already pass 2^24; more would shift bits past the sign
                // (a negative length: the fuzzer found it, Fuzz/crashers/h2client).
                guard shift <= 21 else { throw Failure(reason: "an integer above 2^24") }
                let byte = bytes[offset]
                offset += 1
                value += Int(byte & 0x7f) << shift
                shift += 7
                guard value < 1 << 24 else { throw Failure(reason: "an integer above 2^24") }
                if byte & 0x80 == 0 { return value }
            }
        }

        /// A string literal (RFC 7541 §5.2), Huffman-coded or raw.
        mutating func string() throws(Failure) -> String {
            guard let first = peek() else { throw Failure(reason: "the block ends before a string") }
            let length = try integer(prefix: 7)
            guard length <= bytes.endIndex - offset else { throw Failure(reason: "a \(length)-byte string past the block's end") }
            let raw = bytes[offset..<offset + length]
            offset += length
            if first & 0x80 == 0 { return String(decoding: raw, as: UTF8.self) }
            return String(decoding: try HPACKHuffman.decode(raw), as: UTF8.self)
        }
    }

    /// RFC 7541 Appendix A.
    static let staticTable: [(String, String)] = [
        (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"), (":path", "/index.html"),
        (":scheme", "http"), (":scheme", "https"), (":status", "200"), (":status", "204"), (":status", "206"),
        (":status", "304"), (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
        ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""), ("accept", ""),
        ("access-control-allow-origin", ""), ("age", ""), ("allow", ""), ("authorization", ""), ("cache-control", ""),
        ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
        ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""), ("date", ""),
        ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""), ("if-match", ""),
        ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""), ("if-unmodified-since", ""),
        ("last-modified", ""), ("link", ""), ("location", ""), ("max-forwards", ""), ("proxy-authenticate", ""),
        ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""),
        ("server", ""), ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
        ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
    ]
}

/// The request side: fields written as literals without indexing, their names from the static
/// table (RFC 7541 §6.2.2), so a request needs no encoder state.
package enum HPACKRequestFields {
    /// `:method GET`, `:method POST`, `:scheme https` as indexed fields (§6.1).
    package static let methodGET: UInt8 = 0x82
    package static let methodPOST: UInt8 = 0x83
    package static let schemeHTTPS: UInt8 = 0x87
    /// Static-table indexes of the names written as literals.
    package static let authority = 1
    package static let path = 4
    package static let accept = 19
    package static let contentLength = 28
    package static let contentType = 31

    /// A literal field without indexing whose name is the static entry `nameIndex`, raw value.
    package static func append(nameIndex: Int, value: some Collection<UInt8>, to output: inout [UInt8]) {
        appendInteger(nameIndex, prefix: 4, flags: 0x00, to: &output)
        appendInteger(value.count, prefix: 7, flags: 0x00, to: &output)
        output.append(contentsOf: value)
    }

    package static func appendInteger(_ value: Int, prefix: Int, flags: UInt8, to output: inout [UInt8]) {
        let mask = (1 << prefix) - 1
        guard value >= mask else {
            output.append(flags | UInt8(value))
            return
        }
        output.append(flags | UInt8(mask))
        var rest = value - mask
        while rest >= 0x80 {
            output.append(UInt8(rest & 0x7f) | 0x80)
            rest >>= 7
        }
        output.append(UInt8(rest))
    }
}

/// The canonical Huffman code of RFC 7541 Appendix B, rebuilt from its code lengths.
package enum HPACKHuffman {
    /// Code lengths of symbols 0-255 and EOS (256), in symbol order: codes of one length are
    /// consecutive and ordered by symbol, so the lengths alone define the code.
    static let lengths: [UInt8] = [
        13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
        6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
        13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
        15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
        20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
        22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
        26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
        20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
        30,
    ]

    /// For each length: the first code, how many codes it has, and where its symbols start in
    /// `symbols`.
    struct Canonical {
        var firstCode = [UInt32](repeating: 0, count: 31)
        var count = [Int](repeating: 0, count: 31)
        var start = [Int](repeating: 0, count: 31)
        var symbols: [Int] = []
    }

    static let canonical: Canonical = {
        var table = Canonical()
        table.symbols = (0..<lengths.count).sorted { (lengths[$0], $0) < (lengths[$1], $1) }
        var code: UInt32 = 0
        var previous = 0
        for (position, symbol) in table.symbols.enumerated() {
            let length = Int(lengths[symbol])
            if position > 0 { code = (code + 1) << (length - previous) }
            if table.count[length] == 0 {
                table.firstCode[length] = code
                table.start[length] = position
            }
            table.count[length] += 1
            previous = length
        }
        return table
    }()

    package static func decode(_ bytes: ArraySlice<UInt8>) throws(HPACKDecoder.Failure) -> [UInt8] {
        let table = canonical
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count * 8 / 5)
        var code: UInt32 = 0
        var length = 0
        for byte in bytes {
            for bit in (0..<8).reversed() {
                code = code << 1 | UInt32(byte >> bit & 1)
                length += 1
                let index = Int(code) &- Int(table.firstCode[length])
                if table.count[length] > 0, index >= 0, index < table.count[length] {
                    let symbol = table.symbols[table.start[length] + index]
                    guard symbol < 256 else { throw HPACKDecoder.Failure(reason: "EOS inside a Huffman string") }
                    output.append(UInt8(symbol))
                    code = 0
                    length = 0
                } else if length == 30 {
                    throw HPACKDecoder.Failure(reason: "an invalid Huffman code")
                }
            }
        }
        // What is left must be a prefix of EOS (all ones) shorter than a byte (§5.2).
        guard length < 8, code == (1 << length) - 1 else { throw HPACKDecoder.Failure(reason: "invalid Huffman padding") }
        return output
    }
}
