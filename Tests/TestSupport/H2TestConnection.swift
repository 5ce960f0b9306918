import NIOCore
import NIOEmbedded

/// An HTTP/2 server handler in an embedded pipeline, driven as a client would: the preface sent and
/// the server's opening frames read (kept in ``opening``), then bytes in and frames out (read back by
/// ``H2Wire``). The handler is added by `install` on the channel's loop (handlers are not Sendable).
package final class H2TestConnection {
    package let channel: NIOAsyncTestingChannel
    package var wire = H2Wire()
    /// What the server wrote after the preface: its SETTINGS, then the ACK of the client's.
    package private(set) var opening: [H2Wire.Frame] = []

    package init(install: @escaping @Sendable (any Channel) throws -> Void) async throws {
        channel = try await NIOAsyncTestingChannel { channel in try install(channel) }
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443))
        try await channel.writeInbound(H2Wire.preface())
        opening = try await frames(2)
    }

    package func send(_ bytes: ByteBuffer) async throws { try await channel.writeInbound(bytes) }

    /// What has been flushed so far, one element per write.
    package func writes() async throws -> [ByteBuffer] {
        var writes: [ByteBuffer] = []
        while let bytes = try await channel.readOutbound(as: ByteBuffer.self) { writes.append(bytes) }
        return writes
    }

    /// The frames of every write so far.
    package func written() async throws -> [H2Wire.Frame] {
        var frames: [H2Wire.Frame] = []
        for bytes in try await writes() { frames += wire.frames(bytes) }
        return frames
    }

    /// At least `count` frames, waiting for writes as needed.
    package func frames(_ count: Int) async throws -> [H2Wire.Frame] {
        var frames: [H2Wire.Frame] = []
        while frames.count < count { frames += wire.frames(try await channel.waitForOutboundWrite(as: ByteBuffer.self)) }
        return frames
    }
}
