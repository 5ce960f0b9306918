import CCurl
// Interceptor benchmark: sequential small GETs to the local nginx origin, and peak memory of a
// large download.
//
//   interceptor-benchmark gets   DOH_URL CA COUNT ROUNDS   (a) URLSession + HTTPDNSURLProtocol,
//                                                          (b) plain URLSession by IP,
//                                                          (c) one reused libcurl easy handle with CURLOPT_RESOLVE,
//                                                          (d) HTTPDNSClient.data(for:) without URLSession
//   interceptor-benchmark memory DOH_URL CA MODE          MODE: download | stream | delegate
//
// Every request goes to loopback: the origin (127.0.0.4) and the DoH server the script started.
// Prints JSON lines. Run by Scripts/bench/bench-interceptor.sh.
import DNSCore
import DNSInterceptor
import Foundation
import HTTPDNS

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

let plainPort = 18481
let tlsPort = 18480

func makeClient(doh: String, ca: String) throws -> HTTPDNSClient {
    var options = HTTPDNSOptions(timeout: .seconds(5), allowPrivate: true)  // the origin is on loopback
    options.minTTL = .seconds(60)
    let resolver = try HTTPDNSResolver(
        configuration: .init(upstreams: [try .doh(doh, bootstrap: ["127.0.0.1"])], caFile: ca),
        options: options)
    var clientOptions = HTTPDNSClient.Options()
    clientOptions.caFile = ca
    return HTTPDNSClient(resolver: resolver, options: clientOptions)
}

/// One synchronous GET through `session`; the body must be non-empty.
func get(_ session: URLSession, _ url: URL) {
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var ok = false
    session.dataTask(with: url) { data, response, _ in
        ok = (response as? HTTPURLResponse)?.statusCode == 200 && data?.isEmpty == false
        done.signal()
    }.resume()
    done.wait()
    if !ok { fatalError("GET \(url) failed") }
}

/// One GET through HTTPDNSClient without URLSession, waited for from this (non-pool) thread.
func clientGet(_ client: HTTPDNSClient, _ url: URL) {
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var ok = false
    Task.detached {
        ok = (try? await client.data(for: URLRequest(url: url)))?.0.isEmpty == false
        done.signal()
    }
    done.wait()
    if !ok { fatalError("GET \(url) failed") }
}

/// Per-request seconds of `count` calls of `body`, after 50 warm-up calls.
func measure(_ count: Int, _ body: () -> Void) -> [Double] {
    for _ in 0..<50 { body() }
    var samples: [Double] = []
    samples.reserveCapacity(count)
    let clock = ContinuousClock()
    for _ in 0..<count {
        let start = clock.now
        body()
        let (seconds, attoseconds) = (clock.now - start).components
        samples.append(Double(seconds) + Double(attoseconds) / 1e18)
    }
    return samples
}

/// A reused libcurl easy handle with the name pinned to the address: the floor for any HTTP stack here.
final class EasyHandle {
    let handle: UnsafeMutableRawPointer
    var list: UnsafeMutablePointer<curl_slist>?

    init(url: String, resolve: String, ca: String?) {
        curl_global_init(Int(CURL_GLOBAL_ALL))
        handle = curl_easy_init()
        list = curl_slist_append(nil, resolve)
        _ = httpdns_easy_setopt_string(handle, CURLOPT_URL, url)
        _ = httpdns_easy_setopt_slist(handle, CURLOPT_RESOLVE, list)
        _ = httpdns_easy_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        _ = httpdns_easy_setopt_string(handle, CURLOPT_PROXY, "")
        if let ca { _ = httpdns_easy_setopt_string(handle, CURLOPT_CAINFO, ca) }
        _ = httpdns_easy_setopt_write_callback(handle, CURLOPT_WRITEFUNCTION, { _, size, count, _ in size * count })
    }

    func get() {
        let code = curl_easy_perform(handle)
        var status = 0
        _ = httpdns_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        if code != CURLE_OK || status != 200 { fatalError("easy handle GET failed: \(code.rawValue) \(status)") }
    }
}

func summary(_ name: String, _ samples: [Double]) -> String {
    let sorted = samples.sorted()
    let mean = samples.reduce(0, +) / Double(samples.count)
    return
        #"{"mode":"gets","stack":"\#(name)","requests":\#(samples.count),"mean_s":\#(mean),"p50_s":\#(sorted[sorted.count / 2]),"p99_s":\#(sorted[sorted.count * 99 / 100])}"#
}

func peakResident() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
        let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "")
    else { return 0 }
    return kilobytes * 1024
}

final class Discard: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    let done = DispatchSemaphore(value: 0)
    var bytes = 0
    var failure: (any Error)?
    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) { bytes += data.count }
    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        failure = error
        done.signal()
    }
}

let args = CommandLine.arguments
guard args.count >= 5 else {
    FileHandle.standardError.write(Data("usage: interceptor-benchmark gets DOH_URL CA COUNT [ROUNDS] | memory DOH_URL CA MODE\n".utf8))
    exit(2)
}
let client = try makeClient(doh: args[2], ca: args[3])
switch args[1] {
case "gets":
    let count = Int(args[4]) ?? 1000
    let rounds = args.count > 5 ? Int(args[5]) ?? 3 : 3
    let intercepted = URLSessionConfiguration.ephemeral
    intercepted.useHTTPDNS(client)
    let interceptedSession = URLSession(configuration: intercepted)
    let plainSession = URLSession(configuration: .ephemeral)
    let byName = URL(string: "http://origin.hd.test:\(plainPort)/ok")!
    let byIP = URL(string: "http://127.0.0.4:\(plainPort)/ok")!
    let tlsByName = URL(string: "https://origin.hd.test:\(tlsPort)/echo")!
    let easy = EasyHandle(url: byName.absoluteString, resolve: "origin.hd.test:\(plainPort):127.0.0.4", ca: nil)
    let easyTLS = EasyHandle(url: tlsByName.absoluteString, resolve: "origin.hd.test:\(tlsPort):127.0.0.4", ca: args[3])
    let stacks: [(String, () -> Void)] = [
        ("a_urlsession_httpdns_http", { get(interceptedSession, byName) }),
        ("b_urlsession_plain_http_by_ip", { get(plainSession, byIP) }),
        ("c_curl_easy_resolve_http", { easy.get() }),
        ("d_httpdns_client_http", { clientGet(client, byName) }),
        ("a_urlsession_httpdns_https", { get(interceptedSession, tlsByName) }),
        ("c_curl_easy_resolve_https", { easyTLS.get() }),
    ]
    // Rounds in rotating order; every round's figures are printed, the script takes medians.
    for round in 0..<rounds {
        for offset in 0..<stacks.count {
            let (name, body) = stacks[(offset + round) % stacks.count]
            print(summary(name, measure(count, body)))
            fflush(nil)
        }
    }
case "memory":
    let url = URL(string: "https://origin.hd.test:\(tlsPort)/big")!
    _ = try await client.resolver.resolve("origin.hd.test")
    let before = peakResident()
    var received = 0
    switch args[4] {
    case "download":
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-bench-\(UUID()).bin").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        _ = try await client.download(URLRequest(url: url), to: path)
        received = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
    case "stream":
        for try await chunk in try await client.stream(for: URLRequest(url: url)) { received += chunk.count }
    case "delegate":
        let configuration = URLSessionConfiguration.ephemeral
        configuration.useHTTPDNS(client)
        let delegate = Discard()
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        session.dataTask(with: url).resume()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                delegate.done.wait()
                done.resume()
            }
        }
        if let failure = delegate.failure { fatalError("download failed: \(failure)") }
        received = delegate.bytes
    default:
        FileHandle.standardError.write(Data("unknown memory mode \(args[4])\n".utf8))
        exit(2)
    }
    let after = peakResident()
    print(
        #"{"mode":"memory","how":"\#(args[4])","bytes":\#(received),"peak_rss_before":\#(before),"peak_rss_after":\#(after),"peak_growth":\#(after - before)}"#
    )
default:
    FileHandle.standardError.write(Data("unknown mode \(args[1])\n".utf8))
    exit(2)
}
