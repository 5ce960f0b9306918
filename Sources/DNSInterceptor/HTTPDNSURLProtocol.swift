import CurlSupport
import DNSCore
import Foundation
import HTTPDNS
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Puts URLSession's requests on ``HTTPDNSClient``: names resolved through HTTPDNS, TLS and `Host`
/// kept on the name. Set it up with `Foundation/URLSessionConfiguration/useHTTPDNS(_:policy:)`.
///
/// On Linux (swift-corelibs-foundation) a URLProtocol meets behaviour Apple's Foundation does not
/// have; this class handles each case:
/// - **Redirects** cannot be handed back (`wasRedirectedTo` is a `fatalError` there): the client
///   follows them inside the protocol, each new host resolved through HTTPDNS; the task sees the
///   final response, whose `url` is the final URL. Session delegates are not asked about redirects.
/// - **`didLoad` replaces** the data delivered so far for completion handlers and async
///   `data(for:)`: those tasks get the whole body in one `didLoad`. Data-delegate tasks get every
///   chunk as it arrives, one at a time: the next chunk is read only when the delegate queue has
///   taken the previous one, so a slow delegate slows the transfer instead of filling memory.
/// - **Upload tasks** hide their body from the request: it is taken from the task (data, file or
///   stream), so `uploadTask(with:from:)`, `uploadTask(with:fromFile:)` and `upload(for:from:)`
///   work; a file is sent from disk.
/// - **A 401 with `WWW-Authenticate`** would make corelibs resend the request through its own
///   protocol (system DNS) when it has a credential, or never complete when it has none: the
///   header reaches the task as `X-HTTPDNS-WWW-Authenticate` instead, the 401 is the answer.
///   Send credentials yourself (an `Authorization` header).
/// - **`stopLoading`** (task cancelled, session invalidated) stops the transfer at once.
/// How the protocol learns what the public API hides (the task's session, whether it has a
/// completion handler, an upload's body) is by reflection on the task; where that fails, it
/// chooses what is always correct (one whole `didLoad`; an upload refused with a clear error).
public final class HTTPDNSURLProtocol: URLProtocol {
    // URLProtocol is not Sendable. This subclass's own state is behind `state`; the loading task
    // carries `self` over (UnsafeSendable) and calls the inherited `client` only from there, and
    // corelibs' client hands every call to the session's queues itself.

    /// The process-wide client and policy every intercepting session uses (the last installed).
    struct Installation: Sendable {
        var client: HTTPDNSClient
        var policy: HTTPDNSInterceptionPolicy
        var resolverHosts: Set<String>
    }

    private static let installation = Mutex<Installation?>(nil)
    private static let loads = Atomic<Int>(0)

    /// Makes `client` and `policy` the ones every session listing this class uses. Called by
    /// `Foundation/URLSessionConfiguration/useHTTPDNS(_:policy:)`; one per process, the last wins.
    public static func install(_ client: HTTPDNSClient, policy: HTTPDNSInterceptionPolicy = .init()) {
        let hosts = Set(client.resolver.configuration.upstreams.map { $0.host.lowercased() })
        installation.withLock { $0 = Installation(client: client, policy: policy, resolverHosts: hosts) }
    }

    /// Installs `client` and registers the class with `URLProtocol.registerClass`, which on Linux
    /// reaches `URLSession.shared` only, and only when called before anything in the process has
    /// used `URLSession.shared` (corelibs settles shared's protocols at its first use; after that
    /// its requests keep going to the built-in protocol and system DNS). Sessions made from a
    /// configuration need `Foundation/URLSessionConfiguration/useHTTPDNS(_:policy:)`; prefer that.
    public static func registerForSharedSession(_ client: HTTPDNSClient, policy: HTTPDNSInterceptionPolicy = .init()) {
        install(client, policy: policy)
        _ = URLProtocol.registerClass(HTTPDNSURLProtocol.self)
    }

    /// Stops intercepting: requests go to the next protocol in every session.
    public static func uninstall() {
        installation.withLock { $0 = nil }
        URLProtocol.unregisterClass(HTTPDNSURLProtocol.self)
    }

    /// Loads started and not yet finished or stopped, in this process.
    package static var activeLoads: Int { loads.load(ordering: .relaxed) }

    public override class func canInit(with request: URLRequest) -> Bool {
        guard let url = request.url, let installed = installation.withLock({ $0 }) else { return false }
        return installed.policy.intercepts(url, resolverHosts: installed.resolverHosts)
    }

    public override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    private struct State {
        var task: Task<Void, Never>?
        var stopped = false
    }

    private let state = Mutex(State())

    public override func startLoading() {
        guard let installed = Self.installation.withLock({ $0 }) else {
            fail(URLError(.unsupportedURL, userInfo: [NSLocalizedDescriptionKey: "HTTPDNS interception was uninstalled"]))
            return
        }
        // Read on the session's work queue, where startLoading runs: the task's session, its kind
        // of delivery and an upload's body are only stable here.
        let facts = TaskFacts(task)
        let request = self.request
        let body: RequestBody
        if task is URLSessionUploadTask, request.httpBody == nil, request.httpBodyStream == nil {
            guard let upload = facts.uploadBody else {
                fail(
                    URLError(
                        .requestBodyStreamExhausted,
                        userInfo: [
                            NSLocalizedDescriptionKey:
                                "the body of this upload task is not visible to HTTPDNSURLProtocol; send a data task with httpBody instead"
                        ]))
                return
            }
            body = upload
        } else {
            body = RequestBody(request)
        }
        Self.loads.add(1, ordering: .relaxed)
        let load = Load(protocol: self, request: request, body: body, facts: facts, client: installed.client)
        let loading = Task {
            defer { HTTPDNSURLProtocol.loads.subtract(1, ordering: .relaxed) }
            await load.run()
        }
        state.withLock { $0.task = loading }
    }

    public override func stopLoading() {
        let task = state.withLock { state in
            state.stopped = true
            return state.task
        }
        task?.cancel()
    }

    fileprivate var isStopped: Bool { state.withLock { $0.stopped } }

    fileprivate func fail(_ error: any Error) {
        guard !isStopped else { return }
        client?.urlProtocol(self, didFailWithError: error)
    }

    /// The response as the task should see it: a 401's `WWW-Authenticate` renamed so that
    /// corelibs does not start its own authentication (a retry through system DNS, or a task that
    /// never completes).
    static func deliverable(_ response: HTTPURLResponse) -> HTTPURLResponse {
        guard response.statusCode == 401, let url = response.url else { return response }
        var fields: [String: String] = [:]
        var renamed = false
        for (name, value) in response.allHeaderFields {
            guard let name = name as? String, let value = value as? String else { continue }
            if name.lowercased() == "www-authenticate" {
                fields["X-HTTPDNS-WWW-Authenticate"] = value
                renamed = true
            } else {
                fields[name] = value
            }
        }
        guard renamed else { return response }
        return HTTPURLResponse(url: url, statusCode: 401, httpVersion: "HTTP/1.1", headerFields: fields) ?? response
    }
}

/// One request's loading, off the session's queues.
private final class Load: @unchecked Sendable {
    // Safety: created in startLoading and then used by the one loading task only; the protocol's
    // `client` accepts calls from any thread (corelibs moves them to the session's queues).
    private let urlProtocol: HTTPDNSURLProtocol
    private let request: URLRequest
    private let body: RequestBody
    private let facts: TaskFacts
    private let httpClient: HTTPDNSClient

    init(protocol urlProtocol: HTTPDNSURLProtocol, request: URLRequest, body: RequestBody, facts: TaskFacts, client: HTTPDNSClient) {
        self.urlProtocol = urlProtocol
        self.request = request
        self.body = body
        self.facts = facts
        self.httpClient = client
    }

    func run() async {
        do {
            if facts.callsDataDelegate, let session = facts.session {
                try await loadInChunks(delegateQueue: session.delegateQueue)
            } else {
                try await loadWhole()
            }
        } catch {
            urlProtocol.fail(error)
        }
    }

    private var client: (any URLProtocolClient)? { urlProtocol.isStopped ? nil : urlProtocol.client }

    private func loadWhole() async throws {
        let exchange = try await httpClient.exchange(request, body: body, sinkPath: nil, context: facts.context)
        client?.urlProtocol(urlProtocol, didReceive: HTTPDNSURLProtocol.deliverable(exchange.response), cacheStoragePolicy: .notAllowed)
        // One didLoad: with a completion handler each call replaces the data before it.
        if !exchange.body.isEmpty { client?.urlProtocol(urlProtocol, didLoad: exchange.body) }
        client?.urlProtocolDidFinishLoading(urlProtocol)
    }

    private func loadInChunks(delegateQueue: OperationQueue) async throws {
        let stream = try await httpClient.openStream(request, body: body, context: facts.context)
        client?.urlProtocol(urlProtocol, didReceive: HTTPDNSURLProtocol.deliverable(stream.response), cacheStoragePolicy: .notAllowed)
        for try await chunk in stream {
            guard let client else { return }
            client.urlProtocol(urlProtocol, didLoad: chunk)
            // The delegate queue runs in order: once this runs, the delegate has had the chunk.
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                delegateQueue.addOperation { done.resume() }
            }
        }
        client?.urlProtocolDidFinishLoading(urlProtocol)
    }
}

extension URLSessionConfiguration {
    /// Sends this configuration's http and https requests through HTTPDNS: puts
    /// ``HTTPDNSURLProtocol`` first in `protocolClasses` (sessions ask their classes in order, and
    /// the default list already holds the built-in HTTP protocol, which would take every request)
    /// and installs `client` and `policy` for the process.
    ///
    /// It also sets `urlCredentialStorage` to nil: with stored credentials, corelibs answers a 401
    /// by resending the request through its built-in protocol, that is through system DNS.
    ///
    /// `URLProtocol.registerClass` reaches `URLSession.shared` only on Linux
    /// (``HTTPDNSURLProtocol/registerForSharedSession(_:policy:)``); every other session needs this call
    /// on its configuration before the session is created.
    public func useHTTPDNS(_ client: HTTPDNSClient, policy: HTTPDNSInterceptionPolicy = .init()) {
        HTTPDNSURLProtocol.install(client, policy: policy)
        let others = (protocolClasses ?? []).filter { $0 != HTTPDNSURLProtocol.self }
        protocolClasses = [HTTPDNSURLProtocol.self] + others
        urlCredentialStorage = nil
    }
}

/// What swift-corelibs-foundation does not tell a URLProtocol through its API, read from the task
/// by reflection. Every field falls back to the choice that is always correct when the task's
/// layout is not the expected one.
struct TaskFacts: @unchecked Sendable {
    // Safety: built on the session's work queue; the session and body are then used from the
    // loading task only as URLSession allows (delegateQueue, configuration copies, the body once).
    var session: URLSession?
    /// True only when the task reports to a data delegate, not to a completion handler.
    var callsDataDelegate = false
    var uploadBody: RequestBody?
    var context = HTTPDNSClient.CallContext()

    init(_ task: URLSessionTask?) {
        guard let task else { return }
        session = Self.unwrapped(Self.child(of: task, named: "session")) as? URLSession
        if let session {
            let configuration = session.configuration
            var headers: [String: String] = [:]
            for (name, value) in configuration.httpAdditionalHeaders ?? [:] {
                if let name = name as? String, let value = value as? String { headers[name] = value }
            }
            context.additionalHeaders = headers
            if configuration.httpShouldSetCookies { context.cookieStorage = configuration.httpCookieStorage }
            // URLSession's meaning: the resource budget bounds the whole load, the request
            // interval the time without progress.
            context.timeout = Self.duration(configuration.timeoutIntervalForResource)
            let requestInterval = task.originalRequest?.timeoutInterval ?? 60
            context.idleTimeout = Self.duration(requestInterval != 60 ? requestInterval : configuration.timeoutIntervalForRequest)
            callsDataDelegate = session.delegate is URLSessionDataDelegate && Self.behaviour(of: task, in: session) == "callDelegate"
        }
        if let body = Self.unwrapped(Self.child(of: task, named: "knownBody")) {
            uploadBody = Self.requestBody(body)
        }
    }

    /// The case name of the task's entry in its session's registry (`callDelegate`,
    /// `dataCompletionHandler`, …).
    static func behaviour(of task: URLSessionTask, in session: URLSession) -> String? {
        guard let registry = child(of: session, named: "taskRegistry"),
            let behaviours = child(of: registry, named: "behaviours") as? [Int: Any],
            let behaviour = behaviours[task.taskIdentifier]
        else { return nil }
        return Mirror(reflecting: behaviour).children.first?.label ?? "\(behaviour)"
    }

    /// `URLSessionTask._Body`: `.none`, `.data(DispatchData)`, `.file(URL)`, `.stream(InputStream)`.
    static func requestBody(_ body: Any) -> RequestBody? {
        guard let payload = Mirror(reflecting: body).children.first else {
            return "\(body)".hasSuffix("none") ? RequestBody.none : nil
        }
        switch payload.value {
        case let data as DispatchData:
            var bytes = [UInt8](repeating: 0, count: data.count)
            bytes.withUnsafeMutableBytes { buffer in _ = data.copyBytes(to: buffer) }
            return .data(bytes)
        case let file as URL:
            return .file(file)
        case let stream as InputStream:
            return .stream(stream)
        default:
            return nil
        }
    }

    static func duration(_ interval: TimeInterval) -> Duration? {
        interval > 0 && interval.isFinite ? .milliseconds(Int64(min(interval, 30 * 86_400) * 1000)) : nil
    }

    static func child(of subject: Any, named name: String) -> Any? {
        var mirror: Mirror? = Mirror(reflecting: subject)
        while let current = mirror {
            if let match = current.children.first(where: { $0.label == name }) { return match.value }
            mirror = current.superclassMirror
        }
        return nil
    }

    static func unwrapped(_ value: Any?) -> Any? {
        guard let value else { return nil }
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional else { return value }
        return mirror.children.first.map { unwrapped($0.value) } ?? nil
    }
}
