import AddressProbing
import DNSCore
import DNSInterceptor
import Foundation
import HTTPDNS
import TestSupport
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension InterceptorSuites {
    /// Probes and fetches share one libcurl engine (its DNS cache and its connections). A probe of a
    /// hijacked address must leave nothing behind that a later fetch of the same name could use.
    @Suite struct PinningIsolationTests {
        @Test func aProbeOfAHijackedAddressDoesNotSteerTheNextFetch() async throws {
            let (_, client) = try InterceptorFixtures.makeClient()
            let impostor = IPAddress(TestEnvironment.impostorAddress)!
            // bank.hd.test: the lying system DNS says 127.0.0.8 (the impostor); the trusted resolver 127.0.0.4.
            let tls = await ConnectionProber(mode: .tls, timeout: .seconds(3), caFile: TestEnvironment.caFile)
                .probe(host: "bank.hd.test", ip: impostor, port: TestEnvironment.originPort)
            #expect(tls.outcome == .untrustedCertificate)
            let tcp = await ConnectionProber(mode: .tcp, timeout: .seconds(3)).probe(
                host: "bank.hd.test", ip: impostor, port: TestEnvironment.originPort)
            #expect(tcp.outcome == .ok)
            let plain = await ConnectionProber(mode: .http(path: "/", marker: TestEnvironment.genuineMarker), timeout: .seconds(3))
                .probe(host: "bank.hd.test", ip: impostor, port: TestEnvironment.originPlainPort)
            #expect(plain.outcome == .markerMissing, "the impostor's plain-HTTP side")

            let secure = try await client.send(URLRequest(url: URL(string: TestEnvironment.origin("/echo", host: "bank.hd.test"))!))
            #expect(secure.remoteAddress == "127.0.0.4", "the trusted address, not the probed one")
            #expect(String(decoding: secure.body, as: UTF8.self).hasPrefix("sni=bank.hd.test host=bank.hd.test"))
            let clear = try await client.send(URLRequest(url: URL(string: "http://bank.hd.test:\(TestEnvironment.originPlainPort)/")!))
            #expect(clear.remoteAddress == "127.0.0.4")
            #expect(clear.response.value(forHTTPHeaderField: "X-Genuine-Origin") == TestEnvironment.genuineMarker)
        }
    }
}
