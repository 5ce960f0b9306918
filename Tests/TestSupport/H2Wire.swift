import NIOCore
import NIOHPACK

/// The client's side of HTTP/2 framing for tests: frames written as bytes (RFC 9113 §4.1) and the
/// server's bytes read back as frames, header blocks through NIOHPACK. Independent of the daemon's
/// own frame layer, so a test can fail when that layer is wrong.
public struct H2Wire {
    public init() {}

    public struct Frame: CustomStringConvertible {
        public var type: UInt8
        public var flags: UInt8
        public var stream: UInt32
        public var payload: ByteBuffer
        /// Decoded, for HEADERS.
        public var headers: HPACKHeaders?

        public var endStream: Bool { flags & 0x1 != 0 }
        /// The error code of RST_STREAM or GOAWAY.
        public var errorCode: UInt32? {
            switch type {
            case Kind.rstStream: return payload.getInteger(at: payload.readerIndex, as: UInt32.self)
            case Kind.goAway: return payload.getInteger(at: payload.readerIndex + 4, as: UInt32.self)
            default: return nil
            }
        }
        /// The last stream of GOAWAY, or the increment of WINDOW_UPDATE.
        public var firstWord: UInt32? { payload.getInteger(at: payload.readerIndex, as: UInt32.self).map { $0 & 0x7FFF_FFFF } }

        public var description: String {
            "frame(type: \(type), flags: \(flags), stream: \(stream), \(payload.readableBytes) bytes\(headers.map { ", \($0)" } ?? ""))"
        }
    }

    public enum Kind {
        public static let data: UInt8 = 0, headers: UInt8 = 1, priority: UInt8 = 2, rstStream: UInt8 = 3, settings: UInt8 = 4
        public static let pushPromise: UInt8 = 5, ping: UInt8 = 6, goAway: UInt8 = 7, windowUpdate: UInt8 = 8, continuation: UInt8 = 9
    }

    /// Error codes (RFC 9113 §7).
    public enum Code {
        public static let noError: UInt32 = 0, protocolError: UInt32 = 1, flowControlError: UInt32 = 3, streamClosed: UInt32 = 5
        public static let frameSizeError: UInt32 = 6, refusedStream: UInt32 = 7, compressionError: UInt32 = 9, enhanceYourCalm: UInt32 = 11
    }

    private var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    private var pending = ByteBuffer()

    /// The connection preface and SETTINGS with `settings` (identifier, value).
    public static func preface(settings: [(UInt16, UInt32)] = []) -> ByteBuffer {
        var buffer = ByteBuffer(string: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        var payload = ByteBuffer()
        for (identifier, value) in settings {
            payload.writeInteger(identifier)
            payload.writeInteger(value)
        }
        var settingsFrame = Self.frame(Kind.settings, flags: 0, stream: 0, payload)
        buffer.writeBuffer(&settingsFrame)
        return buffer
    }

    public static func frame(_ type: UInt8, flags: UInt8, stream: UInt32, _ payload: ByteBuffer = ByteBuffer()) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt32(payload.readableBytes) << 8 | UInt32(type))
        buffer.writeInteger(flags)
        buffer.writeInteger(stream)
        var payload = payload
        buffer.writeBuffer(&payload)
        return buffer
    }

    /// A header block, encoded (HPACK with the dynamic table, as clients do).
    public mutating func block(_ headers: HPACKHeaders) -> ByteBuffer {
        var buffer = ByteBuffer()
        try! encoder.encode(headers: headers, to: &buffer)
        return buffer
    }

    public mutating func headers(_ stream: UInt32, _ headers: HPACKHeaders, endStream: Bool) -> ByteBuffer {
        Self.frame(Kind.headers, flags: 0x4 | (endStream ? 0x1 : 0), stream: stream, block(headers))
    }

    public static func data(_ stream: UInt32, _ bytes: ByteBuffer, endStream: Bool) -> ByteBuffer {
        frame(Kind.data, flags: endStream ? 0x1 : 0, stream: stream, bytes)
    }

    public static func word(_ value: UInt32) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(value)
        return buffer
    }

    public static func ping(_ value: UInt64 = 7) -> ByteBuffer {
        var payload = ByteBuffer()
        payload.writeInteger(value)
        return frame(Kind.ping, flags: 0, stream: 0, payload)
    }

    /// The complete frames in `bytes` (and in what earlier calls left over).
    public mutating func frames(_ bytes: ByteBuffer) -> [Frame] {
        var bytes = bytes
        pending.writeBuffer(&bytes)
        var frames: [Frame] = []
        while pending.readableBytes >= 9 {
            let start = pending.readerIndex
            let length = Int(pending.getInteger(at: start, as: UInt32.self)! >> 8)
            guard pending.readableBytes >= 9 + length else { break }
            let type = pending.getInteger(at: start + 3, as: UInt8.self)!
            let flags = pending.getInteger(at: start + 4, as: UInt8.self)!
            let stream = pending.getInteger(at: start + 5, as: UInt32.self)! & 0x7FFF_FFFF
            var payload = pending.getSlice(at: start + 9, length: length)!
            pending.moveReaderIndex(forwardBy: 9 + length)
            var frame = Frame(type: type, flags: flags, stream: stream, payload: payload)
            if type == Kind.headers { frame.headers = try? decoder.decodeHeaders(from: &payload) }
            frames.append(frame)
        }
        pending.discardReadBytes()
        return frames
    }
}

extension [H2Wire.Frame] {
    /// The (status, body) of one stream's response.
    public func response(_ stream: UInt32) -> (status: String?, body: [UInt8]) {
        var status: String?, body: [UInt8] = []
        for frame in self where frame.stream == stream {
            if frame.type == H2Wire.Kind.headers { status = frame.headers?.first(name: ":status") }
            if frame.type == H2Wire.Kind.data { body += [UInt8](buffer: frame.payload) }
        }
        return (status, body)
    }

    public func of(type: UInt8) -> [H2Wire.Frame] { filter { $0.type == type } }
}
