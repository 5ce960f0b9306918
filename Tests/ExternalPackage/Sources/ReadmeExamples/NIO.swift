// docs/interceptor.md "SwiftNIO clients": the example as it is printed there.
import HTTPDNS
import HTTPDNSNIO
import NIOCore
import NIOPosix

func connectThroughHTTPDNS(_ resolver: HTTPDNSResolver) async throws -> any Channel {
    let group = MultiThreadedEventLoopGroup.singleton
    return try await ClientBootstrap(group: group)
        .resolver(HTTPDNSNIOResolver(resolver, on: group.next()))
        .connect(host: "api.example.com", port: 443).get()
}
