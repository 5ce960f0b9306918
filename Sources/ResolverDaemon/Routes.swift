import DNSCore
import DaemonHTTP
import Foundation
import HTTPDNS
import HijackDetection
import NIOCore
import ResultFormatting

/// The HTTP API of the contract: /healthz, /readyz, /metrics, /v1/resolve, /v1/status.
/// (`/dns-query`, the policy and the metrics are the ``RequestGateway``'s; the policy has already
/// refused unknown methods, so a request here is a GET.)
enum Routes {
    /// The answer to a request for one of the API's paths (404 for any other).
    static func answer(_ request: HTTPRequest, state: DaemonState, exposition: @Sendable () -> [UInt8]) async -> HTTPAnswer {
        switch RequestPolicy.path(of: request.target) {
        case "/healthz":
            return text(200, "ok\n")
        case "/readyz":
            if state.isStopping { return text(503, "stopping\n") }
            return state.isReady
                ? text(200, "ready\n")
                : text(503, "no trusted upstream has responded in the last \(state.readyWindow.components.seconds) s without failing since\n")
        case "/metrics":
            var body = ByteBuffer()
            body.writeBytes(exposition())
            return HTTPAnswer(status: 200, headers: [("content-type", "text/plain; version=0.0.4; charset=utf-8")], body: body)
        case "/v1/resolve":
            return await resolve(query(of: request.target), state: state)
        case "/v1/status":
            return json(200, statusJSON(state))
        case "/ui":
            return StatusPage.answer()
        default:
            return text(404, "not found\n")
        }
    }

    private static func resolve(_ parameters: [(name: String, value: String)], state: DaemonState) async -> HTTPAnswer {
        func parameter(_ name: String) -> String? { parameters.first { $0.name == name }?.value }
        guard let host = parameter("host"), !host.isEmpty else {
            return json(400, error("invalid_request", "give ?host=NAME"))
        }
        let typeText = (parameter("type") ?? "both").lowercased()
        let resolver = state.current.resolver
        do throws(DNSError) {
            switch typeText {
            case "https", "svcb":
                let answer = try await resolver.serviceBindings(for: host, type: typeText == "https" ? .https : .svcb)
                return json(200, ServiceBindingOutput.json(answer))
            default:
                guard let type = AddressQuery(rawValue: typeText) else {
                    return json(400, error("invalid_request", "type must be a, aaaa, both, https or svcb, not '\(typeText)'"))
                }
                let resolution = try await resolver.resolve(host, type: type)
                return json(200, LookupOutput.json(resolution))
            }
        } catch {
            let status =
                switch error.code {
                case .invalidName: 400
                case .nxdomain, .nodata, .rejectedPrivate: 404
                default: 502
                }
            return json(status, LookupOutput.json(host: host, error: error))
        }
    }

    /// The query parameters of a request target, percent-decoded (RFC 3986 §2.1; `+` stays `+`),
    /// in order. A parameter that does not decode is left out.
    static func query(of target: String) -> [(name: String, value: String)] {
        guard let question = target.firstIndex(of: "?") else { return [] }
        var parameters: [(name: String, value: String)] = []
        for pair in target[target.index(after: question)...].split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = parts[0].removingPercentEncoding,
                let value = parts.count == 2 ? parts[1].removingPercentEncoding : ""
            else { continue }
            parameters.append((name, value))
        }
        return parameters
    }

    static func statusJSON(_ state: DaemonState) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let order = state.current.config.daemon.watch.map(\.host)
        let statuses = Dictionary(state.allStatuses().map { ($0.host, $0) }, uniquingKeysWith: { a, _ in a })
        var hosts: [JSONValue] = []
        for host in order {
            var entry = JSONObject()
            entry["host"] = .string(host)
            guard let status = statuses[host] else {
                entry["verdict"] = .null
                entry["last_check"] = .null
                hosts.append(.object(entry))
                continue
            }
            entry["port"] = .int(status.port)
            entry["last_check"] = .string(formatter.string(from: status.checkedAt))
            entry["verdict"] = .string(status.comparison.verdict.kind.rawValue)
            entry["reason"] = .string(status.comparison.verdict.reason)
            entry["trusted"] = .array(addresses(status.comparison.trusted).map { .string($0.description) })
            entry["system"] = .array(addresses(status.comparison.system).map { .string($0.description) })
            if let hints = status.comparison.foreignHints { entry["https_foreign_hints"] = .array(hints.map { .string($0.description) }) }
            LookupOutput.dnssec(status.comparison.trustedDNSSEC, into: &entry, key: "trusted_dnssec")
            LookupOutput.dnssec(status.comparison.systemDNSSEC, into: &entry, key: "system_dnssec")
            entry["addresses"] = .array(
                status.ranked.map { address in
                    var item = JSONObject()
                    item["ip"] = .string(address.ip.description)
                    item["healthy"] = .bool(address.isHealthy)
                    item["tls"] = .string(address.outcome.rawValue)
                    item["rtt_ms"] = address.rtt.map { .double(($0 * 10_000).rounded() / 10) } ?? .null
                    return .object(item)
                })
            entry["probes"] = .array(
                status.comparison.probes.map { probe in
                    var item = JSONObject()
                    item["ip"] = .string(probe.ip.description)
                    item["port"] = .int(probe.port)
                    item[probe.kind.rawValue] = .string(probe.outcome.rawValue)
                    return .object(item)
                })
            entry["history"] = .array(
                state.history(of: host).map { check in
                    var item = JSONObject()
                    item["checked_at"] = .string(formatter.string(from: check.checkedAt))
                    item["verdict"] = .string(check.verdict.rawValue)
                    item["reason"] = .string(check.reason)
                    return .object(item)
                })
            hosts.append(.object(entry))
        }
        var object = JSONObject()
        object["ready"] = .bool(state.isReady)
        object["hosts"] = .array(hosts)
        object["upstreams"] = .array(upstreamsJSON(state))
        return JSONValue.object(object).serialized
    }

    /// Each trusted upstream's health, in configured order: `state` is `up` (answered within the
    /// readiness window, nothing failed since), `circuit_open` (skipped after repeated failures),
    /// `down` (its last exchange failed, or no answer within the window) or `unknown` (no exchange
    /// yet).
    static func upstreamsJSON(_ state: DaemonState) -> [JSONValue] {
        let resolver = state.current.resolver
        let now = resolver.clock.now
        let window = state.readyWindow
        func secondsAgo(_ instant: ResolverInstant?) -> JSONValue {
            guard let instant else { return .null }
            let elapsed = now - instant
            return .double((Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18).rounded())
        }
        return resolver.upstreamHealth.map { upstream, health in
            let status =
                if let until = health.openUntil, until > now { "circuit_open" } else if health.isReachable(now: now, window: window) {
                    "up"
                } else if health.lastExchange == nil { "unknown" } else { "down" }
            var item = JSONObject()
            item["upstream"] = .string(upstream)
            item["state"] = .string(status)
            item["consecutive_failures"] = .int(health.consecutiveFailures)
            // The smoothed round trip of its answers: none until it has answered.
            item["rtt_ms"] = health.lastResponse == nil ? .null : health.rtt.map { .double(($0 * 10_000).rounded() / 10) } ?? .null
            item["last_response_seconds_ago"] = secondsAgo(health.lastResponse)
            item["last_failure_seconds_ago"] = secondsAgo(health.lastTransportFailure)
            return .object(item)
        }
    }

    private static func addresses(_ answer: ResolverAnswer) -> [IPAddress] {
        if case .addresses(let list) = answer { return list }
        return []
    }

    static func text(_ status: Int, _ body: String) -> HTTPAnswer { .text(status, body) }

    static func json(_ status: Int, _ body: String) -> HTTPAnswer {
        HTTPAnswer(status: status, headers: [("content-type", "application/json")], body: ByteBuffer(string: body + "\n"))
    }

    static func error(_ code: String, _ message: String) -> String {
        var detail = JSONObject()
        detail["code"] = .string(code)
        detail["message"] = .string(message)
        var object = JSONObject()
        object["error"] = .object(detail)
        return JSONValue.object(object).serialized
    }

}
