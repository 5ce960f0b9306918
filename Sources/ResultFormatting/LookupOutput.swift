import DNSCore
import Foundation

/// Renders lookup results: JSON Lines with the contract's key order, or a human table.
package enum LookupOutput {
    package static func json(_ resolution: Resolution) -> String {
        jsonValue(resolution).serialized
    }

    /// The lookup object, for embedding in another (`resolve fetch --json`).
    package static func jsonValue(_ resolution: Resolution) -> JSONValue {
        var object = JSONObject()
        object["host"] = .string(resolution.host)
        object["addresses"] = .array(
            resolution.addresses.map { address in
                var entry = JSONObject()
                entry["ip"] = .string(address.ip.description)
                entry["family"] = .string(address.ip.family.rawValue)
                entry["ttl"] = .int(Int(address.ttl))
                return .object(entry)
            })
        object["source"] = .string(resolution.source.rawValue)
        object["upstream"] = resolution.upstream.map(JSONValue.string) ?? .null
        // A vendor API reached over plain HTTP (encrypted by the API, not TLS): said, never silent.
        if resolution.upstream?.hasPrefix("http://") == true { object["transport"] = .string("http") }
        object["stale"] = .bool(resolution.isStale)
        object["elapsed_ms"] = .double(milliseconds(resolution.elapsed))
        if let canonical = resolution.canonicalName { object["canonical_name"] = .string(canonical) }
        if !resolution.failedAttempts.isEmpty { object["failed_attempts"] = attempts(resolution.failedAttempts) }
        dnssec(resolution.dnssec, into: &object)
        return JSONValue.object(object)
    }

    package static func json(host: String, error: DNSError) -> String {
        var detail = JSONObject()
        detail["code"] = .string(error.code.rawValue)
        detail["message"] = .string(error.message)
        if !error.attempts.isEmpty { detail["attempts"] = attempts(error.attempts) }
        var object = JSONObject()
        object["host"] = .string(host)
        object["error"] = .object(detail)
        dnssec(error.dnssec, into: &object)
        return JSONValue.object(object).serialized
    }

    /// `key` (`dnssec`, `trusted_dnssec`, …) with the status's name, and `key_reason` when it has
    /// one; nothing when there is no status.
    package static func dnssec(_ status: DNSSECStatus?, into object: inout JSONObject, key: String = "dnssec") {
        guard let status else { return }
        object[key] = .string(status.name)
        if let reason = status.reason { object[key + "_reason"] = .string(reason) }
    }

    package static func human(_ resolution: Resolution) -> String {
        var lines = [resolution.host + (resolution.canonicalName.map { "  (canonical name \($0))" } ?? "")]
        let width = resolution.addresses.map { $0.ip.description.count }.max() ?? 0
        for address in resolution.addresses {
            let ip = address.ip.description
            lines.append("  \(ip)\(String(repeating: " ", count: width - ip.count))  \(address.ip.family.rawValue)  ttl \(address.ttl)")
        }
        let via = resolution.upstream.map { "\(resolution.source.rawValue) \($0)" } ?? resolution.source.rawValue
        lines.append(
            "  via \(via) in \(String(format: "%.1f", milliseconds(resolution.elapsed))) ms"
                + (resolution.failedAttempts.isEmpty ? "" : " after \(resolution.failedAttempts.count) failed attempt(s)"))
        for attempt in resolution.failedAttempts {
            lines.append("    failed: \(attempt.upstream): \(attempt.code.rawValue): \(attempt.message)")
        }
        if let dnssec = resolution.dnssec { lines.append("  dnssec \(dnssec.name)" + (dnssec.reason.map { ": " + $0 } ?? "")) }
        return lines.joined(separator: "\n")
    }

    package static func human(host: String, error: DNSError) -> String {
        var lines = ["\(host)", "  error \(error.code.rawValue): \(error.message)"]
        if let dnssec = error.dnssec { lines.append("  dnssec \(dnssec.name)" + (dnssec.reason.map { ": " + $0 } ?? "")) }
        if error.attempts.count > 1 {
            for attempt in error.attempts {
                lines.append("    \(attempt.upstream): \(attempt.code.rawValue): \(attempt.message)")
            }
        }
        return lines.joined(separator: "\n")
    }

    private static func attempts(_ attempts: [DNSError.Attempt]) -> JSONValue {
        .array(
            attempts.map { attempt in
                var entry = JSONObject()
                entry["upstream"] = .string(attempt.upstream)
                entry["code"] = .string(attempt.code.rawValue)
                entry["message"] = .string(attempt.message)
                return .object(entry)
            })
    }

    package static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        let value = Double(seconds) * 1000 + Double(attoseconds) / 1e15
        return (value * 10).rounded() / 10
    }
}

/// A JSON value whose objects keep insertion order, so output matches the documented key order.
package indirect enum JSONValue {
    case string(String), int(Int), double(Double), bool(Bool), null
    case array([JSONValue]), object(JSONObject)

    package var serialized: String {
        switch self {
        case let .string(text): return Self.quote(text)
        case let .int(value): return String(value)
        case let .double(value): return value.isFinite ? String(value) : "null"
        case let .bool(value): return value ? "true" : "false"
        case .null: return "null"
        case let .array(values): return "[" + values.map(\.serialized).joined(separator: ",") + "]"
        case let .object(object):
            return "{" + object.pairs.map { Self.quote($0.0) + ":" + $0.1.serialized }.joined(separator: ",") + "}"
        }
    }

    package static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

package struct JSONObject {
    package private(set) var pairs: [(String, JSONValue)] = []

    package init() {}

    package subscript(key: String) -> JSONValue? {
        get { pairs.first { $0.0 == key }?.1 }
        set {
            pairs.removeAll { $0.0 == key }
            if let newValue { pairs.append((key, newValue)) }
        }
    }
}

/// Renders HTTPS/SVCB lookups (RFC 9460): JSON Lines or human lines in presentation style.
package enum ServiceBindingOutput {
    package static func json(_ answer: ServiceBindingAnswer) -> String {
        var object = JSONObject()
        object["host"] = .string(answer.host)
        object["type"] = .string(answer.type.description)
        object["records"] = .array(answer.records.map { .object(record($0)) })
        object["ttl"] = .int(Int(answer.ttl))
        if let canonical = answer.canonicalName { object["canonical_name"] = .string(canonical) }
        object["source"] = .string("doh")
        object["elapsed_ms"] = .double(LookupOutput.milliseconds(answer.elapsed))
        return JSONValue.object(object).serialized
    }

    package static func human(_ answer: ServiceBindingAnswer) -> String {
        var lines = ["\(answer.host)  \(answer.type)" + (answer.canonicalName.map { "  (canonical name \($0))" } ?? "")]
        for binding in answer.records {
            let parameters = binding.parameters.map(presentation).joined(separator: " ")
            let mode = binding.isAlias ? "alias" : "service"
            lines.append("  \(binding.priority) \(binding.target)  \(mode)\(parameters.isEmpty ? "" : "  " + parameters)  ttl \(answer.ttl)")
        }
        return lines.joined(separator: "\n")
    }

    package static func record(_ binding: ServiceBinding) -> JSONObject {
        var entry = JSONObject()
        entry["priority"] = .int(Int(binding.priority))
        entry["target"] = .string(binding.target.description)
        entry["mode"] = .string(binding.isAlias ? "alias" : "service")
        for parameter in binding.parameters {
            switch parameter {
            case .mandatory(let keys): entry["mandatory"] = .array(keys.map { .string(keyName($0)) })
            case .alpn(let ids): entry["alpn"] = .array(ids.map(JSONValue.string))
            case .noDefaultALPN: entry["no_default_alpn"] = .bool(true)
            case .port(let port): entry["port"] = .int(Int(port))
            case .ipv4Hint(let list): entry["ipv4hint"] = .array(list.map { .string($0.description) })
            case .ech(let config): entry["ech"] = .string(Data(config).base64EncodedString())
            case .ipv6Hint(let list): entry["ipv6hint"] = .array(list.map { .string($0.description) })
            case let .unknown(key, value): entry[keyName(key)] = .string(Data(value).base64EncodedString())
            }
        }
        return entry
    }

    /// RFC 9460 §2.1 presentation of one SvcParam.
    package static func presentation(_ parameter: ServiceBinding.Parameter) -> String {
        switch parameter {
        case .mandatory(let keys): return "mandatory=" + keys.map(keyName).joined(separator: ",")
        case .alpn(let ids): return "alpn=" + ids.joined(separator: ",")
        case .noDefaultALPN: return "no-default-alpn"
        case .port(let port): return "port=\(port)"
        case .ipv4Hint(let list): return "ipv4hint=" + list.map(\.description).joined(separator: ",")
        case .ech(let config): return "ech=" + Data(config).base64EncodedString()
        case .ipv6Hint(let list): return "ipv6hint=" + list.map(\.description).joined(separator: ",")
        case let .unknown(key, value): return "\(keyName(key))=" + Data(value).base64EncodedString()
        }
    }

    /// The SvcParamKey's name (RFC 9460 §14.3.2), or `keyNNNNN`.
    static func keyName(_ key: UInt16) -> String {
        switch key {
        case 0: return "mandatory"
        case 1: return "alpn"
        case 2: return "no-default-alpn"
        case 3: return "port"
        case 4: return "ipv4hint"
        case 5: return "ech"
        case 6: return "ipv6hint"
        default: return "key\(key)"
        }
    }
}
