import CurlSupport
import DNSCore
import Foundation
import TestSupport
import Testing

@testable import HTTPDNS

/// Every vendor API mode against the loopback fakes of Scripts/env/testenv.sh (Python, written from the
/// wire notes of docs/commercial-apis.md, independently of this client): signatures and expiries checked, requests decrypted,
/// answers from BIND's zone, encrypted back. TLS verified with the test CA.
@Suite(.serialized) struct VendorIntegrationTests {
    typealias Env = TestEnvironment

    static let https = "https://127.0.0.1:\(Env.vendorPort)"
    static let http = "http://127.0.0.1:\(Env.vendorPlainPort)"

    static func secret(_ file: String) -> VendorSecret { try! VendorSecret(file: Env.vendorSecrets + "/" + file) }

    /// One configured vendor upstream, named for the test's arguments.
    struct Mode: CustomTestStringConvertible, Sendable {
        var label: String
        var endpoint: UpstreamEndpoint
        var testDescription: String { label }
    }

    static func mode(
        _ label: String, _ api: VendorAPI, _ url: String = https, bootstrap: [String] = [], tlsName: String? = nil
    ) -> Mode {
        Mode(label: label, endpoint: try! .vendor(api, endpoint: url, bootstrap: bootstrap, tlsName: tlsName))
    }

    static let alibabaLegacySigned = mode("alibaba legacy signed", .alibabaLegacy(accountID: "100000", secret: secret("alibaba.secret")))
    static let alibabaLegacyUnsigned = mode("alibaba legacy unsigned", .alibabaLegacy(accountID: "100001", secret: nil))
    static let alibabaV2Plain = mode("alibaba v2 m=0", .alibabaV2(accountID: "100000", secret: secret("alibaba.secret"), encryption: .none))
    static let alibabaV2CBC = mode(
        "alibaba v2 m=1 cbc", .alibabaV2(accountID: "100000", secret: secret("alibaba.secret"), encryption: .cbc(key: secret("alibaba.aes"))))
    static let alibabaV2GCM = mode(
        "alibaba v2 m=2 gcm", .alibabaV2(accountID: "100000", secret: secret("alibaba.secret"), encryption: .gcm(key: secret("alibaba.aes"))))
    static let alibabaV2CBCOverHTTP = mode(
        "alibaba v2 cbc over http",
        .alibabaV2(accountID: "100000", secret: secret("alibaba.secret"), encryption: .cbc(key: secret("alibaba.aes"))), http)
    static let tencentDES = mode("tencent des over http", .tencent(accountID: "12345", cipher: .des(key: secret("tencent.key"))), http)
    static let tencentAES = mode("tencent aes over http", .tencent(accountID: "12345", cipher: .aes(key: secret("tencent.key"))), http)
    static let tencentToken = mode("tencent token over https", .tencentToken(token: secret("tencent.token")))
    static let baidu = mode("baidu", .baidu(accountID: "123456", secret: secret("baidu.secret")))

    static let all = [
        alibabaLegacySigned, alibabaLegacyUnsigned, alibabaV2Plain, alibabaV2CBC, alibabaV2GCM, alibabaV2CBCOverHTTP,
        tencentDES, tencentAES, tencentToken, baidu,
    ]
    static let encrypted = [alibabaV2CBC, alibabaV2GCM, tencentDES, tencentAES]

    func resolver(_ upstreams: [UpstreamEndpoint], timeout: Duration = .seconds(3)) throws -> HTTPDNSResolver {
        try Env.requireRunning()
        var options = HTTPDNSOptions(timeout: timeout)
        options.minTTL = .zero
        return try HTTPDNSResolver(configuration: .init(upstreams: upstreams, caFile: Env.caFile), options: options)
    }

    func code(_ body: () async throws -> some Any) async -> DNSError.Code? {
        do {
            _ = try await body()
            return nil
        } catch let error as DNSError {
            return error.attempts.count == 1 ? error.attempts[0].code : error.code
        } catch {
            return .internalError
        }
    }

    @Test(arguments: all)
    func resolvesBothFamiliesThroughEveryMode(mode: Mode) async throws {
        let resolver = try resolver([mode.endpoint])
        let resolution = try await resolver.resolve("www.hd.test")
        #expect(Set(resolution.addresses.map(\.ip.description)) == ["2001:2::10", "198.18.0.10"])
        #expect(resolution.addresses.allSatisfy { $0.ttl == 300 })
        #expect(resolution.source == .httpdns)
        #expect(resolution.upstream?.hasPrefix(mode.endpoint.url) == true)
        // Families without records are NODATA, never an error of the API.
        let v6 = try await resolver.resolve("v6only.hd.test")
        #expect(v6.addresses.map(\.ip.description) == ["2001:2::30"])
        #expect(await code { try await resolver.resolve("v6only.hd.test", type: .a) } == .nodata)
        // A CNAME's shorter TTL caps the answer (the fake counts down as a resolver cache would).
        #expect(try await resolver.resolve("alias.hd.test", type: .a).addresses.map(\.ttl) == [60])
    }

    @Test(arguments: all)
    func upstreamNamesTheEndpointAndNeverASecret(mode: Mode) async throws {
        let resolution = try await resolver([mode.endpoint]).resolve("www.hd.test", type: .a)
        let upstream = try #require(resolution.upstream)
        #expect(!upstream.contains("?"), "no query, so no signature, token or key")
        for file in ["alibaba.secret", "alibaba.aes", "tencent.key", "tencent.token", "baidu.secret"] {
            let text = try String(contentsOfFile: Env.vendorSecrets + "/" + file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(!upstream.contains(text))
        }
    }

    @Test(arguments: all)
    func faultsAreSpecificErrorsNeverAnswers(mode: Mode) async throws {
        let resolver = try resolver([mode.endpoint])
        #expect(await code { try await resolver.resolve("ratelimit.vendor.test", type: .a) } == .rateLimited)
        #expect(await code { try await resolver.resolve("othername.vendor.test", type: .a) } == .mismatchedResponse)
        #expect(await code { try await resolver.resolve("badip.vendor.test", type: .a) } == .malformedResponse)
        #expect(await code { try await resolver.resolve("garbage.vendor.test", type: .a) } == .malformedResponse)
        #expect(await code { try await resolver.resolve("html.vendor.test", type: .a) } == .malformedResponse)
        #expect(await code { try await resolver.resolve("huge.vendor.test", type: .a) } == .responseTooLarge)
        let server = await code { try await resolver.resolve("servfail.vendor.test", type: .a) }
        #expect(server == .httpStatus || server == .serverFailure)
    }

    @Test(arguments: all)
    func theClientIPReachesTheServiceAndEmptyBodiesAreReadAsTheAPISays(mode: Mode) async throws {
        var endpoint = mode.endpoint
        endpoint.clientIP = IPAddress("198.18.55.55")
        let resolution = try await resolver([endpoint]).resolve("ecs.vendor.test", type: .a)
        #expect(resolution.addresses.map(\.ip.description) == ["198.18.55.55"], "ECS address as the fake received it")
        // Tencent's documented "no record" is an empty body (plain A, token mode); for the others an
        // empty 200 is not an answer.
        let empty = await code { try await resolver([mode.endpoint]).resolve("empty.vendor.test", type: .a) }
        #expect(empty == (mode.label.hasPrefix("tencent") ? .nodata : .malformedResponse), "\(String(describing: empty))")
    }

    @Test(arguments: encrypted)
    func tamperedCiphertextIsRefused(mode: Mode) async throws {
        #expect(await code { try await resolver([mode.endpoint]).resolve("tampered.vendor.test", type: .a) } == .malformedResponse)
    }

    @Test func wrongCredentialsAreUnauthorizedAndNotFailedOver() async throws {
        // Each refused at 127.0.0.1; the ServiceLevelDeny IP after it is never asked, or the error
        // would be its `refused`.
        let wrong = [
            VendorAPI.alibabaLegacy(accountID: "100000", secret: Self.secret("wrong.secret")),
            .alibabaLegacy(accountID: "100000", secret: nil),
            .alibabaV2(accountID: "100000", secret: Self.secret("wrong.aes"), encryption: .none),
            .alibabaV2(accountID: "999999", secret: Self.secret("alibaba.secret"), encryption: .none),
            .tencent(accountID: "12345", cipher: .des(key: Self.secret("wrong.key"))),
            .tencent(accountID: "99999", cipher: .aes(key: Self.secret("tencent.key"))),
            .tencentToken(token: Self.secret("wrong.secret")),
            .baidu(accountID: "123456", secret: Self.secret("wrong.secret")),
        ]
        let secrets = try ["alibaba.secret", "alibaba.aes", "tencent.key", "tencent.token", "baidu.secret", "wrong.secret"].map {
            try String(contentsOfFile: Env.vendorSecrets + "/" + $0, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        for api in wrong {
            let endpoint = try UpstreamEndpoint.vendor(api, endpoint: Self.https, bootstrap: ["127.0.0.21"])
            do {
                _ = try await resolver([endpoint]).resolve("www.hd.test", type: .a)
                Issue.record("\(api.vendor): answered with wrong credentials")
            } catch let error as DNSError {
                #expect(error.attempts.map(\.code) == [.unauthorized], "\(api.vendor): \(error)")
                for secret in secrets { #expect(!"\(error)".contains(secret), "the error shows a secret") }
            }
        }
    }

    @Test func failsOverAcrossServiceIPs() async throws {
        let secret = Self.secret("alibaba.secret")
        // 127.0.0.21 answers ServiceLevelDeny (Baidu and Tencent: 503); 127.0.0.22 refuses connections.
        let apis: [VendorAPI] = [
            .alibabaV2(accountID: "100000", secret: secret, encryption: .none), .baidu(accountID: "123456", secret: Self.secret("baidu.secret")),
            .tencentToken(token: Self.secret("tencent.token")),
        ]
        for api in apis {
            for first in ["127.0.0.21", "127.0.0.22"] {
                let endpoint = try UpstreamEndpoint.vendor(
                    api, endpoint: "https://\(first):\(Env.vendorPort)", bootstrap: ["127.0.0.1"], tlsName: "vendor.test")
                let resolution = try await resolver([endpoint]).resolve("www.hd.test", type: .a)
                #expect(resolution.addresses.map(\.ip.description) == ["198.18.0.10"], "\(api.vendor) from \(first)")
            }
        }
    }

    @Test func learnsTheServerClockFromAnExpiredSignature() async throws {
        // 127.0.0.23 runs two hours ahead: a signature valid for 10 minutes is already expired there.
        let apis: [VendorAPI] = [
            .alibabaLegacy(accountID: "100000", secret: Self.secret("alibaba.secret")),
            .alibabaV2(accountID: "100000", secret: Self.secret("alibaba.secret"), encryption: .gcm(key: Self.secret("alibaba.aes"))),
            .baidu(accountID: "123456", secret: Self.secret("baidu.secret")),
        ]
        for api in apis {
            let endpoint = try UpstreamEndpoint.vendor(api, endpoint: "https://127.0.0.23:\(Env.vendorPort)")
            let resolver = try resolver([endpoint])
            let first = try await resolver.resolve("www.hd.test", type: .a)
            #expect(first.addresses.map(\.ip.description) == ["198.18.0.10"], "\(api.vendor)")
            let second = try await resolver.resolve("v4only.hd.test", type: .a)
            #expect(second.addresses.map(\.ip.description) == ["198.18.0.40"])
        }
    }

    @Test func certificateIsCheckedAgainstTheTLSName() async throws {
        let api = VendorAPI.tencentToken(token: Self.secret("tencent.token"))
        let good = try UpstreamEndpoint.vendor(api, endpoint: Self.https, tlsName: "vendor.test")
        #expect(try await resolver([good]).resolve("www.hd.test", type: .a).addresses.count == 1)
        let wrong = try UpstreamEndpoint.vendor(api, endpoint: Self.https, tlsName: "doh-a.test")
        #expect(await code { try await resolver([wrong]).resolve("www.hd.test", type: .a) } == .tlsFailed)
    }

    /// Requests the fakes have served that named a `tag-…` domain: this test's own, whatever other
    /// suites send the fakes meanwhile.
    func requestsServed(tag: String) async throws -> Int {
        let response = try await CurlEngine.shared.perform(
            CurlRequest(url: "http://127.0.0.1:\(Env.vendorPlainPort)/stats?tag=\(tag)", protocols: "http"))
        let stats = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Int]
        return try #require(stats?["tagged"])
    }

    /// A fresh tag, and ten names under the test zone's wildcard that carry it.
    static func tagged() -> (tag: String, names: [String]) {
        let tag = "w" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        return (tag, (0..<10).map { "\(tag)-\($0).bench.hd.test" })
    }

    @Test(arguments: [alibabaLegacySigned, alibabaV2GCM, tencentAES, tencentToken, baidu])
    func warmingUsesTheBatchAPI(mode: Mode) async throws {
        var options = HTTPDNSOptions(timeout: .seconds(3), allowPrivate: true)
        options.minTTL = .zero
        let resolver = try HTTPDNSResolver(configuration: .init(upstreams: [mode.endpoint], caFile: Env.caFile), options: options)
        let (tag, names) = Self.tagged()
        let results = await resolver.warm(names)
        let sent = try await requestsServed(tag: tag)
        let batch = mode.endpoint.batchSize
        #expect(sent == (names.count + batch - 1) / batch, "\(sent) requests for \(names.count) names")
        let single = try HTTPDNSResolver(configuration: .init(upstreams: [mode.endpoint], caFile: Env.caFile), options: options)
        for (host, result) in results {
            let batched = try result.get()
            let expected = try await single.resolve(host)
            #expect(Set(batched.addresses.map(\.ip)) == Set(expected.addresses.map(\.ip)), "\(host)")
            #expect(batched.upstream == expected.upstream)
            #expect(batched.source == .httpdns, "fetched by the batch, not an earlier lookup's cache")
        }
    }

    @Test func namesABatchLeftOutAreAskedOneByOne() async throws {
        let resolver = try resolver([Self.alibabaV2Plain.endpoint])
        let (tag, names) = Self.tagged()
        let results = await resolver.warm([names[0], names[1], "\(tag)-othername.vendor.test"], type: .a)
        let sent = try await requestsServed(tag: tag)
        #expect(sent == 2, "one batch, then the name it answered for another name, alone")
        let single = try await resolver.resolve(names[0], type: .a)
        #expect(try results[0].result.get().addresses == single.addresses)
        #expect(try results[1].result.get().addresses.map(\.ip.family) == [.ipv4])
        #expect(throws: DNSError.self) { try results[2].result.get() }
    }

    @Test func plainHTTPWithoutEncryptionIsRefusedUnlessAllowed() throws {
        let api = VendorAPI.alibabaLegacy(accountID: "100001", secret: nil)
        #expect(throws: DNSError.self) { try UpstreamEndpoint.vendor(api, endpoint: Self.http) }
        let allowed = try UpstreamEndpoint.vendor(api, endpoint: Self.http, allowPlainHTTP: true)
        #expect(allowed.isPlainHTTP)
    }
}
