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
        return JSONValue.object(object).serialized
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
        return lines.joined(separator: "\n")
    }

    package static func human(host: String, error: DNSError) -> String {
        var lines = ["\(host)", "  error \(error.code.rawValue): \(error.message)"]
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
