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
    public static let signature = ProxyHeaderWire.signature
    /// The largest header accepted (``ProxyHeaderWire/maxLength``).
    public static let maxLength = ProxyHeaderWire.maxLength

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

    /// Reads a header from the start of `bytes` (``ProxyHeaderWire/parse(_:)``).
    public static func parse(_ bytes: some Collection<UInt8>) -> Parsed {
        switch ProxyHeaderWire.parse(bytes) {
        case .incomplete: return .incomplete
        case .invalid(let reason): return .invalid(reason)
        case .header(let source, let length):
            guard let source else { return .header(source: nil, length: length) }
            return .header(source: try? SocketAddress(packedIPAddress: ByteBuffer(bytes: source.address), port: source.port), length: length)
        }
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
        if !done, buffered != nil {
            rejected("the connection closed inside its PROXY header (from \(context.channel.remoteAddress?.endpointText ?? "?"))")
        }
        context.fireChannelInactive()
    }

    private func fail(_ context: ChannelHandlerContext, _ reason: String) {
        done = true
        buffered = nil
        rejected("\(reason) (from \(context.channel.remoteAddress?.endpointText ?? "?") to \(context.channel.localAddress?.endpointText ?? "?"))")
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

    /// Adds `policy`'s header handler to `channel`'s pipeline (where the header comes: before TLS)
    /// and returns the box its client goes in; nil, adding nothing, without a policy.
    public static func install(_ policy: ProxyProtocolPolicy?, on channel: any Channel) throws -> ConnectionClient? {
        guard let policy else { return nil }
        let (handler, client) = policy.handler()
        try channel.pipeline.syncOperations.addHandler(handler)
        return client
    }
}

extension SocketAddress {
    /// `192.0.2.1:53` or `[2001:db8::1]:53`, as logs write an endpoint.
    public var endpointText: String {
        guard let ip = ipAddress else { return "\(self)" }
        let host = self.protocol == .inet6 ? "[\(ip)]" : ip
        return port.map { "\(host):\($0)" } ?? host
    }
}
