import DNSCore
import DaemonHTTP
import DaemonListening
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ResolverConfig
import ServiceLifecycle

/// The addresses HTTPDNS chose, handed to NIO's Happy Eyeballs (RFC 8305) as a resolver's answer.
final class FixedAddresses: Resolver, Sendable {
    private let v4: [SocketAddress]
    private let v6: [SocketAddress]
    private let loop: any EventLoop

    init(_ addresses: [IPAddress], on loop: any EventLoop) {
        let socketAddresses = addresses.compactMap { try? SocketAddress(ipAddress: $0.description, port: 0) }
        v4 = socketAddresses.filter { $0.protocol == .inet }
        v6 = socketAddresses.filter { $0.protocol == .inet6 }
        self.loop = loop
    }

    func initiateAQuery(host: String, port: Int) -> EventLoopFuture<[SocketAddress]> {
        loop.makeSucceededFuture(v4.compactMap { try? Self.with(port: port, $0) })
    }

    func initiateAAAAQuery(host: String, port: Int) -> EventLoopFuture<[SocketAddress]> {
        loop.makeSucceededFuture(v6.compactMap { try? Self.with(port: port, $0) })
    }

    func cancelQueries() {}

    private static func with(port: Int, _ address: SocketAddress) throws -> SocketAddress {
        try SocketAddress(ipAddress: address.ipAddress ?? "", port: port)
    }
}
