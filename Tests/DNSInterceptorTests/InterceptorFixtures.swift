import DNSCore
import DNSInterceptor
import Foundation
import HTTPDNS
import TestSupport
import Testing

/// Both interceptor suites, one test at a time: they measure the process's memory and share the
/// process-wide URLProtocol installation.
@Suite(.serialized) enum InterceptorSuites {}

/// The resolver and client both interceptor suites use: the local DoH server, the test CA, and
/// loopback answers allowed (the origins live on 127.0.0.4-6).
enum InterceptorFixtures {
    static func makeClient(timeout: Duration = .seconds(60)) throws -> (HTTPDNSResolver, HTTPDNSClient) {
        try TestEnvironment.requireRunning()
        var options = HTTPDNSOptions(timeout: .seconds(3), allowPrivate: true)
        options.minTTL = .zero
        let resolver = try HTTPDNSResolver(
            configuration: .init(
                upstreams: [try .doh(TestEnvironment.dohA, bootstrap: ["127.0.0.1"])],
                caFile: TestEnvironment.caFile),
            options: options)
        var clientOptions = HTTPDNSClient.Options()
        clientOptions.caFile = TestEnvironment.caFile
        clientOptions.timeout = timeout
        return (resolver, HTTPDNSClient(resolver: resolver, options: clientOptions))
    }

    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        return (Int(text.split(separator: " ")[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
