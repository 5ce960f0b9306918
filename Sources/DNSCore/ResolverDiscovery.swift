/// Discovery of Designated Resolvers (DDR, RFC 9462): the special-use zone `resolver.arpa`, the
/// SVCB records a resolver advertises its encrypted endpoints with, and what a client makes of
/// them.
///
/// A forwarder answers `resolver.arpa` itself and never forwards it (RFC 9462 §6.1): an upstream's
/// designation would pull the forwarder's clients off it and onto the upstream (Blocky#1537).
///
/// ```swift
/// let records = ResolverDiscovery.advertisement(name: try DomainName("dns.example"),
///     doh: .init(port: 443), dot: .init(port: 853))
/// let designations = ResolverDiscovery.designations(records)   // what a client reads back
/// ```
public enum ResolverDiscovery {
    /// `resolver.arpa` (RFC 9462 §8): answered locally, never forwarded.
    public static let zone = DomainName(uncheckedWire: Array("\u{8}resolver\u{4}arpa\u{0}".utf8))
    /// `_dns.resolver.arpa`, the name a client asks for SVCB records (RFC 9462 §4).
    public static let name = DomainName(uncheckedWire: Array("\u{4}_dns\u{8}resolver\u{4}arpa\u{0}".utf8))
    /// The URI template DoH endpoints are advertised with (RFC 9461 §5).
    public static let dohPathTemplate = "/dns-query{?dns}"

    /// Whether `name` is `resolver.arpa` or below it.
    public static func isSpecialUse(_ name: DomainName) -> Bool { name.isWithin(zone) }

    /// One of a resolver's encrypted listeners, to advertise: its port and, when it is bound to one
    /// address rather than all, that address (an `ipv4hint` or `ipv6hint`).
    public struct Listener: Sendable, Hashable {
        public var port: UInt16
        public var address: IPAddress?

        public init(port: UInt16, address: IPAddress? = nil) {
            self.port = port
            self.address = address
        }
    }

    /// The SVCB records that designate `name`'s encrypted listeners: DoH (priority 1, `alpn=h2,
    /// http/1.1`, `dohpath`) and DoT (priority 2, `alpn=dot`), each with its port and address hint.
    /// Empty when there is neither.
    public static func advertisement(name: DomainName, doh: Listener?, dot: Listener?) -> [ServiceBinding] {
        func hints(_ listener: Listener) -> [ServiceBinding.Parameter] {
            guard let address = listener.address else { return [] }
            return [address.family == .ipv4 ? .ipv4Hint([address]) : .ipv6Hint([address])]
        }
        var records: [ServiceBinding] = []
        if let doh {
            records.append(
                ServiceBinding(
                    priority: 1, target: name,
                    parameters: [.alpn(["h2", "http/1.1"]), .port(doh.port), ServiceBinding.dohPath(dohPathTemplate)] + hints(doh)))
        }
        if let dot {
            records.append(ServiceBinding(priority: 2, target: name, parameters: [.alpn(["dot"]), .port(dot.port)] + hints(dot)))
        }
        return records
    }

    /// An encrypted resolver a DDR answer designates.
    public struct Designation: Sendable, Hashable {
        public enum Transport: Sendable, Hashable {
            /// DNS over HTTPS at `path` (the `dohpath` template without its `{?dns}`).
            case doh(path: String)
            /// DNS over TLS (RFC 7858).
            case dot
        }

        public var transport: Transport
        /// The name its certificate must be valid for, and the TLS server name.
        public var target: DomainName
        public var port: UInt16
        /// The SVCB priority: lower first.
        public var priority: UInt16
        /// The address hints of its record.
        public var hints: [IPAddress]
    }

    /// A record a client cannot use, and why.
    public struct Skipped: Sendable, Hashable {
        public var record: ServiceBinding
        public var reason: String

        public init(record: ServiceBinding, reason: String) {
            self.record = record
            self.reason = reason
        }
    }

    /// The path of a `dohpath` URI template of the form `/PATH{?dns}` — the form DoH servers
    /// advertise (RFC 9461 §5) — or nil for any other: a template with more after `{?dns}` or
    /// other variables, or a path with characters outside RFC 3986's `pchar` and `/` (no `?`,
    /// `#`, spaces or control bytes: nothing a forger could use to change the URL it becomes).
    static func path(ofTemplate template: String) -> String? {
        let bytes = Array(template.utf8), marker = Array("{?dns}".utf8)
        guard bytes.count > marker.count, bytes.first == UInt8(ascii: "/"), bytes.suffix(marker.count).elementsEqual(marker) else { return nil }
        let path = bytes.dropLast(marker.count)
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@/%".utf8)
        guard path.allSatisfy(allowed.contains) else { return nil }
        return String(decoding: path, as: UTF8.self)
    }

    /// `text` with every byte outside printable ASCII as `\xNN`: what came over plain DNS reaches a
    /// terminal only so (F62-4: escape sequences could repaint a refusal as "verified").
    static func printable(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            if (0x20...0x7e).contains(byte), byte != UInt8(ascii: "\\") {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "\\x" + (byte < 16 ? "0" : "") + String(byte, radix: 16)
            }
        }
        return out
    }

    /// What `records` (the SVCB answer for `_dns.resolver.arpa`) designate, in priority order — a
    /// record with both `h2` and `dot` gives two — and the records that designate nothing a client
    /// of DoH or DoT can use: AliasMode (RFC 9462 §4 forbids it here), a target of `.` (the owner,
    /// `_dns.resolver.arpa`, which no certificate names), no `alpn`, or `h2` without a `dohpath`
    /// template that starts with `/` and carries `{?dns}` (RFC 9461 §5).
    public static func designations(_ records: [ServiceBinding]) -> (designations: [Designation], skipped: [Skipped]) {
        var designations: [Designation] = []
        var skipped: [Skipped] = []
        for record in records.sorted(by: { $0.priority < $1.priority }) {
            func skip(_ reason: String) { skipped.append(Skipped(record: record, reason: reason)) }
            if record.isAlias {
                skip("AliasMode is not allowed for _dns.resolver.arpa")
                continue
            }
            if record.target == .root {
                skip("the target is '.', the owner name, which no certificate can name")
                continue
            }
            // The target becomes a URL's host and the TLS name: a host name, never an address
            // (a certificate for an address would stand in for the name check) or anything a URL
            // parser reads otherwise (`evil.test:1@127.0.0.1`).
            guard record.target.isHostName, !record.target.description.contains("_") else {
                skip("the target is not a host name")
                continue
            }
            if IPAddress(record.target.description) != nil || record.target.description.split(separator: ".").last?.allSatisfy(\.isNumber) == true {
                skip("the target is an IP address, not a name")
                continue
            }
            let alpn = record.alpn
            let hints = record.ipv4Hints + record.ipv6Hints
            var found = false
            if alpn.contains("h2") || alpn.contains("http/1.1") {
                if let template = record.dohPath, template.hasPrefix("/"), let path = Self.path(ofTemplate: template) {
                    designations.append(
                        Designation(
                            transport: .doh(path: path), target: record.target, port: record.port ?? 443, priority: record.priority, hints: hints))
                    found = true
                } else {
                    skip("alpn offers HTTP but dohpath is missing, or is not of the form /PATH{?dns}")
                }
            }
            if alpn.contains("dot") {
                designations.append(
                    Designation(transport: .dot, target: record.target, port: record.port ?? 853, priority: record.priority, hints: hints))
                found = true
            }
            if !found, !(alpn.contains("h2") || alpn.contains("http/1.1")) {
                skip(
                    alpn.isEmpty
                        ? "no alpn: no transport is named" : "no transport this client speaks (alpn \(printable(alpn.joined(separator: ","))))")
            }
        }
        return (designations, skipped)
    }
}
