import DNSCore
import Foundation
import HTTPDNS
import Synchronization
import TestSupport
import Testing

@testable import DNSInterceptor

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension InterceptorSuites {
    /// URLSession through HTTPDNSURLProtocol against the real nginx origins. The system's DNS cannot
    /// resolve `.test` names here, so every success proves the request went through HTTPDNS. Each
    /// corelibs quirk listed in ARCHITECTURE.md has a test showing what the protocol does about it.
    @Suite(.serialized) struct URLProtocolTests {
        let resolver: HTTPDNSResolver
        let client: HTTPDNSClient
        let session: URLSession

        init() throws {
            (resolver, client) = try InterceptorFixtures.makeClient()
            session = URLSession(configuration: Self.configuration(client))
        }

        static func configuration(_ client: HTTPDNSClient, policy: HTTPDNSInterceptionPolicy = .init()) -> URLSessionConfiguration {
            let configuration = URLSessionConfiguration.ephemeral
            configuration.useHTTPDNS(client, policy: policy)
            return configuration
        }

        func url(_ path: String, host: String = "origin.hd.test", port: Int = TestEnvironment.originPort) -> URL {
            URL(string: "https://\(host):\(port)\(path)")!
        }

        var linesFile: Data {
            get throws { try Data(contentsOf: URL(fileURLWithPath: TestEnvironment.root + "/.testenv/nginx/www/lines.txt")) }
        }

        // MARK: Setup and policy

        @Test func useHTTPDNSPutsTheClassFirstAndDropsStoredCredentials() {
            let configuration = Self.configuration(client)
            #expect(configuration.protocolClasses?.first == HTTPDNSURLProtocol.self)
            #expect(configuration.protocolClasses?.filter { $0 == HTTPDNSURLProtocol.self }.count == 1)
            #expect(configuration.urlCredentialStorage == nil)
            configuration.useHTTPDNS(client)
            #expect(configuration.protocolClasses?.filter { $0 == HTTPDNSURLProtocol.self }.count == 1, "not listed twice")
        }

        @Test func thePolicyNeverTakesAddressesLocalhostOrTheResolversOwnEndpoints() {
            let policy = HTTPDNSInterceptionPolicy(allow: ["hd.test", "*.api.test"], deny: ["private.hd.test"])
            let resolverHosts: Set = ["doh-a.test"]
            func takes(_ url: String) -> Bool { policy.intercepts(URL(string: url)!, resolverHosts: resolverHosts) }
            #expect(takes("https://origin.hd.test/x"))
            #expect(takes("http://hd.test/"))
            #expect(takes("https://ORIGIN.HD.TEST./"), "case and a trailing dot do not matter")
            #expect(takes("https://v1.api.test/"))
            #expect(!takes("https://api.test/"), "*.api.test: names under it only")
            #expect(!takes("https://private.hd.test/"), "deny wins")
            #expect(!takes("https://a.private.hd.test/"))
            #expect(!takes("https://other.test/"), "not on the allow list")
            #expect(!takes("https://127.0.0.1/"))
            #expect(!takes("https://[::1]:8443/"))
            #expect(!takes("ftp://origin.hd.test/"))
            #expect(!HTTPDNSInterceptionPolicy().intercepts(URL(string: "https://localhost/")!))
            #expect(!HTTPDNSInterceptionPolicy().intercepts(URL(string: "https://app.localhost/")!))
            #expect(!HTTPDNSInterceptionPolicy().intercepts(URL(string: "https://doh-a.test/dns-query")!, resolverHosts: resolverHosts))
            #expect(HTTPDNSInterceptionPolicy().intercepts(URL(string: "https://anything.test/")!), "empty allow list: every host")
            // The installed class applies the resolver's endpoints by itself.
            _ = Self.configuration(client)
            #expect(!HTTPDNSURLProtocol.canInit(with: URLRequest(url: URL(string: TestEnvironment.dohA)!)))
            #expect(HTTPDNSURLProtocol.canInit(with: URLRequest(url: url("/echo"))))
        }

        /// No request here: in a test process something may have used `URLSession.shared` already,
        /// and then registration does not reach it (corelibs fixes shared's protocols at first use),
        /// so the request would go to the built-in protocol and the machine's own DNS.
        @Test func registerClassDoesNotReachSessionsMadeFromAConfiguration() {
            HTTPDNSURLProtocol.registerForSharedSession(client)
            defer { HTTPDNSURLProtocol.uninstall() }
            #expect(URLSessionConfiguration.default.protocolClasses?.contains { $0 == HTTPDNSURLProtocol.self } == false)
            #expect(URLSessionConfiguration.ephemeral.protocolClasses?.contains { $0 == HTTPDNSURLProtocol.self } == false)
            #expect(HTTPDNSURLProtocol.canInit(with: URLRequest(url: url("/echo"))), "installed for shared")
        }

        // MARK: The three ways of receiving a body

        @Test func aCompletionHandlerGetsTheWholeBodyNotTheLastChunk() async throws {
            // ~290 KB chunked over HTTP/1.1: corelibs keeps only the last didLoad for completion handlers.
            let result = try #require(await completion(of: URLRequest(url: url("/chunked", port: TestEnvironment.originH1Port))))
            #expect(result.error == nil)
            #expect((result.response as? HTTPURLResponse)?.statusCode == 200)
            #expect(result.data == (try linesFile))
        }

        @Test func asyncDataForGetsTheWholeBodyAndTheNameReachesTLSAndHost() async throws {
            let (data, response) = try await session.data(for: URLRequest(url: url("/chunked", port: TestEnvironment.originH1Port)))
            #expect(data == (try linesFile))
            #expect(response.url?.host == "origin.hd.test")
            let (echo, _) = try await session.data(from: url("/echo"))
            #expect(String(decoding: echo, as: UTF8.self).hasPrefix("sni=origin.hd.test host=origin.hd.test method=GET proto=HTTP/2.0"))
        }

        @Test func aDataDelegateSeesEveryChunkOfALargeDownloadInBoundedMemory() async throws {
            let collector = Collector(keepBytes: false)
            let delegated = URLSession(configuration: Self.configuration(client), delegate: collector, delegateQueue: nil)
            defer { delegated.finishTasksAndInvalidate() }
            let before = residentBytes()
            let outcome = await collector.run(delegated.dataTask(with: url("/big")))
            let grown = residentBytes() - before
            #expect(outcome.error == nil)
            #expect(outcome.status == 200)
            #expect(outcome.byteCount == 64 * 1024 * 1024)
            #expect(outcome.chunks > 10, "delivered as it came, in \(outcome.chunks) chunks")
            #expect(grown < 32 * 1024 * 1024, "64 MiB through a delegate; the process grew by \(grown) bytes")
        }

        // MARK: Redirects, bodies, uploads

        @Test func redirectsAreFollowedInsideTheProtocol() async throws {
            // corelibs' client has no way to take a redirect from a protocol (a fatalError).
            let (_, response) = try await session.data(for: URLRequest(url: url("/redirect-302")))
            let http = try #require(response as? HTTPURLResponse)
            #expect(http.statusCode == 200)
            #expect(http.url?.host == "origin2.hd.test", "the new host was resolved through HTTPDNS")
            #expect(http.value(forHTTPHeaderField: "X-Request-Method") == "GET")
        }

        @Test func postBodiesAndUploadTasksArrive() async throws {
            var post = URLRequest(url: url("/upload"))
            post.httpMethod = "POST"
            post.httpBody = Data("from httpBody".utf8)
            let (_, posted) = try await session.data(for: post)
            #expect((posted as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Request-Body") == "from httpBody")

            var upload = URLRequest(url: url("/upload"))
            upload.httpMethod = "PUT"
            let (_, uploaded) = try await session.upload(for: upload, from: Data("from an upload task".utf8))
            #expect((uploaded as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Request-Method") == "PUT")
            #expect((uploaded as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Request-Body") == "from an upload task")

            let file = FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-protocol-\(UUID()).bin")
            try Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            var fileUpload = URLRequest(url: url("/upload-file"))
            fileUpload.httpMethod = "POST"
            let result = try #require(await completion(of: fileUpload, fromFile: file))
            let http = try #require(result.response as? HTTPURLResponse)
            #expect(http.value(forHTTPHeaderField: "X-Content-Length") == "3000000")
            let stored = try #require(http.value(forHTTPHeaderField: "X-Request-Body-File"))
            defer { try? FileManager.default.removeItem(atPath: stored) }
            #expect(try Data(contentsOf: URL(fileURLWithPath: stored)) == Data(contentsOf: file), "the file arrived byte for byte")
        }

        // MARK: Authentication, cancellation, failures

        @Test(arguments: ["/auth-basic", "/auth-bearer"])
        func a401IsTheAnswerNotARetryThroughSystemDNS(path: String) async throws {
            // Without the protocol's care, corelibs would start its own challenge: with no credential
            // the task would never complete; with one it would resend through its own protocol.
            let result = try #require(await completion(of: URLRequest(url: url(path))), "the task completed")
            let http = try #require(result.response as? HTTPURLResponse)
            #expect(http.statusCode == 401)
            #expect(http.value(forHTTPHeaderField: "WWW-Authenticate") == nil)
            #expect(http.value(forHTTPHeaderField: "X-HTTPDNS-WWW-Authenticate")?.isEmpty == false)
            #expect(String(decoding: result.data ?? Data(), as: UTF8.self).contains("required"))

            let collector = Collector(keepBytes: true)
            let delegated = URLSession(configuration: Self.configuration(client), delegate: collector, delegateQueue: nil)
            defer { delegated.finishTasksAndInvalidate() }
            let outcome = await collector.run(delegated.dataTask(with: url(path)))
            #expect(outcome.status == 401)
            #expect(outcome.challenges == 0, "no authentication challenge reached the delegate")
        }

        @Test func cancellingATaskStopsTheTransfer() async throws {
            let once = Once<(any Error)?>()
            let task = session.dataTask(with: url("/slow")) { _, _, error in once.set(error) }
            task.resume()
            try await Task.sleep(for: .milliseconds(400))
            #expect(HTTPDNSURLProtocol.activeLoads >= 1, "the protocol is loading (64 MiB at 256 KB/s)")
            let cancelled = ContinuousClock.now
            task.cancel()
            let error = try #require(await once.value(timeout: .seconds(5)), "the task completed")
            #expect((error as? URLError)?.code == .cancelled)
            var stopped = HTTPDNSURLProtocol.activeLoads == 0
            for _ in 0..<40 where !stopped {
                try await Task.sleep(for: .milliseconds(50))
                stopped = HTTPDNSURLProtocol.activeLoads == 0
            }
            #expect(stopped, "stopLoading ended the transfer")
            #expect(ContinuousClock.now - cancelled < .seconds(3))
        }

        @Test func failuresReachTheTaskAsURLErrors() async throws {
            await #expect {
                try await session.data(from: url("/", host: "mismatch.hd.test"))
            } throws: { ($0 as? URLError)?.code == .serverCertificateUntrusted }
            await #expect {
                try await session.data(from: url("/", host: "absent.hd.test"))
            } throws: { ($0 as? URLError)?.code == .cannotFindHost }
        }

        // MARK: Helpers

        /// A completion-handler task's result, or nil when it did not complete within `timeout`.
        func completion(
            of request: URLRequest, fromFile file: URL? = nil, timeout: Duration = .seconds(15)
        ) async -> (data: Data?, response: URLResponse?, error: (any Error)?)? {
            let once = Once<(data: Data?, response: URLResponse?, error: (any Error)?)>()
            let handler: @Sendable (Data?, URLResponse?, (any Error)?) -> Void = { once.set((data: $0, response: $1, error: $2)) }
            let task =
                file.map { session.uploadTask(with: request, fromFile: $0, completionHandler: handler) }
                ?? session.dataTask(with: request, completionHandler: handler)
            task.resume()
            return await once.value(timeout: timeout)
        }

        func residentBytes() -> Int { InterceptorFixtures.residentBytes() }
    }
}

/// A value set once from any thread and awaited with a deadline.
final class Once<Value: Sendable>: Sendable {
    private let state = Mutex<(value: Value?, waiters: [CheckedContinuation<Value?, Never>])>((nil, []))

    func set(_ value: Value) {
        let waiters = state.withLock { state -> [CheckedContinuation<Value?, Never>] in
            guard state.value == nil else { return [] }
            state.value = value
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }

    func value(timeout: Duration) async -> Value? {
        await withTaskGroup(of: Value?.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let ready = self.state.withLock { state -> Value? in
                        if let value = state.value { return value }
                        state.waiters.append(continuation)
                        return nil
                    }
                    if let ready { continuation.resume(returning: ready) }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next() ?? nil
            if first == nil { self.releaseWaiters() }
            group.cancelAll()
            return first
        }
    }

    private func releaseWaiters() {
        let waiters = state.withLock { state in
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: nil) }
    }
}

/// A data delegate that counts chunks and challenges and reports the task's end.
final class Collector: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct Outcome: Sendable {
        var status = 0
        var chunks = 0
        var byteCount = 0
        var body = Data()
        var challenges = 0
        var error: (any Error)?
    }

    private let keepBytes: Bool
    private let state = Mutex(Outcome())
    private let done = Once<Outcome>()

    init(keepBytes: Bool) { self.keepBytes = keepBytes }

    func run(_ task: URLSessionTask, timeout: Duration = .seconds(30)) async -> Outcome {
        task.resume()
        return await done.value(timeout: timeout) ?? Outcome(error: URLError(.timedOut))
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        state.withLock { $0.status = (response as? HTTPURLResponse)?.statusCode ?? 0 }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        state.withLock { state in
            state.chunks += 1
            state.byteCount += data.count
            if keepBytes { state.body.append(data) }
        }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        state.withLock { $0.challenges += 1 }
        completionHandler(.cancelAuthenticationChallenge, nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let outcome = state.withLock { state in
            state.error = error
            return state
        }
        done.set(outcome)
    }
}
