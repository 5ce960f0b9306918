// libFuzzer entry point: a peer's HTTP/2 frames through the shared wire code (Sources/HTTP2Wire):
// the frame header read straight from libFuzzer's bytes (so AddressSanitizer sees a read one past
// them), padding and the HEADERS priority fields as both sides cut them, and the HPACK decoder the
// DoH client reads responses with (the server decodes requests with NIOHPACK's). This harness walks
// the frames itself; the server's NIO frame layer around the shared code is driven with mutated
// conversations in process (HTTP2FrameLayerTests.mutatedConversationsNeverTrapAndStayBounded), the
// client's session by the h2client target. Properties: no crash, no read outside the input; a header
// writes back to its own bytes (reserved bit aside); the block a frame's padding and priority
// leave lies inside it; decoded header lists stay bounded.

import HTTP2Wire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let raw = UnsafeRawBufferPointer(start: data, count: size)
    let input = Array(raw)
    var decoder = HPACKDecoder()
    var offset = 0
    while let header = HTTP2FrameHeader(parsing: UnsafeRawBufferPointer(rebasing: raw[offset...])) {
        precondition(HTTP2FrameHeader(parsing: input[offset...]) == header, "the two reads disagree")
        var expected = Array(input[offset..<offset + HTTP2Limits.frameHeaderSize])
        expected[5] &= 0x7f
        precondition(header.bytes == expected, "a header that does not write back to its bytes")
        guard header.length <= HTTP2Limits.defaultMaxFrameSize else { break }  // FRAME_SIZE_ERROR
        let start = offset + HTTP2Limits.frameHeaderSize
        guard input.count - start >= header.length else { break }  // the rest of the frame is not here
        let payload = input[start..<start + header.length]
        offset = start + header.length
        switch header.type {
        case .data, .headers:
            guard let content = HTTP2Padding.content(count: payload.count, first: payload.first, flags: header.flags) else { continue }
            precondition(content.lowerBound >= 0 && content.upperBound <= payload.count && content.lowerBound <= content.upperBound)
            guard header.type == .headers else { continue }
            guard case .success(let block) = HTTP2Padding.headerBlock(count: payload.count, first: payload.first, flags: header.flags) else {
                continue
            }
            precondition(block.lowerBound >= content.lowerBound && block.upperBound == content.upperBound)
            let fragment = payload[payload.startIndex + block.lowerBound..<payload.startIndex + block.upperBound]
            // One table for the whole connection, as both sides keep it; a failure ends the connection.
            guard let fields = try? decoder.decode(fragment, maxListSize: 16_384) else { return 0 }
            let listSize = fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
            precondition(listSize <= 16_384, "a header list past its bound")
        default:
            continue
        }
    }
    return 0
}
