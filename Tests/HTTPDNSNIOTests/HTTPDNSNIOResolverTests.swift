import AsyncHTTPClient
import DNSCore
import Foundation
import HTTPDNS
import HTTPDNSNIO
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import TestSupport
import Testing

/// A NIO `ClientBootstrap` + NIOSSL client (SNI = the name, certificate checked against the test CA)
/// reaching the nginx origins through HTTPDNSNIOResolver, against BIND's DoH on loopback. The names
/// the lying "system" DNS sends elsewhere (bank.hd.test) reach the genuine origin here.
@Suite(.serialized) struct HTTPDNSNIOResolverTests {
    typealias Env = TestEnvironment
    static let group = MultiThreadedEventLoopGroup.singleton

    func resolver() throws -> HTTPDNSResolver {
        try Env.requireRunning()
        var options = HTTPDNSOptions(timeout: .seconds(3), allowPrivate: true)
        options.minTTL = .zero
        return try HTTPDNSResolver(
            configuration: .init(upstreams: [try .doh(Env.dohA, bootstrap: ["127.0.0.1"])], caFile: Env.caFile), options: options)
    }

    /// Collects a whole HTTP/1.1 response (the request says `Connection: close`).
    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let received = Mutex<[UInt8]>([])
        let done: EventLoopPromise<String>
        init(_ done: EventLoopPromise<String>) { self.done = done }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            received.withLock { $0 += buffer.readableBytesView }
        }
        func channelInactive(context: ChannelHandlerContext) {
            done.succeed(String(decoding: received.withLock { $0 }, as: UTF8.self))
        }
        func errorCaught(context: ChannelHandlerContext, error: Error) {
            done.fail(error)
            context.close(promise: nil)
        }
    }

    /// GET `path` from `host` over TLS through `bootstrap`'s resolver: the response text.
    func get(_ host: String, _ path: String, resolver: HTTPDNSNIOResolver) async throws -> String {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(Env.caFile)
        let context = try NIOSSLContext(configuration: tls)
        let loop = Self.group.next()
        let done = loop.makePromise(of: String.self)
        let connecting = ClientBootstrap(group: loop)
            .resolver(resolver)
            .connectTimeout(.seconds(5))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler = try NIOSSLClientHandler(context: context, serverHostname: host)
                    try channel.pipeline.syncOperations.addHandler(handler)
                    try channel.pipeline.syncOperations.addHandler(Collector(done))
                }
            }
            .connect(host: host, port: Env.originPort)
        let channel: any Channel
        do {
            channel = try await connecting.get()
        } catch {
            done.fail(error)  // a promise must be completed, even when nothing connected
            throw error
        }
        var request = channel.allocator.buffer(capacity: 128)
        request.writeString("GET \(path) HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n\r\n")
        try await channel.writeAndFlush(request)
        return try await done.futureResult.get()
    }

    @Test func aNIOClientReachesTheGenuineOriginsByTheirNames() async throws {
        let resolver = try resolver()
        let nio = HTTPDNSNIOResolver(resolver, on: Self.group.next())
        let echo = try await get("origin.hd.test", "/echo", resolver: nio)
        #expect(echo.hasPrefix("HTTP/1.1 200"), "\(echo)")
        #expect(echo.contains("sni=origin.hd.test host=origin.hd.test"), "\(echo)")
        // The system DNS sends bank.hd.test to an impostor with another CA's certificate: through
        // HTTPDNS the handshake succeeds against the test CA, so this is the genuine origin.
        let bank = try await get("bank.hd.test", "/echo", resolver: nio)
        #expect(bank.contains("sni=bank.hd.test"), "\(bank)")
        // The second time, from the cache without leaving the event loop: on the loop, the future
        // is already complete when it is returned (its callback runs inline).
        let loop = Self.group.next()
        let onLoop = HTTPDNSNIOResolver(resolver, on: loop)
        let inline = try await loop.submit { () -> [String]? in
            let seen = Mutex<[String]?>(nil)
            onLoop.initiateAQuery(host: "bank.hd.test", port: 443).whenSuccess { addresses in
                seen.withLock { $0 = addresses.compactMap(\.ipAddress) }
            }
            return seen.withLock { $0 }
        }.get()
        #expect(inline == ["127.0.0.4"], "a fresh cached answer completes at once")
    }

    @Test func literalsAndFamilies() async throws {
        let nio = HTTPDNSNIOResolver(try resolver(), on: Self.group.next())
        #expect(try await nio.initiateAQuery(host: "127.0.0.4", port: 80).get().map(\.ipAddress) == ["127.0.0.4"])
        #expect(try await nio.initiateAAAAQuery(host: "127.0.0.4", port: 80).get().isEmpty)
        #expect(try await nio.initiateAAAAQuery(host: "[::1]", port: 80).get().map(\.ipAddress) == ["::1"])
        // NODATA is an empty list, so Happy Eyeballs goes on with the other family.
        #expect(try await nio.initiateAQuery(host: "v6only.hd.test", port: 80).get().isEmpty)
        #expect(try await nio.initiateAAAAQuery(host: "v6only.hd.test", port: 443).get().map(\.port) == [443])
    }

    @Test func aNameThatDoesNotExistFailsWithItsDNSError() async throws {
        let nio = HTTPDNSNIOResolver(try resolver(), on: Self.group.next())
        do {
            _ = try await nio.initiateAQuery(host: "does-not-exist.hd.test", port: 443).get()
            Issue.record("resolved a name that does not exist")
        } catch let error as HTTPDNSNIOResolverError {
            #expect(error.error.code == .nxdomain)
        }
        // Through a bootstrap: the connect fails with NIO's error, which carries ours.
        await #expect(throws: (any Error).self) { try await get("does-not-exist.hd.test", "/", resolver: nio) }
    }

    @Test func cancelQueriesEndsLookupsThatAreStillRunning() async throws {
        let slow = ScriptedUpstream("https://slow.test/dns-query", .slow(.seconds(30), ["198.18.0.9"]))
        let resolver = HTTPDNSResolver(options: .init(timeout: .seconds(30)), upstreams: [slow])
        let nio = HTTPDNSNIOResolver(resolver, on: Self.group.next())
        let pending = nio.initiateAQuery(host: "slow.hd.test", port: 443)
        try await Task.sleep(for: .milliseconds(50))
        let start = ContinuousClock.now
        nio.cancelQueries()
        do {
            _ = try await pending.get()
            Issue.record("a cancelled lookup answered")
        } catch let error as HTTPDNSNIOResolverError {
            #expect(error.error.code == .cancelled)
        }
        #expect(ContinuousClock.now - start < .seconds(2))
    }
}

/// The AsyncHTTPClient recipe of docs/interceptor.md, run: AsyncHTTPClient has no resolver hook, only a static
/// `dnsOverride` map; HTTPDNS fills it, and TLS still checks the name.
@Suite(.serialized) struct AsyncHTTPClientRecipeTests {
    typealias Env = TestEnvironment

    @Test func dnsOverrideFromHTTPDNSReachesTheGenuineOrigin() async throws {
        try Env.requireRunning()
        var options = HTTPDNSOptions(timeout: .seconds(3), allowPrivate: true)
        options.minTTL = .zero
        let resolver = try HTTPDNSResolver(
            configuration: .init(upstreams: [try .doh(Env.dohA, bootstrap: ["127.0.0.1"])], caFile: Env.caFile), options: options)

        // The recipe (docs/interceptor.md "SwiftNIO clients"):
        var configuration = HTTPClient.Configuration()
        configuration.dnsOverride = await resolver.addressOverrides(for: ["bank.hd.test"], type: .a)
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(Env.caFile)
        configuration.tlsConfiguration = tls
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)

        #expect(configuration.dnsOverride == ["bank.hd.test": "127.0.0.4"])
        let response = try await client.execute(HTTPClientRequest(url: Env.origin("/echo", host: "bank.hd.test")), timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 4096)
        try await client.shutdown()
        #expect(response.status == .ok)
        #expect(String(buffer: body).hasPrefix("sni=bank.hd.test host=bank.hd.test"), "the genuine origin, by name: \(String(buffer: body))")
    }
}
