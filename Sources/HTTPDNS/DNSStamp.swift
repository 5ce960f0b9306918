import DNSCore
import Foundation

/// A DNS stamp (`sdns://…`, dnscrypt.info/stamps-specifications): a resolver's protocol, address,
/// host name, path and properties in one string, as public resolver lists publish them.
///
/// Read here: DNS over HTTPS (`0x02`), DNS over TLS (`0x03`) and plain DNS (`0x00`). Refused with a
/// message saying why: DNSCrypt (`0x01`), DNS over QUIC (`0x04`), Oblivious DoH targets and relays
/// (`0x05`, `0x85`) and DNSCrypt relays (`0x81`) — protocols this resolver does not speak.
///
/// ```swift
/// let stamp = try DNSStamp("sdns://AgcAAAAAAAAABzEuMC4wLjEAEmRucy5jbG91ZGZsYXJlLmNvbQovZG5zLXF1ZXJ5")
/// let upstream = try UpstreamEndpoint(stamp: stamp)   // https://dns.cloudflare.com/dns-query via 1.0.0.1
/// ```
public struct DNSStamp: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        case plain
        case doh
        case dot
    }

    /// What the resolver's operator says of it (the stamp's properties).
    public struct Properties: OptionSet, Sendable, Hashable {
        public let rawValue: UInt64
        public init(rawValue: UInt64) { self.rawValue = rawValue }
        public static let dnssec = Properties(rawValue: 1)
        public static let noLogs = Properties(rawValue: 2)
        public static let noFilter = Properties(rawValue: 4)
    }

    public var kind: Kind
    public var properties: Properties
    /// The address to connect to, when the stamp gives one (DoH and DoT stamps may leave it out).
    public var address: IPAddress?
    /// The port: the one in the address or host field, else 53 (plain), 443 (DoH), 853 (DoT).
    public var port: Int
    /// The server's host name (DoH, DoT): the name its certificate is checked against.
    public var host: String?
    /// The DoH path, e.g. `/dns-query`.
    public var path: String?
    /// SHA-256 digests of the DER `tbsCertificate` of certificates in the server's chain (any one
    /// of them must be there) — not of a public key: they cannot become SPKI pins.
    public var certificateHashes: [[UInt8]]
    /// Addresses for resolving ``host`` when ``address`` is left out.
    public var bootstrap: [IPAddress]

    /// Decodes `text`.
    /// - Throws: ``/DNSCore/DNSError`` with ``/DNSCore/DNSError/Code/invalidConfiguration`` naming what is wrong.
    public init(_ text: String) throws(DNSError) {
        guard text.hasPrefix("sdns://") else { throw Self.fail("does not start with sdns://") }
        var encoded = String(text.dropFirst(7)).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while encoded.count % 4 != 0 { encoded += "=" }
        guard let data = Data(base64Encoded: encoded), !data.isEmpty else { throw Self.fail("is not base64url") }
        var reader = Reader(bytes: Array(data))
        let protocolByte = try reader.byte()
        switch protocolByte {
        case 0x00: kind = .plain
        case 0x02: kind = .doh
        case 0x03: kind = .dot
        case 0x01: throw Self.fail("is a DNSCrypt stamp: this resolver speaks DoH, DoT and plain DNS, not DNSCrypt")
        case 0x04: throw Self.fail("is a DNS-over-QUIC stamp: not supported (use the resolver's DoH or DoT stamp)")
        case 0x05: throw Self.fail("is an Oblivious DoH target stamp: ODoH is not supported")
        case 0x81: throw Self.fail("is a DNSCrypt relay stamp: relays are not supported")
        case 0x85: throw Self.fail("is an Oblivious DoH relay stamp: relays are not supported")
        default: throw Self.fail("has the unknown protocol 0x\(String(protocolByte, radix: 16))")
        }
        properties = Properties(rawValue: try reader.uint64LittleEndian())
        let addressField = try reader.string()
        var port = kind == .plain ? 53 : kind == .doh ? 443 : 853
        address = nil
        if !addressField.isEmpty {
            guard let (ip, given) = IPAddress.endpoint(addressField) else { throw Self.fail("has the address '\(addressField)', not IP[:port]") }
            address = ip
            if let given { port = given }
        }
        certificateHashes = []
        host = nil
        path = nil
        bootstrap = []
        if kind != .plain {
            certificateHashes = try reader.set().filter { !$0.isEmpty }
            for hash in certificateHashes where hash.count != 32 {
                throw Self.fail("has a certificate hash of \(hash.count) bytes (SHA-256 is 32)")
            }
            var hostField = try reader.string()
            if let colon = hostField.lastIndex(of: ":"), !hostField.hasSuffix("]"), let given = Int(hostField[hostField.index(after: colon)...]) {
                port = given
                hostField = String(hostField[..<colon])
            }
            guard !hostField.isEmpty else { throw Self.fail("has no host name") }
            host = hostField
            if kind == .doh {
                let pathField = try reader.string()
                guard pathField.hasPrefix("/") else { throw Self.fail("has the path '\(pathField)', which does not start with /") }
                path = pathField
            }
            if !reader.isAtEnd {
                for item in try reader.set() where !item.isEmpty {
                    let text = String(decoding: item, as: UTF8.self)
                    guard let ip = IPAddress(text) else { throw Self.fail("has the bootstrap address '\(text)', not an IP") }
                    bootstrap.append(ip)
                }
            }
        }
        guard reader.isAtEnd else { throw Self.fail("has \(reader.remaining) bytes after its last field") }
        guard (1...65_535).contains(port) else { throw Self.fail("has the port \(port)") }
        self.port = port
    }

    private static func fail(_ problem: String) -> DNSError {
        DNSError(.invalidConfiguration, "the DNS stamp \(problem)")
    }

    /// Reads the stamp's fields: bytes, LP (a length byte, then that many bytes) and VLP (LP items,
    /// each length byte's 0x80 bit set when another item follows).
    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        var isAtEnd: Bool { index == bytes.count }
        var remaining: Int { bytes.count - index }

        mutating func byte() throws(DNSError) -> UInt8 {
            guard index < bytes.count else { throw DNSStamp.fail("ends early") }
            defer { index += 1 }
            return bytes[index]
        }

        mutating func uint64LittleEndian() throws(DNSError) -> UInt64 {
            var value: UInt64 = 0
            for shift in 0..<8 { value |= UInt64(try byte()) << (8 * UInt64(shift)) }
            return value
        }

        mutating func item(length: Int) throws(DNSError) -> [UInt8] {
            guard index + length <= bytes.count else { throw DNSStamp.fail("ends inside a field") }
            defer { index += length }
            return Array(bytes[index..<(index + length)])
        }

        mutating func string() throws(DNSError) -> String {
            let length = Int(try byte())
            let data = try item(length: length)
            guard let text = String(validating: data, as: UTF8.self) else { throw DNSStamp.fail("has a field that is not UTF-8") }
            return text
        }

        mutating func set() throws(DNSError) -> [[UInt8]] {
            var items: [[UInt8]] = []
            while true {
                let length = try byte()
                items.append(try item(length: Int(length & 0x7f)))
                if length & 0x80 == 0 { return items }
                guard items.count < 64 else { throw DNSStamp.fail("has a set of more than 64 items") }
            }
        }
    }
}

extension UpstreamEndpoint {
    /// The upstream a DoH or DoT stamp describes — `https://host[:port]/path` or `tls://host:port` —
    /// reached at the stamp's address (and its bootstrap addresses), the certificate checked against
    /// the host name. The stamp's certificate hashes become ``certificateHashes``, checked on every
    /// connection before a query is sent (a DoH server that does not speak HTTP/2 is then refused:
    /// the HTTP/1.1 transfers cannot show the chain again).
    /// - Throws: ``/DNSCore/DNSError`` with ``/DNSCore/DNSError/Code/invalidConfiguration`` for a stamp
    ///   that is plain DNS (not a trusted upstream), or one that gives no address to reach the host by.
    public init(stamp: DNSStamp) throws(DNSError) {
        let bootstrap = (stamp.address.map { [$0] } ?? []) + stamp.bootstrap.filter { $0 != stamp.address }
        switch stamp.kind {
        case .plain:
            throw DNSError(.invalidConfiguration, "a plain DNS stamp cannot be a trusted upstream (no encryption); use it in forward: as dns:")
        case .dot:
            guard let host = stamp.host ?? stamp.address?.description else { throw DNSError(.invalidConfiguration, "the DoT stamp has no host") }
            self = try .dot(IPAddress(host).map { "\($0.urlHost):\(stamp.port)" } ?? "\(host):\(stamp.port)")
            self.bootstrap = bootstrap.filter { $0.description != self.host }
            certificateHashes = stamp.certificateHashes
        case .doh:
            guard let host = stamp.host, let path = stamp.path else { throw DNSError(.invalidConfiguration, "the DoH stamp has no host or path") }
            let authority = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
            let url = "https://\(authority)\(stamp.port == 443 ? "" : ":\(stamp.port)")\(path)"
            try self.init(.doh(.get), url: url, bootstrap: bootstrap)
            certificateHashes = stamp.certificateHashes
        }
    }
}
