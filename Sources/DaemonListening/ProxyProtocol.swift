import NIOCore
import Synchronization

/// The PROXY protocol, version 2 (HAProxy's specification, §2.2): the binary header a load balancer
/// (dnsdist's `useProxyProtocol`, HAProxy, a cloud load balancer) puts before a connection's first
/// byte, or before each UDP datagram, to say which client it is relaying.
///
/// Read only from the sources an operator trusts (`trusted_proxies:`); from them it is required,
/// and from anyone else never looked for — so a client cannot name itself another address, and a
/// load balancer that relays a client's bytes without adding its own header cannot be used to
/// pass the client's forged one.
///
/// ```
/// 0D 0A 0D 0A 00 0D 0A 51 55 49 54 0A   signature
/// 21                                    version 2, command PROXY (20: LOCAL)
/// 11                                    AF_INET, STREAM (12: DGRAM; 21/22: AF_INET6)
/// 00 0C                                 length of what follows: addresses, then TLVs
/// src(4) dst(4) src_port(2) dst_port(2) (AF_INET6: 16 16 2 2)
/// ```
public enum ProxyProtocolV2 {
    /// The 12-byte signature every header starts with.
    public static let signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]
    /// The largest header accepted: the 16 fixed bytes and 1,024 of addresses and TLVs (an IPv6
    /// address block is 36; dnsdist adds a few TLVs). A header may say up to 65,535: the rest is
    /// refused rather than buffered.
    public static let maxLength = 16 + 1_024

    /// What the bytes at the start of a stream or datagram are.
    public enum Parsed: Equatable, Sendable {
        /// A whole header of `length` bytes. `source` is the client it relays: nil for LOCAL (the
        /// proxy speaking for itself, as in health checks) or for an address family other than
        /// IPv4 and IPv6 (UNSPEC, UNIX), where the connection's own address stands.
        case header(source: SocketAddress?, length: Int)
        /// A prefix of a header that may still be valid: more bytes are needed.
        case incomplete
        /// Not a version 2 header, or one that breaks the specification; says how.
        case invalid(String)
    }

    /// Reads a header from the start of `bytes`.
    public static func parse(_ bytes: some Collection<UInt8>) -> Parsed {
        var iterator = bytes.makeIterator()
        var head: [UInt8] = []
        head.reserveCapacity(16)
        while head.count < 16, let byte = iterator.next() { head.append(byte) }
        for (index, byte) in head.prefix(12).enumerated() where byte != signature[index] {
            return .invalid("no PROXY protocol v2 signature")
        }
        guard head.count == 16 else { return .incomplete }
        guard head[12] >> 4 == 2 else { return .invalid("PROXY protocol version \(head[12] >> 4), not 2") }
        let command = head[12] & 0x0f
        guard command <= 1 else { return .invalid("PROXY protocol command \(command) (0 LOCAL and 1 PROXY are defined)") }
        let family = head[13] >> 4, transport = head[13] & 0x0f
        guard family <= 3, transport <= 2 else { return .invalid("PROXY protocol address family/protocol byte \(head[13]) is not defined") }
        let length = Int(head[14]) << 8 | Int(head[15])
        guard 16 + length <= maxLength else { return .invalid("a PROXY protocol header of \(16 + length) bytes, over \(maxLength)") }
        let addressLength =
            switch family {
            case 1: 12
            case 2: 36
            case 3: 216
            default: 0
            }
        guard length >= addressLength else {
            return .invalid("PROXY protocol addresses of family \(family) need \(addressLength) bytes, the header has \(length)")
        }
        var rest: [UInt8] = []
        rest.reserveCapacity(length)
        while rest.count < length, let byte = iterator.next() { rest.append(byte) }
        guard rest.count == length else { return .incomplete }
        // UNSPEC's bytes are to be skipped unread (the specification: "the receiver … must ignore
        // address information"); after known addresses come TLVs, which must fit.
        guard family == 0 || tlvsAreWellFormed(rest[addressLength...]) else { return .invalid("PROXY protocol TLVs run past the header") }
        guard command == 1 else { return .header(source: nil, length: 16 + length) }
        let source: SocketAddress?
        switch family {
        case 1:
            let port = Int(rest[8]) << 8 | Int(rest[9])
            source = try? SocketAddress(packedIPAddress: ByteBuffer(bytes: rest[0..<4]), port: port)
        case 2:
            let port = Int(rest[32]) << 8 | Int(rest[33])
            source = try? SocketAddress(packedIPAddress: ByteBuffer(bytes: rest[0..<16]), port: port)
        default:
            source = nil
        }
        return .header(source: source, length: 16 + length)
    }

    /// Whether `tlvs` is a sequence of type, 2-byte length and value that ends exactly at its end.
    static func tlvsAreWellFormed(_ tlvs: ArraySlice<UInt8>) -> Bool {
        var index = tlvs.startIndex
        while index < tlvs.endIndex {
            guard tlvs.endIndex - index >= 3 else { return false }
            let length = Int(tlvs[index + 1]) << 8 | Int(tlvs[index + 2])
            guard length <= tlvs.endIndex - index - 3 else { return false }
            index += 3 + length
        }
        return true
    }

    /// A header for `source` (tests, and the fuzz target's encoder side): command PROXY over
    /// `datagram` or stream, `tlvs` appended as they are.
    public static func header(source: SocketAddress, destination: SocketAddress, datagram: Bool = false, tlvs: [UInt8] = []) -> [UInt8] {
        func bytes(_ address: SocketAddress) -> [UInt8] {
            switch address {
            case .v4(let v4): return withUnsafeBytes(of: v4.address.sin_addr) { Array($0) }
            case .v6(let v6): return withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            default: return []
            }
        }
        let v6 = source.protocol == .inet6
        // Both addresses in the source's family (a destination of the other is written as zeros).
        let destinationBytes = destination.protocol == source.protocol ? bytes(destination) : [UInt8](repeating: 0, count: v6 ? 16 : 4)
        let addresses = bytes(source) + destinationBytes
        let ports = [source.port ?? 0, destination.port ?? 0].flatMap { [UInt8($0 >> 8 & 0xff), UInt8($0 & 0xff)] }
        let body = addresses + ports + tlvs
        return signature + [0x21, (v6 ? 0x20 : 0x10) | (datagram ? 2 : 1), UInt8(body.count >> 8 & 0xff), UInt8(body.count & 0xff)] + body
    }
}

/// The address of the client a connection serves: the peer's, or the one a trusted proxy's header
/// named. Set once by ``ProxyHeaderHandler`` before any request is read, read by the handlers that
/// log, rate-limit and check access.
public final class ConnectionClient: Sendable {
    private let box = Mutex<SocketAddress?>(nil)

    public init() {}

    /// The client the proxy named, or nil when no header was read (use the peer's address).
    public var proxied: SocketAddress? { box.withLock { $0 } }

    func set(_ address: SocketAddress?) { box.withLock { $0 = address } }
}

/// The first handler of a stream listener's pipeline when `trusted_proxies` is set: for a peer
/// `trusts` accepts, reads the PROXY v2 header (required), records the client it names in
/// `client`, passes the bytes after it on and removes itself; a peer that is not trusted is passed
/// through untouched (its bytes go to TLS or DNS as they are, so a header from it fails there). A
/// malformed header, or none, from a trusted peer closes the connection, counted by `rejected`.
/// Holds at most ``ProxyProtocolV2/maxLength`` bytes.
public final class ProxyHeaderHandler: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer

    private let client: ConnectionClient
    private let trusts: @Sendable (SocketAddress) -> Bool
    private let rejected: @Sendable (String) -> Void
    private var buffered: ByteBuffer?
    private var done = false

    public init(client: ConnectionClient, trusts: @escaping @Sendable (SocketAddress) -> Bool, rejected: @escaping @Sendable (String) -> Void) {
        self.client = client
        self.trusts = trusts
        self.rejected = rejected
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        // Untrusted peers never have a header read: their bytes pass through as they are.
        if let peer = context.channel.remoteAddress, !trusts(peer) { done = true }
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !done else {
            context.fireChannelRead(data)
            return
        }
        var incoming = unwrapInboundIn(data)
        if buffered == nil {
            buffered = incoming
        } else {
            buffered!.writeBuffer(&incoming)
        }
        let view = buffered!.readableBytesView
        switch ProxyProtocolV2.parse(view.prefix(ProxyProtocolV2.maxLength)) {
        case .incomplete:
            guard view.count < ProxyProtocolV2.maxLength else { return fail(context, "a PROXY header that does not end") }
        case .invalid(let reason):
            fail(context, reason)
        case .header(let source, let length):
            done = true
            client.set(source)
            var rest = buffered!
            buffered = nil
            rest.moveReaderIndex(forwardBy: length)
            if rest.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(rest)) }
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    public func channelInactive(context: ChannelHandlerContext) {
        if !done, buffered != nil { rejected("the connection closed inside its PROXY header") }
        context.fireChannelInactive()
    }

    private func fail(_ context: ChannelHandlerContext, _ reason: String) {
        done = true
        buffered = nil
        rejected(reason)
        context.close(promise: nil)
    }
}

/// What a listener does with PROXY v2 headers (`trusted_proxies:`): which peers must send one, and
/// where a refused header is counted and logged.
public struct ProxyProtocolPolicy: Sendable {
    /// Whether `peer` is a trusted proxy (its connections and datagrams must start with a header).
    public var trusts: @Sendable (SocketAddress) -> Bool
    /// Called with the reason when a trusted peer's header is malformed or missing.
    public var rejected: @Sendable (String) -> Void

    public init(trusts: @escaping @Sendable (SocketAddress) -> Bool, rejected: @escaping @Sendable (String) -> Void) {
        self.trusts = trusts
        self.rejected = rejected
    }

    /// The first handler of a stream pipeline, and the box it fills.
    public func handler() -> (ProxyHeaderHandler, ConnectionClient) {
        let client = ConnectionClient()
        return (ProxyHeaderHandler(client: client, trusts: trusts, rejected: rejected), client)
    }
}
