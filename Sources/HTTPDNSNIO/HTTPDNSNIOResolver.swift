import DNSCore
import HTTPDNS
import NIOCore
import NIOPosix
import Synchronization

/// A SwiftNIO `Resolver` that answers through HTTPDNS: give it to `ClientBootstrap.resolver(_:)` and
/// every connection the bootstrap makes goes to trusted addresses, never to what the system's DNS says.
///
/// ```swift
/// let bootstrap = ClientBootstrap(group: group)
///     .resolver(HTTPDNSNIOResolver(resolver, on: group.next()))
/// let channel = try await bootstrap.connect(host: "api.example.com", port: 443).get()
/// ```
///
/// - A and AAAA come from the resolver's engine: a fresh cached answer without leaving the event loop,
///   otherwise one lookup per family shared with every other caller (single flight), served stale
///   when the resolver's options allow.
/// - IP literals come back as they are.
/// - NODATA is an empty list (Happy Eyeballs goes on with the other family); every other failure is a
///   ``HTTPDNSNIOResolverError`` carrying the `DNSError`.
/// - `cancelQueries()` cancels the lookups still running; their futures fail with `cancelled`.
///
/// NIO asks a resolver once per connection attempt: make one per `connect` (they are cheap), or share
/// one; `cancelQueries()` then cancels every lookup it has running.
public final class HTTPDNSNIOResolver: Resolver, Sendable {
    private let resolver: any HostResolving
    private let cachedResolver: HTTPDNSResolver?
    private let eventLoop: any EventLoop
    private let running = Mutex<[Int: Task<Void, Never>]>([:])
    private let nextID = Atomic<Int>(0)

    /// - Parameters:
    ///   - resolver: the HTTPDNS resolver (its cache, upstreams and policy).
    ///   - eventLoop: where the futures are completed (NIO hops to the connection's loop anyway).
    public init(_ resolver: HTTPDNSResolver, on eventLoop: any EventLoop) {
        self.resolver = resolver
        self.cachedResolver = resolver
        self.eventLoop = eventLoop
    }

    /// Over any ``/DNSCore/HostResolving`` (a test's fake, or a wrapper that adds policy).
    public init(resolving resolver: any HostResolving, on eventLoop: any EventLoop) {
        self.resolver = resolver
        self.cachedResolver = resolver as? HTTPDNSResolver
        self.eventLoop = eventLoop
    }

    public func initiateAQuery(host: String, port: Int) -> EventLoopFuture<[SocketAddress]> {
        query(host, port: port, type: .a)
    }

    public func initiateAAAAQuery(host: String, port: Int) -> EventLoopFuture<[SocketAddress]> {
        query(host, port: port, type: .aaaa)
    }

    public func cancelQueries() {
        let tasks = running.withLock { running in
            defer { running.removeAll() }
            return Array(running.values)
        }
        for task in tasks { task.cancel() }
    }

    private func query(_ host: String, port: Int, type: AddressQuery) -> EventLoopFuture<[SocketAddress]> {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if let literal = IPAddress(bare) {
            let wanted: IPAddress.Family = type == .a ? .ipv4 : .ipv6
            return eventLoop.makeCompletedFuture { literal.family == wanted ? [try Self.socketAddress(literal, port: port)] : [] }
        }
        if let cached = cachedResolver?.resolveWithoutWaiting(bare, type: type) {
            return eventLoop.makeCompletedFuture { try Self.socketAddresses(cached, port: port) }
        }
        let promise = eventLoop.makePromise(of: [SocketAddress].self)
        let id = nextID.add(1, ordering: .relaxed).newValue
        let resolver = self.resolver
        // Made under the lock, so the task's own removal (which takes it too) always comes after.
        running.withLock { running in
            running[id] = Task {
                defer { _ = self.running.withLock { $0.removeValue(forKey: id) } }
                do {
                    let resolution = try await resolver.resolve(bare, type: type)
                    promise.completeWith(Result { try Self.socketAddresses(resolution, port: port) })
                } catch let error as DNSError {
                    if error.code == .nodata {
                        promise.succeed([])
                    } else {
                        promise.fail(HTTPDNSNIOResolverError(host: bare, type: type, error: error))
                    }
                } catch {
                    promise.fail(HTTPDNSNIOResolverError(host: bare, type: type, error: DNSError(.internalError, "\(error)")))
                }
            }
        }
        return promise.futureResult
    }

    private static func socketAddresses(_ resolution: Resolution, port: Int) throws -> [SocketAddress] {
        try resolution.addresses.map { try socketAddress($0.ip, port: port) }
    }

    private static func socketAddress(_ ip: IPAddress, port: Int) throws -> SocketAddress {
        try SocketAddress(ipAddress: ip.description, port: port)
    }
}

/// A lookup of ``HTTPDNSNIOResolver`` failed; `error` is the HTTPDNS error (its `code` is the contract's).
public struct HTTPDNSNIOResolverError: Error, Sendable, CustomStringConvertible {
    public var host: String
    public var type: AddressQuery
    public var error: DNSError

    public var description: String { "\(host) \(type.rawValue.uppercased()): \(error)" }
}
