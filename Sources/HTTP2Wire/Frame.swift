/// HTTP/2's frame layer as bytes (RFC 9113 §4, §6, §7), with no I/O and no NIO: what the DoH client
/// (`HTTPDNS.DoHSession`) and the daemon's server (`DaemonHTTP.HTTP2FrameLayer`) both read and write,
/// so that a rule learnt on one side — a bound, a peer's quirk — is written once.

/// The frame types of RFC 9113 §6. A type not listed is ignored by both sides (§4.1, §5.5).
package enum HTTP2FrameType: UInt8, Sendable {
    case data = 0, headers, priority, rstStream, settings, pushPromise, ping, goAway, windowUpdate, continuation
}

/// A frame's flags. One bit has two names: END_STREAM on DATA and HEADERS is ACK on SETTINGS and PING.
package struct HTTP2FrameFlags: OptionSet, Sendable {
    package let rawValue: UInt8
    @inlinable package init(rawValue: UInt8) { self.rawValue = rawValue }

    @inlinable package static var endStream: HTTP2FrameFlags { HTTP2FrameFlags(rawValue: 0x1) }
    @inlinable package static var ack: HTTP2FrameFlags { HTTP2FrameFlags(rawValue: 0x1) }
    @inlinable package static var endHeaders: HTTP2FrameFlags { HTTP2FrameFlags(rawValue: 0x4) }
    @inlinable package static var padded: HTTP2FrameFlags { HTTP2FrameFlags(rawValue: 0x8) }
    @inlinable package static var priority: HTTP2FrameFlags { HTTP2FrameFlags(rawValue: 0x20) }
}

/// The error codes of RFC 9113 §7, carried by RST_STREAM and GOAWAY.
package enum HTTP2ErrorCode: UInt32, Error, Sendable, Equatable {
    case noError = 0x0, protocolError, internalError, flowControlError, settingsTimeout, streamClosed, frameSizeError
    case refusedStream, cancel, compressionError, connectError, enhanceYourCalm, inadequateSecurity, http11Required
}

/// The settings of RFC 9113 §6.5.2. Identifiers not listed are ignored (§6.5.2).
package enum HTTP2SettingID: UInt16, Sendable {
    case headerTableSize = 1, enablePush, maxConcurrentStreams, initialWindowSize, maxFrameSize, maxHeaderListSize
}

/// RFC 9113's fixed numbers.
package enum HTTP2Limits {
    /// What the client sends first (§3.4).
    package static let preface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
    /// A frame header's size (§4.1).
    @inlinable package static var frameHeaderSize: Int { 9 }
    /// Windows start at this size and SETTINGS_MAX_FRAME_SIZE's default is 16,384 (§6.5.2, §6.9.2).
    @inlinable package static var defaultWindow: Int { 65_535 }
    @inlinable package static var defaultMaxFrameSize: Int { 16_384 }
    /// The largest flow-control window (§6.9.1): a window past it is a FLOW_CONTROL_ERROR.
    @inlinable package static var maxWindow: Int { 0x7fff_ffff }
    /// What SETTINGS_MAX_FRAME_SIZE may be set to (§6.5.2).
    @inlinable package static var maxFrameSizeRange: ClosedRange<UInt32> { 16_384...16_777_215 }
}

/// A frame header (§4.1): 24-bit length, type, flags, and a 31-bit stream identifier (the reserved
/// bit ignored on read, cleared on write).
package struct HTTP2FrameHeader: Sendable, Equatable {
    package var length: Int
    /// The type as sent: unknown types are kept so that their frames can be skipped.
    package var rawType: UInt8
    package var flags: HTTP2FrameFlags
    package var stream: UInt32

    @inlinable
    package init(length: Int, type: HTTP2FrameType, flags: HTTP2FrameFlags = [], stream: UInt32) {
        self.init(length: length, rawType: type.rawValue, flags: flags, stream: stream)
    }

    @inlinable
    package init(length: Int, rawType: UInt8, flags: HTTP2FrameFlags, stream: UInt32) {
        self.length = length
        self.rawType = rawType
        self.flags = flags
        self.stream = stream
    }

    /// The header in the first 9 bytes of `bytes`, nil when fewer are there.
    @inlinable
    package init?(parsing bytes: UnsafeRawBufferPointer) {
        guard bytes.count >= HTTP2Limits.frameHeaderSize else { return nil }
        length = Int(bytes[0]) << 16 | Int(bytes[1]) << 8 | Int(bytes[2])
        rawType = bytes[3]
        flags = HTTP2FrameFlags(rawValue: bytes[4])
        stream = (UInt32(bytes[5]) << 24 | UInt32(bytes[6]) << 16 | UInt32(bytes[7]) << 8 | UInt32(bytes[8])) & 0x7fff_ffff
    }

    /// The header in the first 9 bytes of `bytes`, nil when fewer are there.
    @inlinable
    package init?(parsing bytes: ArraySlice<UInt8>) {
        guard let header = bytes.withUnsafeBytes({ HTTP2FrameHeader(parsing: $0) }) else { return nil }
        self = header
    }

    /// The type, nil for one RFC 9113 does not define.
    @inlinable
    package var type: HTTP2FrameType? { HTTP2FrameType(rawValue: rawType) }

    /// The header's 9 bytes.
    package var bytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(HTTP2Limits.frameHeaderSize)
        append(to: &bytes)
        return bytes
    }

    /// Appends the header's 9 bytes. `length` must fit 24 bits (every caller's frames are far smaller).
    @inlinable
    package func append(to output: inout [UInt8]) {
        precondition((0..<1 << 24).contains(length), "a frame length past 24 bits")
        output.append(UInt8(truncatingIfNeeded: length >> 16))
        output.append(UInt8(truncatingIfNeeded: length >> 8))
        output.append(UInt8(truncatingIfNeeded: length))
        output.append(rawType)
        output.append(flags.rawValue)
        output.append(UInt8(truncatingIfNeeded: stream >> 24) & 0x7f)
        output.append(UInt8(truncatingIfNeeded: stream >> 16))
        output.append(UInt8(truncatingIfNeeded: stream >> 8))
        output.append(UInt8(truncatingIfNeeded: stream))
    }
}

/// Padding (§6.1, §6.2): where a DATA or HEADERS frame's content lies inside its payload.
package enum HTTP2Padding {
    /// The offsets inside a payload of `count` bytes (`first`: its first byte, the pad length when
    /// PADDED is set) that hold what is not padding: all of them without PADDED; else those after
    /// the pad length and before the padding. Nil when the padding does not fit (a PROTOCOL_ERROR).
    /// A HEADERS frame's priority fields are the first 5 bytes of the range.
    @inlinable
    package static func content(count: Int, first: UInt8?, flags: HTTP2FrameFlags) -> Range<Int>? {
        guard flags.contains(.padded) else { return 0..<count }
        guard let first, count >= 1, Int(first) <= count - 1 else { return nil }
        return 1..<count - Int(first)
    }

    /// A HEADERS frame's header block fragment inside a payload of `count` bytes: past the pad
    /// length and the priority fields, before the padding. Padding that does not fit what follows
    /// the priority fields is a PROTOCOL_ERROR (§6.2); an unpadded frame too short for its priority
    /// fields a FRAME_SIZE_ERROR (§4.2).
    package static func headerBlock(count: Int, first: UInt8?, flags: HTTP2FrameFlags) -> Result<Range<Int>, HTTP2ErrorCode> {
        guard let content = content(count: count, first: first, flags: flags) else { return .failure(.protocolError) }
        guard flags.contains(.priority) else { return .success(content) }
        guard content.count >= 5 else { return .failure(flags.contains(.padded) ? .protocolError : .frameSizeError) }
        return .success(content.lowerBound + 5..<content.upperBound)
    }
}

/// SETTINGS_INITIAL_WINDOW_SIZE within one SETTINGS frame (§6.5.2, §6.9.2): every stream's send
/// window moves by the change, entry after entry. A frame may repeat the setting hundreds of times;
/// walking every stream for each entry is work a peer chooses, so the entries are folded: the net
/// change is applied once, and the largest value seen says whether some entry took a window past
/// 2^31-1 on the way (a FLOW_CONTROL_ERROR, as it would be entry by entry).
package struct HTTP2InitialWindowChange {
    package private(set) var last: Int?
    package private(set) var largest: Int?

    package init() {}

    /// Records one entry's value; false when it is above 2^31-1 (a FLOW_CONTROL_ERROR at once).
    package mutating func record(_ value: UInt32) -> Bool {
        guard value <= UInt32(HTTP2Limits.maxWindow) else { return false }
        last = Int(value)
        largest = max(largest ?? Int(value), Int(value))
        return true
    }

    /// Whether a stream with `window` under the initial window `current` stays within 2^31-1
    /// through every entry.
    package func keepsWithinLimit(window: Int, current: Int) -> Bool {
        guard let largest else { return true }
        return window + (largest - current) <= HTTP2Limits.maxWindow
    }
}

extension [UInt8] {
    /// Appends a frame header.
    package mutating func appendFrameHeader(length: Int, type: HTTP2FrameType, flags: HTTP2FrameFlags = [], stream: UInt32) {
        HTTP2FrameHeader(length: length, type: type, flags: flags, stream: stream).append(to: &self)
    }

    /// Appends `value` in network order.
    package mutating func appendHTTP2UInt16(_ value: UInt16) {
        append(UInt8(value >> 8))
        append(UInt8(value & 0xff))
    }

    /// Appends `value` in network order.
    package mutating func appendHTTP2UInt32(_ value: UInt32) {
        append(UInt8(value >> 24))
        append(UInt8(value >> 16 & 0xff))
        append(UInt8(value >> 8 & 0xff))
        append(UInt8(value & 0xff))
    }
}
