// libFuzzer entry point: a peer's HTTP/2 frames read the way both of this project's sides read
// them, on the shared wire code (Sources/HTTP2Wire: the frame header, padding, the HPACK decoder);
// the daemon's NIO frame layer around it is driven with mutated conversations in process
// (HTTP2FrameLayerTests.mutatedConversationsNeverTrapAndStayBounded). Properties: no crash, no
// read outside the input (AddressSanitizer); a header writes back to its own bytes (reserved bit
// aside); the content padding leaves lies inside its frame; decoded header lists stay bounded.

import HTTP2Wire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    var decoder = HPACKDecoder()
    var offset = 0
    while let header = HTTP2FrameHeader(parsing: input[offset...]) {
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
            var fragment = payload[payload.startIndex + content.lowerBound..<payload.startIndex + content.upperBound]
            if header.flags.contains(.priority) {
                guard fragment.count >= 5 else { continue }
                fragment = fragment.dropFirst(5)
            }
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
