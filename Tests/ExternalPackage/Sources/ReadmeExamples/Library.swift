// docs/library.md "Resolving": each block as it is printed there, inside a function so that it compiles
// (the names it assumes, like `bigFileURL`, are parameters). Nothing here runs against a network.
import HTTPDNS

func library() async throws -> HTTPDNSResolver {
    let resolver = try HTTPDNSResolver(
        configuration: HTTPDNSConfiguration(upstreams: [
            try .doh("https://dns.example/dns-query", bootstrap: ["192.0.2.53", "2001:db8::53"]),
            ResolverPreset.quad9.endpoint,
        ]),
        options: HTTPDNSOptions(timeout: .seconds(3)))

    let resolution = try await resolver.resolve("api.example.com")  // A and AAAA, IPv6 first
    for address in resolution.addresses { print(address.ip, address.ttl) }
    print(resolution.source, resolution.upstream ?? "-", resolution.expiresAt)
    return resolver
}

func vendor() async throws {
    let alibaba = try UpstreamEndpoint.vendor(
        .alibabaV2(
            accountID: "100000", secret: try VendorSecret(file: "/etc/resolve/alibaba.secret"),
            encryption: .gcm(key: try VendorSecret(environment: "ALIBABA_AES_KEY"))),
        endpoint: "https://203.107.1.1", bootstrap: ["203.107.1.97", "203.107.1.100"], clientIP: "198.51.100.7")
    let vendorResolver = try HTTPDNSResolver(configuration: HTTPDNSConfiguration(upstreams: [alibaba]))
    let batch = await vendorResolver.warm(["a.example.com", "b.example.com", "c.example.com"])  // one batch request
    _ = batch
}

func cache(_ resolver: HTTPDNSResolver) async throws {
    let cached = resolver.cachedResolution(for: "api.example.com")  // no I/O: fresh or stale from memory, or nil
    resolver.prefetch(["api.example.com", "cdn.example.com"])  // warm the cache in the background
    let warmed = await resolver.warm(["api.example.com"])  // ...or wait for it, per-name results
    resolver.removeAll()

    try resolver.loadCache(from: "cache.bin")  // corrupt/foreign file: throws, cache untouched
    let persisting = resolver.persistPeriodically(to: "cache.bin", every: .seconds(300))
    persisting.cancel()  // writes once more, atomically
    _ = (warmed, cached)
}
