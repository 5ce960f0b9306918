// DNSSEC validation benchmarks against BIND (doh-a) on loopback, the tree under sig.test:
//
//   dnssec-benchmark cold N ANCHORS        N fresh resolvers: one validated lookup of www.rsa.sig.test
//                                          with nothing cached (the DoH connection already up), and
//                                          the same lookup unvalidated, ms each
//   dnssec-benchmark warm N ANCHORS        one resolver, chain cached: N distinct wildcard names
//                                          (x<i>.wild.sig.test, each a cache miss and an upstream
//                                          round trip), validated and unvalidated, ms each
//   dnssec-benchmark hits SECONDS ANCHORS  the cache-hit path, validation report vs off, ns/lookup,
//                                          alternating 1-second slices
//
// Output: one JSON object per line.
import DNSCore
import DNSSEC
import Foundation
import HTTPDNS

let arguments = CommandLine.arguments
guard arguments.count == 4, let count = Double(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: dnssec-benchmark cold|warm N ANCHORS | hits SECONDS ANCHORS\n".utf8))
    exit(2)
}
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
let anchors = try TrustAnchors(presentation: String(contentsOfFile: arguments[3], encoding: .utf8))
let dohPort =
    (try? String(contentsOfFile: root + "/Scripts/env/ports.env", encoding: .utf8))?
    .split(separator: "\n").first { $0.hasPrefix("DOH_PORT=") }.map { String($0.dropFirst("DOH_PORT=".count)) } ?? "18443"

func resolver(_ policy: DNSSECPolicy) throws -> HTTPDNSResolver {
    try HTTPDNSResolver(
        configuration: .init(
            upstreams: [try UpstreamEndpoint.doh("https://doh-a.test:\(dohPort)/dns-query", bootstrap: ["127.0.0.1"])],
            caFile: root + "/.testenv/ca/ca.pem", dnssec: DNSSECSettings(policy: policy, anchors: anchors)),
        options: HTTPDNSOptions(timeout: .seconds(5), allowPrivate: true))
}

func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
}

func summary(_ label: String, _ samples: [Double], extra: [String: Any] = [:]) {
    let sorted = samples.sorted()
    var object: [String: Any] = [
        "what": label, "n": sorted.count, "min_ms": sorted.first ?? 0, "median_ms": sorted[sorted.count / 2], "max_ms": sorted.last ?? 0,
    ]
    object.merge(extra) { a, _ in a }
    let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
}

func timed(_ operation: () async throws -> Resolution) async throws -> (Double, Resolution) {
    let start = ContinuousClock.now
    let resolution = try await operation()
    return (milliseconds(ContinuousClock.now - start), resolution)
}

switch arguments[1] {
case "cold":
    var validated: [Double] = []
    var plain: [Double] = []
    for _ in 0..<Int(count) {
        for policy in [DNSSECPolicy.report, .off] {
            let fresh = try resolver(policy)
            _ = try await fresh.resolve("www.hd.test", type: .a)  // the DoH connection, outside the timing
            let (ms, resolution) = try await timed { try await fresh.resolve("www.rsa.sig.test", type: .a) }
            if policy == .report {
                guard resolution.dnssec == .secure else { fatalError("not secure: \(String(describing: resolution.dnssec))") }
                validated.append(ms)
            } else {
                plain.append(ms)
            }
        }
    }
    summary("ours cold, chain not cached (validated)", validated)
    summary("ours cold, unvalidated", plain)
case "warm":
    var samples: [DNSSECPolicy: [Double]] = [:]
    for policy in [DNSSECPolicy.report, .off] {
        let warm = try resolver(policy)
        _ = try await warm.resolve("www.rsa.sig.test", type: .a)
        _ = try await warm.resolve("www.sig.test", type: .a)
        for index in 0..<Int(count) {
            let (ms, resolution) = try await timed { try await warm.resolve("x\(index).\(policy.rawValue).wild.sig.test", type: .a) }
            if policy == .report, resolution.dnssec != .secure { fatalError("not secure: \(String(describing: resolution.dnssec))") }
            samples[policy, default: []].append(ms)
        }
    }
    summary("ours chain cached, new name (validated)", samples[.report] ?? [])
    summary("ours new name, unvalidated", samples[.off] ?? [])
case "hits":
    let on = try resolver(.report)
    let off = try resolver(.off)
    _ = try await on.resolve("www.sig.test", type: .a)
    _ = try await off.resolve("www.sig.test", type: .a)
    var perLookup: [DNSSECPolicy: [Double]] = [:]
    for slice in 0..<Int(count) * 2 {
        let (policy, subject) = slice % 2 == 0 ? (DNSSECPolicy.off, off) : (.report, on)
        // Off the main actor, so that each await is not a hop back to it.
        let nanoseconds = try await Task.detached {
            let end = ContinuousClock.now + .seconds(0.5)
            var lookups = 0
            let start = ContinuousClock.now
            while ContinuousClock.now < end {
                for _ in 0..<100 { _ = try await subject.resolve("www.sig.test", type: .a) }
                lookups += 100
            }
            return milliseconds(ContinuousClock.now - start) * 1e6 / Double(lookups)
        }.value
        perLookup[policy, default: []].append(nanoseconds)
    }
    for policy in [DNSSECPolicy.off, .report] {
        let sorted = (perLookup[policy] ?? []).sorted()
        let object: [String: Any] = [
            "what": "cache hit, dnssec \(policy.rawValue)", "n": sorted.count, "min_ns": sorted.first ?? 0, "median_ns": sorted[sorted.count / 2],
            "max_ns": sorted.last ?? 0,
        ]
        print(String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self))
    }
default:
    FileHandle.standardError.write(Data("unknown mode \(arguments[1])\n".utf8))
    exit(2)
}
