// docs/library.md "Hijack detection and IP ranking".
import AddressProbing  // ConnectionProber, AddressRanker
import DNSInterceptor
import HTTPDNS
import HijackDetection  // HijackDetector, Verdict
import SystemResolver

func hijackDetection(_ resolver: HTTPDNSResolver) async throws {
    let detector = HijackDetector(
        trusted: TrustedAnswers(resolver),
        system: PlainDNSAnswers(try SystemResolver(servers: ["192.0.2.1"])),
        prober: ConnectionProber(mode: .tls, timeout: .seconds(3)),
        probePort: 443)
    for result in await detector.compare(["api.example.com"], canaryZone: "canary.example.com", within: .seconds(10)) {
        print(result.host, result.verdict.kind, result.verdict.reason, result.probes)
    }

    let ranker = AddressRanker(resolver: resolver)
    let best = try await ranker.rankedAddresses(for: "api.example.com", port: 443)  // healthy only, fastest first
    // (all of them when none is healthy)
    var options = HTTPDNSClient.Options()
    options.ranker = ranker  // the interceptor then connects to the fastest address first
    _ = best
}
