import CurlSupport
import DNSCore
import Foundation
import Synchronization

/// A commercial HTTPDNS service as a trusted upstream: one of the ``VendorWireFormat``s spoken over
/// the shared libcurl engine to the service's IPs in turn.
///
/// - Service IPs: the endpoint's own IP (if it is one) and then `bootstrap`, the one that answered
///   last first. A 5xx, `ServiceLevelDeny` or a connect failure moves to the next; a refused
///   signature, account or name does not (it would fail the same everywhere).
/// - The certificate is checked against `tlsName` (or the endpoint's host) whichever IP is reached.
/// - Clock skew: a signature refused as expired is retried once with the offset learnt from the
///   response's `Date`; the offset is kept for this upstream.
struct VendorUpstream: BatchingUpstream {
    let endpoint: UpstreamEndpoint
    let format: any VendorWireFormat
    let transport: HTTPTransport
    /// Unix seconds of the wall clock (signature expiries are wall time).
    let wallSeconds: @Sendable () -> Int64
    /// Seconds the server's clock is ahead of ours, learnt from a refused expiry.
    let clockOffset = ClockOffset()

    init(
        endpoint: UpstreamEndpoint, api: VendorAPI, transport: HTTPTransport,
        wallSeconds: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.endpoint = endpoint
        self.format = Self.format(for: api, serverAuthenticated: !endpoint.isPlainHTTP)
        self.transport = transport
        self.wallSeconds = wallSeconds
    }

    static func format(for api: VendorAPI, serverAuthenticated: Bool) -> any VendorWireFormat {
        switch api {
        case let .alibabaLegacy(account, secret):
            return AlibabaLegacyWire(accountID: account, secret: secret?.bytes)
        case let .alibabaV2(account, secret, encryption):
            let mode: AlibabaV2Wire.Mode
            switch encryption {
            case .none: mode = .plain
            case let .cbc(key): mode = .cbc(key: key.hexDecoded ?? [])
            case let .gcm(key): mode = .gcm(key: key.hexDecoded ?? [])
            }
            return AlibabaV2Wire(accountID: account, secret: secret?.hexDecoded, mode: mode)
        case let .tencent(account, .des(key)):
            return TencentWire(mode: .des(accountID: account, key: key.bytes), serverAuthenticated: serverAuthenticated)
        case let .tencent(account, .aes(key)):
            return TencentWire(mode: .aes(accountID: account, key: key.bytes), serverAuthenticated: serverAuthenticated)
        case let .tencentToken(token):
            return TencentWire(mode: .token(token.bytes))
        case let .baidu(account, secret):
            return BaiduWire(accountID: account, secret: secret.bytes)
        }
    }

    /// The endpoint's base URL and the API's path: never a query, so never a secret.
    var identifier: String { endpoint.url.hasSuffix("/") ? String(endpoint.url.dropLast()) + format.path : endpoint.url + format.path }
    var source: Resolution.Source { .httpdns }

    func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        let answers = try await resolve([question.name], families: VendorFamilies(question.type), timeout: timeout)
        guard let answer = answers.first(where: { $0.name == question.name })?.answer(for: question.type) else {
            throw DNSError(.mismatchedResponse, "\(endpoint.vendorName) did not answer for \(question.name)")
        }
        return answer
    }

    var batchSize: Int { endpoint.batchSize }

    func queryBatch(_ names: [DomainName], timeout: Duration) async throws(DNSError) -> [(DNSMessage.Question, AddressAnswer)] {
        var result: [(DNSMessage.Question, AddressAnswer)] = []
        for answer in try await resolve(names, families: .both, timeout: timeout) {
            for type in [RecordType.a, .aaaa] {
                if let typed = answer.answer(for: type) { result.append((DNSMessage.Question(name: answer.name, type: type), typed)) }
            }
        }
        return result
    }

    /// Asks for `names` in one request (at most ``UpstreamEndpoint/batchSize``); the answers for names
    /// asked, which may be fewer than asked.
    func resolve(_ names: [DomainName], families: VendorFamilies, timeout: Duration) async throws(DNSError) -> [VendorAnswer] {
        let deadline = ContinuousClock.now + timeout
        var synced = false
        while true {
            do {
                return try await send(names, families: families, deadline: deadline)
            } catch let fault {
                guard fault.retry == .afterClockSync, !synced, let serverTime = fault.serverTime else { throw fault.error }
                synced = true
                clockOffset.seconds.store(serverTime - wallSeconds(), ordering: .relaxed)
            }
        }
    }

    private struct Failure: Error {
        var error: DNSError
        var retry: VendorFault.Retry
        var serverTime: Int64?
    }

    /// One request, tried on each service IP in turn while the failure is the IP's.
    private func send(_ names: [DomainName], families: VendorFamilies, deadline: ContinuousClock.Instant) async throws(Failure) -> [VendorAnswer] {
        let pathAndQuery: String
        do {
            pathAndQuery = try format.request(
                names: names, families: families, clientIP: endpoint.clientIP,
                wallSeconds: wallSeconds() + clockOffset.seconds.load(ordering: .relaxed))
        } catch {
            throw Failure(error: error.error, retry: .never)
        }
        // The service IP that answered last goes first: the transport's memory, as for DoH bootstrap addresses.
        let addresses = transport.preferred.order(serviceAddresses, for: identifier)
        var last: Failure?
        for (index, address) in addresses.enumerated() {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else { break }
            var request = CurlRequest(
                url: baseURL + pathAndQuery, timeout: remaining, trust: transport.trust,
                maxResponseBytes: transport.maxResponseBytes, protocols: endpoint.isPlainHTTP ? "http" : "https")
            // Share the budget: an IP that does not connect leaves time for the others.
            request.connectTimeout = remaining / (addresses.count - index)
            request.headers.append("Accept: application/json, text/plain")
            if address.description != urlHost {
                (request.connectTo, request.resolve) = Pinning.pin(host: urlHost, port: endpoint.port, to: [address.urlHost])
            }
            let response: CurlResponse
            do {
                response = try await transport.send(request)
            } catch {
                last = Failure(error: error, retry: error.code == .connectFailed ? .nextAddress : .never)
                if error.code == .connectFailed { continue }
                throw last!
            }
            do throws(VendorFault) {
                let answers = try format.decode(status: response.status, body: response.body, names: names, families: families)
                guard answers.allSatisfy(\.isWithinBounds) else {
                    throw VendorFault(
                        .malformedResponse, "\(endpoint.vendorName) answered more than \(VendorAnswer.maxAddressesPerFamily) addresses for a name")
                }
                transport.preferred.remember(address, for: identifier)
                return answers
            } catch {
                let failure = Failure(error: error.error, retry: error.retry, serverTime: Self.serverTime(response.header("Date")))
                guard failure.retry == .nextAddress else { throw failure }
                last = failure
            }
        }
        throw last ?? Failure(error: DNSError(.timeout, "\(endpoint.vendorName): no time left to ask"), retry: .never)
    }

    /// The URL's host: `tls_name` when set (the certificate is checked against it), else the endpoint's.
    private var urlHost: String { endpoint.tlsName ?? endpoint.host }

    private var baseURL: String {
        let host = urlHost.contains(":") ? "[\(urlHost)]" : urlHost
        return (endpoint.isPlainHTTP ? "http://" : "https://") + host + ":\(endpoint.port)"
    }

    /// The service IPs in configured order: the endpoint's own IP literal, then the bootstrap list
    /// (never empty: validation requires a bootstrap address for an endpoint given by name).
    private var serviceAddresses: [IPAddress] {
        var list: [IPAddress] = []
        if let own = IPAddress(endpoint.host) { list.append(own) }
        for address in endpoint.bootstrap where !list.contains(address) { list.append(address) }
        return list
    }

    /// The Unix time of an HTTP `Date` header (RFC 9110 IMF-fixdate), or nil.
    static func serverTime(_ header: String?) -> Int64? {
        guard let header else { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: header.trimmingCharacters(in: .whitespaces)) else { return nil }
        return Int64(date.timeIntervalSince1970)
    }
}

/// A vendor upstream's offset from the server's clock, shared by its copies.
final class ClockOffset: Sendable {
    let seconds = Atomic<Int64>(0)
}

extension UpstreamEndpoint {
    /// "alibaba", "tencent", "baidu" for vendor endpoints, else the URL (for messages).
    var vendorName: String {
        if case let .vendor(api) = kind { return api.vendor }
        return url
    }

    /// What protects the exchange with this endpoint besides TLS ("Tencent DES-ECB encryption").
    public var vendorDescription: String {
        if case let .vendor(api) = kind { return api.protection }
        return "DNS over HTTPS"
    }
}
