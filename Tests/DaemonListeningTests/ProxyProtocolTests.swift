import DaemonListening
import NIOCore
import NIOEmbedded
import Synchronization
import TestSupport
import Testing

/// PROXY protocol v2 (HAProxy's specification §2.2): the parser at its bounds and against every
/// malformation, and the stream handler that reads it from trusted peers only.
@Suite struct ProxyProtocolTests {
    static let client = try! SocketAddress(ipAddress: "198.51.100.7", port: 4242)
    static let client6 = try! SocketAddress(ipAddress: "2001:db8::7", port: 53)
    static let daemon = try! SocketAddress(ipAddress: "127.0.0.1", port: 5300)

    @Test func headersForIPv4AndIPv6NameTheClient() {
        let v4 = ProxyProtocolV2.header(source: Self.client, destination: Self.daemon)
        #expect(v4.count == 28)
        #expect(ProxyProtocolV2.parse(v4) == .header(source: Self.client, length: 28))
        let v6 = ProxyProtocolV2.header(source: Self.client6, destination: try! SocketAddress(ipAddress: "::1", port: 53), datagram: true)
        #expect(ProxyProtocolV2.parse(v6) == .header(source: Self.client6, length: 52))
        // TLVs (dnsdist adds some) are passed over; what follows the header is not read.
        let tlvs = ProxyProtocolV2.header(source: Self.client, destination: Self.daemon, tlvs: [0xe0, 0, 3, 1, 2, 3, 0x04, 0, 0])
        #expect(ProxyProtocolV2.parse(tlvs + [0xde, 0xad]) == .header(source: Self.client, length: 28 + 9))
    }

    /// An IPv4 client written as IPv6 is that IPv4 client (F63-3).
    @Test func anIPv4MappedClientIsItsIPv4Address() {
        let mapped = try! SocketAddress(ipAddress: "::ffff:198.51.100.7", port: 4242)
        let header = ProxyProtocolV2.header(source: mapped, destination: try! SocketAddress(ipAddress: "::1", port: 53))
        #expect(ProxyProtocolV2.parse(header) == .header(source: Self.client, length: 52))
    }

    @Test func localAndUnspecifiedHeadersLeaveThePeersAddress() {
        let local = ProxyProtocolV2.signature + [0x20, 0x00, 0, 0]
        #expect(ProxyProtocolV2.parse(local) == .header(source: nil, length: 16))
        // LOCAL with addresses (HAProxy's health checks send them): still the peer's.
        var localWithAddresses = ProxyProtocolV2.header(source: Self.client, destination: Self.daemon)
        localWithAddresses[12] = 0x20
        #expect(ProxyProtocolV2.parse(localWithAddresses) == .header(source: nil, length: 28))
        // LOCAL's block is discarded unread, whatever its family says (§2.2; F63-5).
        #expect(ProxyProtocolV2.parse(ProxyProtocolV2.signature + [0x20, 0x11, 0, 0]) == .header(source: nil, length: 16))
        #expect(ProxyProtocolV2.parse(ProxyProtocolV2.signature + [0x20, 0x11, 0, 3, 0xe0, 0, 9]) == .header(source: nil, length: 19))
        #expect(ProxyProtocolV2.parse(ProxyProtocolV2.signature + [0x20, 0x11, 0, 3, 0xe0]) == .incomplete)
        let unspecified = ProxyProtocolV2.signature + [0x21, 0x00, 0, 2, 0xaa, 0xbb]
        #expect(ProxyProtocolV2.parse(unspecified) == .header(source: nil, length: 18))
        let unix = ProxyProtocolV2.signature + [0x21, 0x31, 0, 216] + [UInt8](repeating: 0x41, count: 216)
        #expect(ProxyProtocolV2.parse(unix) == .header(source: nil, length: 232))
    }

    @Test func everyMalformationIsRefusedWithItsReason() {
        let good = ProxyProtocolV2.header(source: Self.client, destination: Self.daemon)
        func changed(_ index: Int, _ byte: UInt8) -> [UInt8] {
            var bytes = good
            bytes[index] = byte
            return bytes
        }
        let cases: [([UInt8], String)] = [
            (Array("PROXY TCP4 198.51.100.7 127.0.0.1 4242 53\r\n".utf8), "signature"),  // version 1's text form
            (changed(0, 0x0c), "signature"),
            (changed(12, 0x11), "version 1"),
            (changed(12, 0x22), "command 2"),
            (changed(13, 0x41), "family/protocol"),
            (changed(13, 0x13), "family/protocol"),
            (changed(15, 11), "need 12 bytes"),  // AF_INET with 11 bytes of addresses
            (ProxyProtocolV2.signature + [0x21, 0x21, 0, 35] + [UInt8](repeating: 0, count: 35), "need 36 bytes"),
            (ProxyProtocolV2.signature + [0x21, 0x11, 0, 15] + [UInt8](repeating: 0, count: 12) + [0xe0, 0, 1], "TLVs"),
            (ProxyProtocolV2.signature + [0x21, 0x11, 0, 14] + [UInt8](repeating: 0, count: 12) + [0xe0, 0], "TLVs"),
            (ProxyProtocolV2.signature + [0x21, 0x11, 0x04, 0x01] + [UInt8](repeating: 0, count: 1025), "over 1040"),
            (ProxyProtocolV2.signature + [0x21, 0x11, 0xff, 0xff], "over 1040"),
        ]
        for (bytes, reason) in cases {
            guard case .invalid(let message) = ProxyProtocolV2.parse(bytes) else {
                Issue.record("accepted: \(bytes.prefix(20))")
                continue
            }
            #expect(message.contains(reason), "\(message)")
        }
        // The largest header there may be: 16 + 1,024 bytes.
        let largest =
            ProxyProtocolV2.signature + [0x21, 0x11, 0x04, 0x00] + [UInt8](repeating: 0, count: 12) + [0xe0, 0x03, 0xf1]
            + [UInt8](repeating: 7, count: 1_009)
        #expect(largest.count == ProxyProtocolV2.maxLength)
        #expect(ProxyProtocolV2.parse(largest) == .header(source: try! SocketAddress(ipAddress: "0.0.0.0", port: 0), length: 1_040))
    }

    /// Every prefix of a header is `incomplete` (never invalid, never a header); random bytes never
    /// trap, and a header found in them is never longer than the bytes or the bound.
    @Test func prefixesAreIncompleteAndRandomBytesNeverTrap() {
        let good = ProxyProtocolV2.header(source: Self.client6, destination: Self.client6, tlvs: [1, 0, 2, 0x68, 0x32])
        for cut in 0..<good.count {
            #expect(ProxyProtocolV2.parse(good.prefix(cut)) == .incomplete, "\(cut)")
        }
        var rng = SplitMix64(state: 0x5052_4f58)
        for _ in 0..<20_000 {
            var bytes = (0..<Int.random(in: 0...80, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if Bool.random(using: &rng) { bytes = ProxyProtocolV2.signature + [0x21, UInt8.random(in: 0...0x35, using: &rng)] + bytes }
            if case .header(_, let length) = ProxyProtocolV2.parse(bytes) {
                #expect(length <= bytes.count && length <= ProxyProtocolV2.maxLength)
            }
        }
    }

    final class Rejections: Sendable {
        let reasons = Mutex<[String]>([])
    }

    func channel(peer: SocketAddress, trusted: Bool) throws -> (EmbeddedChannel, ConnectionClient, Rejections) {
        let rejections = Rejections()
        let policy = ProxyProtocolPolicy(trusts: { _ in trusted }, rejected: { reason in rejections.reasons.withLock { $0.append(reason) } })
        let channel = EmbeddedChannel()
        try channel.connect(to: peer).wait()
        let (handler, client) = policy.handler()
        try channel.pipeline.syncOperations.addHandler(handler)
        return (channel, client, rejections)
    }

    @Test func aTrustedPeersHeaderIsReadAcrossReadsAndTheRestPassesOn() throws {
        let (channel, client, rejections) = try channel(peer: Self.daemon, trusted: true)
        let header = ProxyProtocolV2.header(source: Self.client, destination: Self.daemon)
        try channel.writeInbound(ByteBuffer(bytes: header.prefix(5)))
        try channel.writeInbound(ByteBuffer(bytes: header.dropFirst(5).prefix(20)))
        #expect(try channel.readInbound(as: ByteBuffer.self) == nil, "nothing passes before the header is whole")
        #expect(client.proxied == nil)
        try channel.writeInbound(ByteBuffer(bytes: Array(header.dropFirst(25)) + [0, 29, 1, 2]))
        #expect(client.proxied == Self.client)
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(bytes: [0, 29, 1, 2]))
        // Gone from the pipeline: later bytes, even another header, are the protocol's.
        try channel.writeInbound(ByteBuffer(bytes: header))
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(bytes: header))
        #expect(client.proxied == Self.client && rejections.reasons.withLock { $0.isEmpty })
        _ = try channel.finish()
    }

    @Test func anUntrustedPeersHeaderIsNeverRead() throws {
        let (channel, client, rejections) = try channel(peer: Self.daemon, trusted: false)
        let header = ProxyProtocolV2.header(source: Self.client, destination: Self.daemon)
        try channel.writeInbound(ByteBuffer(bytes: header))
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(bytes: header), "passed on as it came: TLS or DNS refuses it")
        #expect(client.proxied == nil && rejections.reasons.withLock { $0.isEmpty })
        _ = try? channel.finish()
    }

    @Test(arguments: [
        (Array("\u{16}\u{3}\u{1}\u{0}\u{a5}\u{1}\u{0}\u{0}".utf8), "signature"),  // a TLS ClientHello: no header
        (ProxyProtocolV2.signature + [0x11, 0x11, 0, 12], "version"),
        (ProxyProtocolV2.signature + [0x21, 0x11, 0xff, 0xff], "over"),
    ])
    func aTrustedPeerWithoutAWholeHeaderIsClosed(bytes: [UInt8], reason: String) throws {
        let (channel, client, rejections) = try channel(peer: Self.daemon, trusted: true)
        try channel.writeInbound(ByteBuffer(bytes: bytes))
        #expect(try channel.readInbound(as: ByteBuffer.self) == nil)
        #expect(!channel.isActive, "closed")
        #expect(client.proxied == nil)
        #expect(rejections.reasons.withLock { $0.count == 1 && $0[0].contains(reason) }, "\(rejections.reasons.withLock { $0 })")
        _ = try? channel.finish()
    }
}
