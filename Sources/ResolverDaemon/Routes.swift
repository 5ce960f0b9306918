import DNSCore
import Foundation
import HTTPDNS
import HijackDetection
import Hummingbird
import ResultFormatting

/// The HTTP API of the contract: /healthz, /readyz, /metrics, /v1/resolve, /v1/status.
/// (`/dns-query`, the policy and the metrics are the ``RequestGateway``'s.)
enum Routes {
    static func install(on router: Router<BasicRequestContext>, state: DaemonState, exposition: @escaping @Sendable () -> [UInt8]) {
        router.get("/healthz") { _, _ in text(.ok, "ok\n") }

        router.get("/readyz") { _, _ in
            state.isReady
                ? text(.ok, "ready\n")
                : text(
                    .serviceUnavailable,
                    "no trusted upstream has responded in the last \(state.readyWindow.components.seconds) s without failing since\n")
        }

        router.get("/metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: exposition())))
        }

        router.get("/v1/resolve") { request, _ in
            guard let host = request.uri.queryParameters.get("host"), !host.isEmpty else {
                return json(.badRequest, error("invalid_request", "give ?host=NAME"))
            }
            let typeText = (request.uri.queryParameters.get("type") ?? "both").lowercased()
            let resolver = state.current.resolver
            do throws(DNSError) {
                switch typeText {
                case "https", "svcb":
                    let answer = try await resolver.serviceBindings(for: host, type: typeText == "https" ? .https : .svcb)
                    return json(.ok, ServiceBindingOutput.json(answer))
                default:
                    guard let type = AddressQuery(rawValue: typeText) else {
                        return json(.badRequest, error("invalid_request", "type must be a, aaaa, both, https or svcb, not '\(typeText)'"))
                    }
                    let resolution = try await resolver.resolve(host, type: type)
                    return json(.ok, LookupOutput.json(resolution))
                }
            } catch {
                let status: HTTPResponse.Status =
                    switch error.code {
                    case .invalidName: .badRequest
                    case .nxdomain, .nodata, .rejectedPrivate: .notFound
                    default: .badGateway
                    }
                return json(status, LookupOutput.json(host: host, error: error))
            }
        }

        router.get("/v1/status") { _, _ in
            json(.ok, statusJSON(state))
        }
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
            hosts.append(.object(entry))
        }
        var object = JSONObject()
        object["ready"] = .bool(state.isReady)
        object["hosts"] = .array(hosts)
        return JSONValue.object(object).serialized
    }

    private static func addresses(_ answer: ResolverAnswer) -> [IPAddress] {
        if case .addresses(let list) = answer { return list }
        return []
    }

    static func text(_ status: HTTPResponse.Status, _ body: String) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func json(_ status: HTTPResponse.Status, _ body: String) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body + "\n")))
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
