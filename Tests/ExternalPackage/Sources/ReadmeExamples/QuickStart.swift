// README "Quick start: the library", and docs/dnssec.md "From the library": each block as printed.
import DNSCore
import DNSInterceptor
import DNSSEC
import Foundation
import HTTPDNS

#if canImport(FoundationNetworking)
import FoundationNetworking  // URLRequest on Linux
#endif

func quickStart() async throws {
    let resolver = try HTTPDNSResolver(
        configuration: HTTPDNSConfiguration(upstreams: [
            try .doh("https://dns.example/dns-query", bootstrap: ["192.0.2.53", "2001:db8::53"]),
            ResolverPreset.quad9.endpoint,
        ]),
        options: HTTPDNSOptions(timeout: .seconds(3)))

    let resolution = try await resolver.resolve("api.example.com")  // A and AAAA, IPv6 first
    for address in resolution.addresses { print(address.ip, address.ttl) }

    let client = HTTPDNSClient(resolver: resolver)
    let (data, response) = try await client.data(for: URLRequest(url: URL(string: "https://api.example.com/v1")!))
    print(data.count, response)
}

func dnssecFromTheLibrary() async throws {
    let anchors = try TrustAnchors(presentation: String(contentsOfFile: "anchors.txt", encoding: .utf8))
    let validating = try HTTPDNSResolver(
        configuration: HTTPDNSConfiguration(
            upstreams: [try .doh("https://dns.example/dns-query", bootstrap: ["192.0.2.53"])],
            dnssec: DNSSECSettings(policy: .require, anchors: anchors)))
    let proven = try await validating.resolve("www.example.com")  // a bogus answer throws dnssec_bogus
    print(proven.dnssec?.name ?? "-", proven.dnssec?.reason ?? "")  // "secure", "insecure", …
}
