// libFuzzer entry point: the daemon's HPACK literal writer (Sources/HTTP2Wire/HPACKLiteralWriter.swift),
// which writes an answer's header block through a raw pointer, given exactly the room its `bound`
// promises, built with AddressSanitizer (Scripts/fuzz.sh hpack). Any write past that room is ASan's
// report (or the writer's own precondition). The block must then decode, with the DoH client's HPACK
// decoder (Sources/HTTP2Wire/HPACK.swift), to the fields written: status, each header (names lower-cased),
// content-length, date.

import HTTP2Wire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard input.count >= 4 else { return 0 }
    // Byte 0-1: the status (100-999); byte 2: flags (bit 0: a date, bit 1: a table size update);
    // byte 3: the content length's magnitude; then fields, each "name\u{0}value\u{0}".
    let status = 100 + (Int(input[0]) << 8 | Int(input[1])) % 900
    let contentLength = Int(input[3]) < 64 ? Int(input[3]) * 1_000_003 % Int.max : Int.max - Int(input[3])
    var parts = input[4...].split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
    var date: String?
    if input[2] & 1 != 0, !parts.isEmpty { date = parts.removeLast() }
    var headers: [(String, String)] = []
    while parts.count >= 2, headers.count < 32 {
        headers.append((parts[0], parts[1]))
        parts.removeFirst(2)
    }
    let bound = HPACKLiteralWriter.bound(headers: headers, date: date)
    let room = UnsafeMutableRawBufferPointer.allocate(byteCount: bound, alignment: 1)
    defer { room.deallocate() }
    var block = HPACKLiteralWriter(room)
    if input[2] & 2 != 0 { block.byte(0x20) }
    block.status(status)
    for (name, value) in headers { block.field(name: name, value: value) }
    block.contentLength(contentLength)
    if let date { block.field(name: "date", value: date) }
    precondition(block.count <= bound, "wrote \(block.count) bytes, bound \(bound)")

    let written = Array(UnsafeRawBufferPointer(rebasing: room[0..<block.count]))
    var decoder = HPACKDecoder()
    guard let fields = try? decoder.decode(written[...], maxListSize: .max) else {
        preconditionFailure("the block does not decode: \(written)")
    }
    var expected = [HPACKDecoder.Field(name: ":status", value: String(status))]
    for (name, value) in headers {
        expected.append(.init(name: HPACKLiteralWriter.nameIndex(name) != nil ? name : name.lowercased(), value: value))
    }
    expected.append(.init(name: "content-length", value: String(contentLength)))
    if let date { expected.append(.init(name: "date", value: date)) }
    precondition(fields == expected, "decoded \(fields), wrote \(expected)")
    return 0
}
