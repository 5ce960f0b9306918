import AddressProbing
import DNSCore
import DNSInterceptor
import Foundation
import HTTPDNS
import Synchronization
import TestSupport
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Claims an RTT per address (nil: unreachable), records what it was asked.
final class FixedProber: AddressProbing {
    let rtts: [String: Double?]
    let asked = Mutex<[String]>([])

    init(_ rtts: [String: Double?]) { self.rtts = rtts }

    func probe(host: String, ip: IPAddress, port: Int) async -> AddressProbe {
        asked.withLock { $0.append("\(host) \(ip) \(port)") }
        guard let rtt = rtts[ip.description] ?? nil else { return AddressProbe(ip: ip, port: port, kind: .tcp, outcome: .connectFailed) }
        return AddressProbe(ip: ip, port: port, kind: .tcp, outcome: .ok, connectSeconds: rtt)
    }
}

extension InterceptorSuites {
    /// The client against real nginx origins whose names only the local DoH server knows (the system's
    /// DNS cannot resolve `.test` names here), with certificates from the test CA.
    @Suite(.serialized) struct HTTPDNSClientTests {
        let resolver: HTTPDNSResolver
        let client: HTTPDNSClient

        init() throws {
            (resolver, client) = try InterceptorFixtures.makeClient(timeout: .seconds(10))
        }

        func request(_ path: String, host: String = "origin.hd.test", method: String = "GET", body: Data? = nil) -> URLRequest {
            var request = URLRequest(url: URL(string: TestEnvironment.origin(path, host: host))!)
            request.httpMethod = method
            request.httpBody = body
            return request
        }

        func text(_ data: Data) -> String { String(decoding: data, as: UTF8.self) }

        @Test func sniAndHostCarryTheNameWhileTheSocketGoesToTheResolvedAddress() async throws {
            let exchange = try await client.send(request("/echo"))
            #expect(exchange.response.statusCode == 200)
            #expect(
                text(exchange.body) == "sni=origin.hd.test host=origin.hd.test method=GET proto=HTTP/2.0 cookie=\n",
                "nginx saw the original name in SNI and Host")
            #expect(exchange.remoteAddress == "127.0.0.4")
            #expect(exchange.resolution?.source == .doh || exchange.resolution?.source == .cache)
            #expect(exchange.httpVersion == 20)
        }

        @Test func withARankerTheFastestAddressIsUsedFirst() async throws {
            // nodes.hd.test has two genuine addresses; the (fake) measurements make 127.0.0.10 the
            // fastest and 127.0.0.4 unreachable, so the connection must go to 127.0.0.10.
            let prober = FixedProber(["127.0.0.10": 0.001, "127.0.0.4": nil])
            var options = HTTPDNSClient.Options()
            options.caFile = TestEnvironment.caFile
            options.ranker = AddressRanker(resolver: resolver, prober: prober)
            let ranked = HTTPDNSClient(resolver: resolver, options: options)
            let exchange = try await ranked.send(request("/echo", host: "nodes.hd.test"))
            #expect(exchange.response.statusCode == 200)
            #expect(exchange.remoteAddress == "127.0.0.10")
            #expect(
                Set(prober.asked.withLock { $0 }) == [
                    "nodes.hd.test 127.0.0.4 \(TestEnvironment.originPort)",
                    "nodes.hd.test 127.0.0.10 \(TestEnvironment.originPort)",
                ])
        }

        @Test func postAndPutBodiesArriveWhole() async throws {
            let post = try await client.send(request("/upload", method: "POST", body: Data("name=value&x=1".utf8)))
            #expect(post.response.value(forHTTPHeaderField: "X-Request-Method") == "POST")
            #expect(post.response.value(forHTTPHeaderField: "X-Request-Body") == "name=value&x=1")
            var put = request("/upload", method: "PUT")
            put.httpBodyStream = InputStream(data: Data("streamed body".utf8))
            let putExchange = try await client.send(put)
            #expect(putExchange.response.value(forHTTPHeaderField: "X-Request-Method") == "PUT")
            #expect(putExchange.response.value(forHTTPHeaderField: "X-Request-Body") == "streamed body")
        }

        @Test(arguments: [(301, "GET"), (302, "GET"), (303, "GET"), (307, "POST"), (308, "POST")])
        func redirectsToAnotherHostFollowTheMethodRules(status: Int, expectedMethod: String) async throws {
            let exchange = try await client.send(request("/redirect-\(status)", method: "POST", body: Data("payload".utf8)))
            #expect(exchange.response.url?.host == "origin2.hd.test", "the new host was resolved and reached")
            #expect(exchange.redirects.count == 1)
            #expect(exchange.response.value(forHTTPHeaderField: "X-Request-Method") == expectedMethod)
            let body = exchange.response.value(forHTTPHeaderField: "X-Request-Body") ?? ""
            #expect(body == (expectedMethod == "POST" ? "payload" : ""), "307/308 keep the body; the others drop it")
        }

        @Test func redirectLoopsStopAtTheLimit() async throws {
            await #expect {
                try await client.send(request("/redirect-loop"))
            } throws: { error in
                (error as? URLError)?.code == .httpTooManyRedirects
                    && HTTPDNSClientError.reason(of: error)?.reason == .tooManyRedirects
            }
        }

        @Test func cookiesGoBackToTheOrigin() async throws {
            let storage = HTTPCookieStorage.sharedCookieStorage(forGroupContainerIdentifier: "httpdns-test-\(UUID())")
            var options = client.options
            options.cookieStorage = storage
            let withCookies = HTTPDNSClient(resolver: resolver, options: options)
            _ = try await withCookies.send(request("/set-cookie"))
            let echo = try await withCookies.send(request("/echo"))
            #expect(text(echo.body).contains("cookie=session=s3cr3t"))
            let without = try await client.send(request("/echo"))
            #expect(text(without.body).hasSuffix("cookie=\n"), "no storage, no cookies")
        }

        @Test func aCertificateForAnotherNameFailsWithoutDeliveringTheBody() async throws {
            await #expect {
                try await client.send(request("/", host: "mismatch.hd.test"))
            } throws: { error in
                (error as? URLError)?.code == .serverCertificateUntrusted
                    && HTTPDNSClientError.reason(of: error)?.reason == .nameMismatch
                    && HTTPDNSClientError.reason(of: error)?.message.contains("mismatch.hd.test") == true
            }
        }

        @Test func aCertificateFromAnUnknownCAFailsWithoutDeliveringTheBody() async throws {
            await #expect {
                try await client.send(request("/", host: "untrusted.hd.test"))
            } throws: { error in
                (error as? URLError)?.code == .serverCertificateHasUnknownRoot
                    && HTTPDNSClientError.reason(of: error)?.reason == .untrustedCertificate
            }
        }

        @Test func aRedirectToAMismatchedHostFails() async throws {
            await #expect {
                try await client.send(request("/redirect-to-mismatch"))
            } throws: { ($0 as? URLError)?.code == .serverCertificateUntrusted }
        }

        @Test func unresolvableAndUnreachableHostsHaveTheirOwnErrors() async throws {
            await #expect {
                try await client.send(request("/", host: "absent.hd.test"))
            } throws: { error in
                (error as? URLError)?.code == .cannotFindHost && HTTPDNSClientError.reason(of: error)?.dnsCode == "nxdomain"
            }
            await #expect {
                try await client.send(request("/", host: "dead.hd.test"))
            } throws: { ($0 as? URLError)?.code == .cannotConnectToHost }
        }

        @Test func aRefusedAddressFallsOverToTheNextFamily() async throws {
            // failover.hd.test: AAAA ::1 (nothing listens on the origin port there), A 127.0.0.4.
            let exchange = try await client.send(request("/echo", host: "failover.hd.test"))
            #expect(exchange.response.statusCode == 200)
            #expect(exchange.remoteAddress == "127.0.0.4")
            #expect(exchange.resolution?.addresses.first?.ip.description == "::1", "IPv6 was tried first")
        }

        @Test func anOriginClosingEarlyIsAConnectionLoss() async throws {
            await #expect {
                try await client.send(request("/close"))
            } throws: { ($0 as? URLError)?.code == .networkConnectionLost }
        }

        @Test func headersWithLineBreaksAreRefusedNotSent() async throws {
            var injected = request("/echo")
            // corelibs drops a value with a line break itself, but keeps such a name.
            injected.setValue("2", forHTTPHeaderField: "X-Test: 1\r\nX-Injected")
            await #expect {
                try await client.send(injected)
            } throws: { error in
                (error as? URLError)?.code == .badURL && HTTPDNSClientError.reason(of: error)?.reason == .invalidRequest
            }
        }

        @Test func errorStatusesAreResponsesNotErrors() async throws {
            let exchange = try await client.send(request("/not-found"))
            #expect(exchange.response.statusCode == 404)
            #expect(text(exchange.body) == "no such page\n")
        }

        @Test func aLargeDownloadGoesToAFileInConstantMemory() async throws {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-big-\(UUID()).bin").path
            defer { try? FileManager.default.removeItem(atPath: path) }
            let before = residentBytes()
            let exchange = try await client.download(request("/big"), to: path)
            let grown = residentBytes() - before
            #expect(exchange.response.statusCode == 200)
            #expect(exchange.body.isEmpty)
            let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int
            #expect(size == 64 * 1024 * 1024)
            #expect(grown < 16 * 1024 * 1024, "64 MiB went to disk; the process grew by \(grown) bytes")
        }

        @Test func cancellationStopsATransferAtOnce() async throws {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-slow-\(UUID()).bin").path
            defer { try? FileManager.default.removeItem(atPath: path) }
            let task = Task { try await client.download(request("/slow"), to: path) }
            try await Task.sleep(for: .milliseconds(500))
            let cancelled = ContinuousClock.now
            task.cancel()
            let result = await task.result
            #expect(ContinuousClock.now - cancelled < .seconds(2))
            #expect(throws: URLError.self) { try result.get() }
            #expect((try? result.get()) == nil)
            if case let .failure(error) = result { #expect((error as? URLError)?.code == .cancelled) }
        }

        @Test func theRewriterKeepsTheNameForTLS() async throws {
            let rewritten = try await resolver.rewrite(URL(string: "https://origin.hd.test:18480/echo?x=1")!)
            #expect(rewritten.ipURL.absoluteString == "https://127.0.0.4:18480/echo?x=1")
            #expect(rewritten.hostHeader == "origin.hd.test:18480")
            #expect(rewritten.serverName == "origin.hd.test")
            #expect(rewritten.connectTo == "origin.hd.test:18480:127.0.0.4:18480")
            let dual = try await resolver.rewrite(URL(string: "https://failover.hd.test/")!)
            #expect(dual.ipURL.absoluteString == "https://[::1]/")
            #expect(dual.hostHeader == "failover.hd.test")
            #expect(dual.curlResolve == "failover.hd.test:443:[::1],127.0.0.4")
            await #expect(throws: DNSError.self) { try await resolver.rewrite(URL(string: "https://127.0.0.1/")!) }
            var post = URLRequest(url: URL(string: "https://origin.hd.test:18480/upload")!)
            post.httpMethod = "POST"
            let fromRequest = try await resolver.rewrite(post)
            let applied = fromRequest.applied(to: post)
            #expect(applied.url?.absoluteString == "https://127.0.0.4:18480/upload")
            #expect(applied.value(forHTTPHeaderField: "Host") == "origin.hd.test:18480")
            #expect(applied.httpMethod == "POST")
        }

        // MARK: Streaming, uploads without holding the body, chunked responses

        @Test func aStreamedResponseIsPausedWhileTheReaderIsBehind() async throws {
            let before = residentBytes()
            let stream = try await client.stream(for: request("/big"), bufferLimit: 1 << 20)
            #expect(stream.response.statusCode == 200)
            #expect(stream.remoteAddress == "127.0.0.4")
            // Not reading for a second: at 48 MB/s the origin would have sent ~48 MB by now.
            try await Task.sleep(for: .seconds(1))
            let whilePaused = residentBytes() - before
            var total = 0
            var chunks = 0
            for try await chunk in stream {
                total += chunk.count
                chunks += 1
            }
            let grown = residentBytes() - before
            #expect(total == 64 * 1024 * 1024)
            #expect(chunks > 10)
            #expect(whilePaused < 12 * 1024 * 1024, "the transfer paused at the buffer limit; grew \(whilePaused) bytes")
            #expect(grown < 24 * 1024 * 1024, "64 MiB streamed through; the process grew by \(grown) bytes")
        }

        @Test func cancellingAStreamStopsItsTransfer() async throws {
            let stream = try await client.stream(for: request("/slow"))
            var iterator = stream.makeAsyncIterator()
            _ = try await iterator.next()
            stream.cancel()
            await #expect {
                while try await iterator.next() != nil {}
            } throws: { ($0 as? URLError)?.code == .cancelled }
        }

        @Test func aChunkedResponseOverHTTP1ArrivesWholeAndDecoded() async throws {
            let url = "https://origin.hd.test:\(TestEnvironment.originH1Port)/chunked"
            let expected = try Data(contentsOf: URL(fileURLWithPath: TestEnvironment.root + "/.testenv/nginx/www/lines.txt"))
            let exchange = try await client.send(URLRequest(url: URL(string: url)!))
            #expect(exchange.httpVersion == 11)
            #expect(exchange.response.value(forHTTPHeaderField: "Transfer-Encoding") == "chunked")
            #expect(exchange.response.value(forHTTPHeaderField: "Content-Encoding") == "gzip")
            #expect(exchange.body == expected, "gzip decoded, chunks joined: \(exchange.body.count) of \(expected.count) bytes")
            let streamed = try await client.stream(for: URLRequest(url: URL(string: url)!))
            #expect(try await streamed.collect() == expected)
        }

        @Test(arguments: [TestEnvironment.originPort, TestEnvironment.originH1Port])
        func aFileUploadIsSentFromDiskAndArrivesByteForByte(port: Int) async throws {
            let size = 24 * 1024 * 1024
            let file = try temporaryFile(size: size)
            defer { try? FileManager.default.removeItem(at: file) }
            let before = residentBytes()
            var upload = URLRequest(url: URL(string: "https://origin.hd.test:\(port)/upload-file")!)
            upload.httpMethod = "POST"
            let exchange = try await client.upload(upload, fromFile: file)
            let grown = residentBytes() - before
            #expect(exchange.response.statusCode == 200)
            #expect(exchange.response.value(forHTTPHeaderField: "X-Content-Length") == "\(size)")
            try expectServerKept(exchange, sameAs: file)
            #expect(grown < 16 * 1024 * 1024, "a 24 MiB file went out from disk; the process grew by \(grown) bytes")
        }

        @Test func aStreamBodyOfUnknownLengthIsSentChunkedOverHTTP1() async throws {
            let file = try temporaryFile(size: 3 * 1024 * 1024 + 17)
            defer { try? FileManager.default.removeItem(at: file) }
            var upload = URLRequest(url: URL(string: "https://origin.hd.test:\(TestEnvironment.originH1Port)/upload-file")!)
            upload.httpMethod = "PUT"
            upload.httpBodyStream = InputStream(url: file)
            let exchange = try await client.send(upload)
            #expect(exchange.response.value(forHTTPHeaderField: "X-Transfer-Encoding") == "chunked")
            try expectServerKept(exchange, sameAs: file)
        }

        @Test func aStreamBodyCannotBeResentForA307() async throws {
            var post = request("/redirect-307", method: "POST")
            post.httpBodyStream = InputStream(data: Data("once".utf8))
            await #expect {
                try await client.send(post)
            } throws: { error in
                (error as? URLError)?.code == .requestBodyStreamExhausted && HTTPDNSClientError.reason(of: error)?.reason == .bodySource
            }
        }

        @Test func aFailingBodyStreamFailsTheRequest() async throws {
            var put = request("/upload-file", method: "PUT")
            put.httpBodyStream = InputStream(fileAtPath: "/nonexistent/httpdns-body")
            await #expect {
                try await client.send(put)
            } throws: { error in
                (error as? URLError)?.code == .requestBodyStreamExhausted && HTTPDNSClientError.reason(of: error)?.reason == .bodySource
            }
            // The engine keeps serving.
            #expect(try await client.send(request("/echo")).response.statusCode == 200)
        }

        func temporaryFile(size: Int) throws -> URL {
            let url = FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-upload-\(UUID()).bin")
            var generator = SystemRandomNumberGenerator()
            var bytes = [UInt8](repeating: 0, count: size)
            for index in stride(from: 0, to: size, by: 8) {
                withUnsafeBytes(of: generator.next() as UInt64) { word in
                    for offset in 0..<min(8, size - index) { bytes[index + offset] = word[offset] }
                }
            }
            try Data(bytes).write(to: url)
            return url
        }

        /// Compares the body nginx stored for `/upload-file` with `file`, then removes nginx's copy.
        func expectServerKept(_ exchange: HTTPDNSExchange, sameAs file: URL) throws {
            let stored = try #require(exchange.response.value(forHTTPHeaderField: "X-Request-Body-File"))
            #expect(stored.hasPrefix(TestEnvironment.bodiesDirectory))
            defer { try? FileManager.default.removeItem(atPath: stored) }
            let received = try Data(contentsOf: URL(fileURLWithPath: stored))
            let sent = try Data(contentsOf: file)
            #expect(received.count == sent.count)
            #expect(received == sent, "every byte arrived as sent")
        }

        func residentBytes() -> Int { InterceptorFixtures.residentBytes() }
    }
}
