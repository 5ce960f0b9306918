// Vendor HTTPDNS benchmark against the loopback fakes (Tests/Fakes/vendor_httpdns.py), with BIND's
// DoH in the same run as the peer.
//
//   VendorBenchmark SECRETS CA HTTPS_URL HTTP_URL DOH_URL NAMES LOOKUPS
//
// Per vendor mode: (a) pre-resolving NAMES distinct names (A and AAAA) with the batch API and with one
// request per name: requests the fake served and wall time; (b) LOOKUPS sequential A lookups of
// distinct names on a warm connection: median and p99. The same (b) against BIND's DoH. One JSON
// object per line. Names are bNNN.bench.hd.test (a wildcard in the test zone). Loopback only.
import CurlSupport
import DNSCore
import Foundation
import HTTPDNS

@main
struct VendorBenchmark {
    static func main() async throws {
        let args = CommandLine.arguments
        guard args.count == 8, let names = Int(args[6]), let lookups = Int(args[7]) else {
            FileHandle.standardError.write(Data("usage: VendorBenchmark SECRETS CA HTTPS_URL HTTP_URL DOH_URL NAMES LOOKUPS\n".utf8))
            exit(2)
        }
        let (secrets, ca, https, http, doh) = (args[1], args[2], args[3], args[4], args[5])
        func secret(_ file: String) throws -> VendorSecret { try VendorSecret(file: secrets + "/" + file) }
        let modes: [(String, VendorAPI, String)] = [
            ("alibaba-legacy", .alibabaLegacy(accountID: "100000", secret: try secret("alibaba.secret")), https),
            (
                "alibaba-v2-gcm",
                .alibabaV2(accountID: "100000", secret: try secret("alibaba.secret"), encryption: .gcm(key: try secret("alibaba.aes"))), https
            ),
            ("tencent-des-http", .tencent(accountID: "12345", cipher: .des(key: try secret("tencent.key"))), http),
            ("tencent-token", .tencentToken(token: try secret("tencent.token")), https),
            ("baidu", .baidu(accountID: "123456", secret: try secret("baidu.secret")), https),
        ]
        let statsURL = http + "/stats"
        var run = 0
        func resolver(_ endpoint: UpstreamEndpoint) throws -> HTTPDNSResolver {
            try HTTPDNSResolver(configuration: .init(upstreams: [endpoint], caFile: ca), options: .init(timeout: .seconds(10)))
        }
        for (label, api, url) in modes {
            run += 1
            var row: [String: Any] = ["mode": label]
            for batched in [true, false] {
                let endpoint = try UpstreamEndpoint.vendor(api, endpoint: url, batchSize: batched ? nil : 1)
                let hosts = (0..<names).map { "b\(run)\(batched ? "x" : "y")\($0).bench.hd.test" }
                let before = try await served(statsURL)
                let start = ContinuousClock.now
                let results = await (try resolver(endpoint)).warm(hosts)
                let wall = seconds(ContinuousClock.now - start)
                let failures = results.filter { if case .failure = $0.result { return true } else { return false } }.count
                row[batched ? "batch" : "single"] = ["requests": try await served(statsURL) - before, "wall_s": wall, "failures": failures]
            }
            row["latency"] = try await latency(try resolver(try .vendor(api, endpoint: url)), prefix: "l\(run)", lookups)
            print(try String(decoding: JSONSerialization.data(withJSONObject: row, options: [.sortedKeys]), as: UTF8.self))
        }
        let bind = try resolver(try .doh(doh, bootstrap: ["127.0.0.1"]))
        let row: [String: Any] = ["mode": "bind-doh", "latency": try await latency(bind, prefix: "d", lookups)]
        print(try String(decoding: JSONSerialization.data(withJSONObject: row, options: [.sortedKeys]), as: UTF8.self))
    }

    /// Median and p99 of `count` sequential A lookups of distinct names, after one warming lookup.
    static func latency(_ resolver: HTTPDNSResolver, prefix: String, _ count: Int) async throws -> [String: Double] {
        _ = try await resolver.resolve("\(prefix)-warm.bench.hd.test", type: .a)
        var samples: [Double] = []
        for index in 0..<count {
            let start = ContinuousClock.now
            _ = try await resolver.resolve("\(prefix)\(index).bench.hd.test", type: .a)
            samples.append(seconds(ContinuousClock.now - start))
        }
        samples.sort()
        return ["median_s": samples[samples.count / 2], "p99_s": samples[samples.count * 99 / 100]]
    }

    static func served(_ url: String) async throws -> Int {
        let response = try await CurlEngine.shared.perform(CurlRequest(url: url, protocols: "http"))
        let stats = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Int]
        return stats?["requests"] ?? 0
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
