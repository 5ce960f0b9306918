import Testing

@testable import HTTP2Wire

/// The frame vocabulary both HTTP/2 sides share: headers read and written, padding bounds at their
/// edges.
@Suite struct FrameTests {
    @Test func aHeaderReadsBackAsWritten() {
        let header = HTTP2FrameHeader(length: 0x01_0203, type: .headers, flags: [.endHeaders, .padded], stream: 0x7fff_fffe)
        #expect(header.bytes == [0x01, 0x02, 0x03, 0x01, 0x0c, 0x7f, 0xff, 0xff, 0xfe])
        #expect(HTTP2FrameHeader(parsing: header.bytes[...]) == header, "from a slice")
        #expect(HTTP2FrameHeader(parsing: ([0xaa] + header.bytes).dropFirst()) == header, "from a slice that does not start at 0")
    }

    @Test func theReservedBitIsIgnoredAndUnknownTypesKept() {
        let bytes: [UInt8] = [0, 0, 8, 0xee, 0xff, 0x80, 0, 0, 1]
        let header = HTTP2FrameHeader(parsing: bytes[...])
        #expect(header?.stream == 1, "the reserved bit is not part of the stream")
        #expect(header?.rawType == 0xee && header?.type == nil)
        #expect(header?.flags.rawValue == 0xff)
        #expect(HTTP2FrameHeader(parsing: bytes.dropLast()) == nil, "eight bytes are not a header")
        #expect(HTTP2FrameHeader(parsing: ArraySlice<UInt8>()) == nil)
    }

    @Test func paddingIsBoundedByItsFrame() {
        #expect(HTTP2Padding.content(count: 10, first: 3, flags: []) == 0..<10, "no PADDED flag: all content")
        #expect(HTTP2Padding.content(count: 10, first: 3, flags: .padded) == 1..<7)
        #expect(HTTP2Padding.content(count: 10, first: 9, flags: .padded) == 1..<1, "padding up to the last byte")
        #expect(HTTP2Padding.content(count: 10, first: 10, flags: .padded) == nil, "one byte more than the frame")
        #expect(HTTP2Padding.content(count: 1, first: 0, flags: .padded) == 1..<1)
        #expect(HTTP2Padding.content(count: 0, first: nil, flags: .padded) == nil, "no room for the pad length")
        #expect(HTTP2Padding.content(count: 0, first: nil, flags: []) == 0..<0)
    }

    @Test func aHeaderBlockLiesPastPaddingAndPriority() {
        #expect(
            HTTP2Padding.headerBlock(count: 10, first: 9, flags: [.padded, .priority]) == .failure(.protocolError), "padding into the priority fields"
        )
        #expect(HTTP2Padding.headerBlock(count: 10, first: 4, flags: [.padded, .priority]) == .success(6..<6), "exactly the priority fields")
        #expect(HTTP2Padding.headerBlock(count: 10, first: 1, flags: [.padded, .priority]) == .success(6..<9))
        #expect(HTTP2Padding.headerBlock(count: 4, first: 0, flags: .priority) == .failure(.frameSizeError))
        #expect(HTTP2Padding.headerBlock(count: 5, first: 0, flags: .priority) == .success(5..<5))
        #expect(HTTP2Padding.headerBlock(count: 3, first: 9, flags: .padded) == .failure(.protocolError))
        #expect(HTTP2Padding.headerBlock(count: 3, first: 9, flags: []) == .success(0..<3))
    }

    @Test func initialWindowEntriesFoldToTheirNetChangeAndTheirPeak() {
        var change = HTTP2InitialWindowChange()
        #expect(change.keepsWithinLimit(window: 5, current: 5), "no entry: nothing moves")
        let recorded = [change.record(0x7fff_ffff), change.record(10), change.record(0x8000_0000)]
        #expect(recorded == [true, true, false], "past 2^31-1 refused at once")
        #expect(change.last == 10 && change.largest == 0x7fff_ffff)
        #expect(change.keepsWithinLimit(window: 65_535, current: 65_535), "at the limit on the way")
        #expect(!change.keepsWithinLimit(window: 65_536, current: 65_535), "one past it on the way")
    }

    @Test func appendedIntegersAreInNetworkOrder() {
        var bytes: [UInt8] = []
        bytes.appendHTTP2UInt16(0x0102)
        bytes.appendHTTP2UInt32(0x0304_0506)
        bytes.appendFrameHeader(length: 4, type: .windowUpdate, stream: 3)
        #expect(bytes == [1, 2, 3, 4, 5, 6, 0, 0, 4, 8, 0, 0, 0, 0, 3])
    }
}
