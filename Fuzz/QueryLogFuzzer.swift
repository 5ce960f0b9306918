// libFuzzer entry point: the query log's line formatter (Sources/ResolverDaemon/QueryLogFormat.swift)
// on a relayed response of any bytes, written into a line buffer that starts nearly full, built
// with AddressSanitizer (Scripts/fuzz.sh querylog). A write past the buffer is ASan's report; the
// properties checked here: one line, ending in "}\n", that is valid JSON with the keys the log
// promises, and a buffer whose count never passes its capacity.

import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeRawBufferPointer(start: data, count: size)
    guard input.count >= 3 else { return 0 }
    // Byte 0: how much room the 2 KiB buffer has left before the line (8 to 2,048 bytes).
    // Byte 1: the queried name's first label length (its bytes follow); the rest is the response.
    let capacity = 2048
    let room = (Int(input[0]) + 1) * 8
    let labelLength = min(Int(input[1]) & 0x3f, input.count - 2)
    var name: [UInt8] = [UInt8(labelLength)] + input[2..<(2 + labelLength)] + [4] + Array("test".utf8) + [0]
    if labelLength == 0 { name = [0] }
    let response = Array(input[(2 + labelLength)...].prefix(QueryLogRecord.maxResponseBytes))
    let client: [UInt8] = [192, 0, 2, 1] + [UInt8](repeating: 0, count: 12)
    let strings: [[UInt8]] = ["udp", "cache", "secure", "consistent", "https://doh.test/dns-query"].map { Array($0.utf8) }

    var line = QueryLogLine(capacity: capacity)
    defer { line.deallocate() }
    let filler = [UInt8](repeating: UInt8(ascii: " "), count: capacity - room)
    filler.withUnsafeBytes { line.bytes($0) }
    let before = line.count
    var formatter = QueryLogFormatter(anonymizeIPv4: input[0] & 1 == 0 ? nil : 24, anonymizeIPv6: nil)
    name.withUnsafeBytes { name in
        response.withUnsafeBytes { response in
            client.withUnsafeBytes { client in
                strings[0].withUnsafeBytes { transport in
                    strings[1].withUnsafeBytes { source in
                        strings[2].withUnsafeBytes { dnssec in
                            strings[3].withUnsafeBytes { verdict in
                                strings[4].withUnsafeBytes { upstream in
                                    let record = QueryLogRecord.View(
                                        time: 1_800_000_000_123_000_000, latency: 1_234_567, clientFamily: 4, client: client,
                                        type: UInt16(input[input.count - 1]), name: name, transport: transport, source: source,
                                        dnssec: dnssec, verdict: verdict, upstream: upstream, response: response)
                                    formatter.append(record, to: &line)
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    precondition(line.count <= line.capacity, "the line buffer counts past its memory")
    let text = Array(line.written[before...])
    precondition(text.count >= 2 && text[text.count - 2] == UInt8(ascii: "}") && text.last == UInt8(ascii: "\n"), "a line ends with }\\n")
    precondition(!text.dropLast().contains(UInt8(ascii: "\n")), "one line per record")
    var json = JSONCheck(text.dropLast())
    precondition(json.object() && json.atEnd, "not JSON at byte \(json.offset): \(String(decoding: text, as: UTF8.self).prefix(300))")
    // A full parser, now and then, to keep the small one honest.
    if input.count % 64 == 0 {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text)) as? [String: Any] else {
            preconditionFailure("not JSON: \(String(decoding: text, as: UTF8.self).prefix(300))")
        }
        precondition(object["name"] is String && object["rcode"] is String && object["latency_ms"] is NSNumber, "keys missing: \(object.keys)")
    }
    return 0
}

/// RFC 8259 as the query log writes it (objects, arrays, strings, numbers; valid UTF-8 in strings),
/// checked in one pass without building anything.
struct JSONCheck {
    let bytes: ArraySlice<UInt8>
    var offset: Int

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        offset = bytes.startIndex
    }

    var atEnd: Bool { offset == bytes.endIndex }

    private mutating func take(_ byte: UInt8) -> Bool {
        guard offset < bytes.endIndex, bytes[offset] == byte else { return false }
        offset += 1
        return true
    }

    mutating func object() -> Bool {
        guard take(UInt8(ascii: "{")) else { return false }
        if take(UInt8(ascii: "}")) { return true }
        repeat {
            guard string(), take(UInt8(ascii: ":")), value() else { return false }
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "}"))
    }

    mutating func array() -> Bool {
        guard take(UInt8(ascii: "[")) else { return false }
        if take(UInt8(ascii: "]")) { return true }
        repeat {
            guard value() else { return false }
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "]"))
    }

    mutating func value() -> Bool {
        guard offset < bytes.endIndex else { return false }
        switch bytes[offset] {
        case UInt8(ascii: "{"): return object()
        case UInt8(ascii: "["): return array()
        case UInt8(ascii: "\""): return string()
        default: return number()
        }
    }

    mutating func number() -> Bool {
        let start = offset
        while offset < bytes.endIndex, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[offset]) { offset += 1 }
        guard offset > start else { return false }
        if bytes[start] == UInt8(ascii: "0"), offset - start > 1 { return false }
        if take(UInt8(ascii: ".")) {
            let fraction = offset
            while offset < bytes.endIndex, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[offset]) { offset += 1 }
            guard offset > fraction else { return false }
        }
        return true
    }

    mutating func string() -> Bool {
        guard take(UInt8(ascii: "\"")) else { return false }
        while offset < bytes.endIndex {
            let byte = bytes[offset]
            offset += 1
            switch byte {
            case UInt8(ascii: "\""): return true
            case 0..<0x20: return false
            case UInt8(ascii: "\\"):
                guard offset < bytes.endIndex else { return false }
                let escape = bytes[offset]
                offset += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"), UInt8(ascii: "n"),
                    UInt8(ascii: "r"), UInt8(ascii: "t"):
                    continue
                case UInt8(ascii: "u"):
                    guard offset + 4 <= bytes.endIndex, bytes[offset..<offset + 4].allSatisfy({ $0.isHexDigit }) else { return false }
                    offset += 4
                default: return false
                }
            case 0x80...:
                // One UTF-8 sequence, checked by the standard library.
                let length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2
                guard offset - 1 + length <= bytes.endIndex,
                    String(validating: bytes[(offset - 1)..<(offset - 1 + length)], as: UTF8.self) != nil
                else { return false }
                offset += length - 1
            default: continue
            }
        }
        return false
    }
}

extension UInt8 {
    fileprivate var isHexDigit: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(self)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(self)
    }
}
