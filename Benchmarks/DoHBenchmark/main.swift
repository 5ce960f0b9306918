// DoH client benchmark: our resolver against a local DoH server, in the two shapes that matter.
//
//   doh-benchmark latency    URL BOOTSTRAP CA COUNT          distinct names, one in flight, warm connection
//   doh-benchmark throughput URL BOOTSTRAP CA COUNT INFLIGHT distinct names, INFLIGHT concurrent
//
// URL `tls://HOST:PORT#NAME` measures a DoT upstream instead (the certificate checked against NAME).
//
// Names are nNNN.bench.hd.test (a wildcard in the test zone). Prints one JSON object.
// Run by Scripts/bench/bench-doh.sh, which also runs dnsperf against the same server and compares.
import DNSCore
import Foundation
import HTTPDNS

@main
struct DoHBenchmark {
    static func main() async throws {
        let args = CommandLine.arguments
        guard args.count >= 6, let count = Int(args[5]) else {
            FileHandle.standardError.write(Data("usage: doh-benchmark latency|throughput URL BOOTSTRAP CA COUNT [INFLIGHT] [get|post]\n".utf8))
            exit(2)
        }
        let method = UpstreamEndpoint.DoHMethod(rawValue: args.count > 7 ? args[7] : "get") ?? .get
        let upstream: UpstreamEndpoint
        if args[2].hasPrefix("tls://") {
            let parts = args[2].split(separator: "#", maxSplits: 1).map(String.init)
            upstream = try .dot(parts[0], bootstrap: [args[3]], tlsName: parts.count == 2 ? parts[1] : nil)
        } else {
            upstream = try .doh(args[2], bootstrap: [args[3]], method: method)
        }
        let resolver = try HTTPDNSResolver(
            configuration: .init(upstreams: [upstream], caFile: args[4]),
            options: .init(timeout: .seconds(5)))
        // Warm the connection (TLS + HTTP/2) outside the measurement.
        _ = try await resolver.resolve("warm.bench.hd.test", type: .a)
        let clock = ContinuousClock()

        switch args[1] {
        case "latency":
            var samples: [Double] = []
            samples.reserveCapacity(count)
            for index in 0..<count {
                let start = clock.now
                _ = try await resolver.resolve("l\(index).bench.hd.test", type: .a)
                samples.append(seconds(clock.now - start))
            }
            samples.sort()
            let mean = samples.reduce(0, +) / Double(samples.count)
            print(
                #"{"mode":"latency","queries":\#(count),"median_s":\#(samples[samples.count / 2]),"mean_s":\#(mean),"p99_s":\#(samples[samples.count * 99 / 100])}"#
            )
        case "throughput":
            let inFlight = args.count > 6 ? Int(args[6]) ?? 64 : 64
            let start = clock.now
            var failures = 0
            await withTaskGroup(of: Bool.self) { group in
                var next = 0
                func add() {
                    let index = next
                    next += 1
                    group.addTask { (try? await resolver.resolve("t\(index).bench.hd.test", type: .a)) != nil }
                }
                for _ in 0..<min(inFlight, count) { add() }
                for await ok in group {
                    if !ok { failures += 1 }
                    if next < count { add() }
                }
            }
            let elapsed = seconds(clock.now - start)
            print(
                #"{"mode":"throughput","queries":\#(count),"in_flight":\#(inFlight),"seconds":\#(elapsed),"qps":\#(Double(count) / elapsed),"failures":\#(failures)}"#
            )
        default:
            FileHandle.standardError.write(Data("unknown mode \(args[1])\n".utf8))
            exit(2)
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        let (s, atto) = duration.components
        return Double(s) + Double(atto) / 1e18
    }
}
