/// The RDATA of an SVCB (type 64) or HTTPS (type 65) record (RFC 9460 §2.2), decoded and checked.
///
/// ```swift
/// let binding = try ServiceBinding(rdata: bytes)
/// if !binding.isAlias { print(binding.target, binding.alpn, binding.ipv4Hints) }
/// ```
///
/// Forged HTTPS records with address hints are injected on hijacked paths: callers must never connect
/// to a hint that the trusted A/AAAA answers do not hold (see ``hintsOutside(_:)``).
public struct ServiceBinding: Sendable, Hashable {
    /// One SvcParam (RFC 9460 §7, §14.3.2).
    public enum Parameter: Sendable, Hashable {
        /// Keys a client must understand to use the record (key 0).
        case mandatory([UInt16])
        /// ALPN protocol identifiers, in the record's order (key 1).
        case alpn([String])
        /// The default ALPN ("http/1.1" for HTTPS) is not supported (key 2).
        case noDefaultALPN
        /// The port to connect to (key 3).
        case port(UInt16)
        /// IPv4 addresses of the target (key 4).
        case ipv4Hint([IPAddress])
        /// An Encrypted ClientHello configuration list, opaque here (key 5).
        case ech([UInt8])
        /// IPv6 addresses of the target (key 6).
        case ipv6Hint([IPAddress])
        /// A key this decoder does not know, with its raw value.
        case unknown(key: UInt16, value: [UInt8])

        /// The SvcParamKey number.
        public var key: UInt16 {
            switch self {
            case .mandatory: return 0
            case .alpn: return 1
            case .noDefaultALPN: return 2
            case .port: return 3
            case .ipv4Hint: return 4
            case .ech: return 5
            case .ipv6Hint: return 6
            case let .unknown(key, _): return key
            }
        }

        /// The presentation name of `key` (`keyNNNNN` for unknown ones).
        public static func name(of key: UInt16) -> String {
            let names = ["mandatory", "alpn", "no-default-alpn", "port", "ipv4hint", "ech", "ipv6hint", "dohpath"]
            return Int(key) < names.count ? names[Int(key)] : "key\(key)"
        }
    }

    /// 0 is AliasMode; any other value is ServiceMode, lower preferred.
    public var priority: UInt16
    /// The alias target, or the service endpoint (`.` means the owner name itself).
    public var target: DomainName
    /// ServiceMode parameters in key order (empty in AliasMode, whose parameters are ignored).
    public var parameters: [Parameter]

    public var isAlias: Bool { priority == 0 }

    /// A record to encode (``rdata``): `parameters` are kept in key order, as the wire needs them.
    public init(priority: UInt16, target: DomainName, parameters: [Parameter]) {
        self.priority = priority
        self.target = target
        self.parameters = parameters.sorted { $0.key < $1.key }
    }

    /// The record's RDATA (RFC 9460 §2.2): the priority, the target uncompressed, then each
    /// parameter as key, length and value in key order; what ``init(rdata:)`` decodes back (hints
    /// of the other family are left out of `ipv4hint` and `ipv6hint`). A
    /// value over 65,535 bytes is cut to its length field's reach, and the whole RDATA's length is
    /// the writer's to check (a DNS record holds 65,535 bytes).
    public var rdata: [UInt8] {
        var out: [UInt8] = [UInt8(priority >> 8), UInt8(truncatingIfNeeded: priority)]
        out += target.wire
        for parameter in parameters {
            var value = Self.value(of: parameter)
            if value.count > 0xffff { value.removeLast(value.count - 0xffff) }
            let key = parameter.key
            out += [UInt8(key >> 8), UInt8(truncatingIfNeeded: key), UInt8(value.count >> 8), UInt8(truncatingIfNeeded: value.count)]
            out += value
        }
        return out
    }

    /// A parameter's value in wire form. ALPN identifiers over 255 bytes or empty are left out (a
    /// length byte cannot say them).
    private static func value(of parameter: Parameter) -> [UInt8] {
        switch parameter {
        case let .mandatory(keys): return keys.flatMap { [UInt8($0 >> 8), UInt8(truncatingIfNeeded: $0)] }
        case let .alpn(identifiers):
            return identifiers.flatMap { identifier -> [UInt8] in
                let bytes = Array(identifier.utf8)
                return (1...255).contains(bytes.count) ? [UInt8(bytes.count)] + bytes : []
            }
        case .noDefaultALPN: return []
        case let .port(port): return [UInt8(port >> 8), UInt8(truncatingIfNeeded: port)]
        case let .ipv4Hint(addresses): return addresses.filter { $0.family == .ipv4 }.flatMap(\.bytes)
        case let .ipv6Hint(addresses): return addresses.filter { $0.family == .ipv6 }.flatMap(\.bytes)
        case let .ech(config): return config
        case let .unknown(_, value): return value
        }
    }

    /// The URI template of a DoH endpoint (`dohpath`, key 7, RFC 9461 §5), e.g.
    /// `/dns-query{?dns}`; nil without one, or when it is not UTF-8.
    public var dohPath: String? {
        for case let .unknown(7, value) in parameters { return String(validating: value, as: UTF8.self) }
        return nil
    }

    /// A `dohpath` parameter (key 7) holding `template`.
    public static func dohPath(_ template: String) -> Parameter { .unknown(key: 7, value: Array(template.utf8)) }

    /// Decodes and checks RDATA: an uncompressed target name, keys strictly increasing, each value in
    /// its key's format, `mandatory` naming only keys that are present (and never itself).
    /// - Throws: ``DNSError`` (`malformed_response`) saying what is wrong.
    public init(rdata: [UInt8]) throws(DNSError) {
        func malformed(_ why: String) -> DNSError { DNSError(.malformedResponse, "SVCB/HTTPS record: \(why)") }
        guard rdata.count >= 3 else { throw malformed("\(rdata.count) bytes is too short") }
        priority = UInt16(rdata[0]) << 8 | UInt16(rdata[1])
        var index = 2
        var wire: [UInt8] = []
        while true {
            guard index < rdata.count else { throw malformed("the target name runs past the record") }
            let length = Int(rdata[index])
            guard length & 0xC0 == 0 else { throw malformed("the target name is compressed or uses a reserved label type") }
            guard length <= DomainName.maxLabelLength else { throw malformed("a target label of \(length) bytes") }
            guard index + 1 + length <= rdata.count else { throw malformed("the target name runs past the record") }
            wire.append(UInt8(length))
            wire += rdata[(index + 1)..<(index + 1 + length)].map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }
            index += 1 + length
            guard wire.count <= DomainName.maxWireLength else { throw malformed("the target name is longer than 255 bytes") }
            if length == 0 { break }
        }
        target = DomainName(uncheckedWire: wire)
        parameters = []
        var previous: Int = -1
        while index < rdata.count {
            guard index + 4 <= rdata.count else { throw malformed("a parameter header runs past the record") }
            let key = UInt16(rdata[index]) << 8 | UInt16(rdata[index + 1])
            let length = Int(rdata[index + 2]) << 8 | Int(rdata[index + 3])
            index += 4
            guard index + length <= rdata.count else { throw malformed("\(Parameter.name(of: key)) runs past the record") }
            guard Int(key) > previous else { throw malformed("keys not in strictly increasing order at \(Parameter.name(of: key))") }
            previous = Int(key)
            let value = Array(rdata[index..<(index + length)])
            index += length
            parameters.append(try Self.parameter(key, value, malformed))
        }
        if case let .mandatory(keys)? = parameters.first(where: { $0.key == 0 }) {
            let present = Set(parameters.map(\.key))
            for key in keys where !present.contains(key) {
                throw malformed("mandatory names \(Parameter.name(of: key)), which is absent")
            }
        }
        // RFC 9460 §2.4.2: in AliasMode, parameters are ignored.
        if priority == 0 { parameters = [] }
    }

    private static func parameter(_ key: UInt16, _ value: [UInt8], _ malformed: (String) -> DNSError) throws(DNSError) -> Parameter {
        let name = Parameter.name(of: key)
        switch key {
        case 0:
            guard !value.isEmpty, value.count % 2 == 0 else { throw malformed("mandatory must be a non-empty list of keys") }
            let keys = stride(from: 0, to: value.count, by: 2).map { UInt16(value[$0]) << 8 | UInt16(value[$0 + 1]) }
            guard !keys.contains(0) else { throw malformed("mandatory lists itself") }
            guard zip(keys, keys.dropFirst()).allSatisfy({ $0 < $1 }) else { throw malformed("mandatory keys not strictly increasing") }
            return .mandatory(keys)
        case 1:
            guard !value.isEmpty else { throw malformed("alpn is empty") }
            var identifiers: [String] = []
            var index = 0
            while index < value.count {
                let length = Int(value[index])
                guard length > 0, index + 1 + length <= value.count else { throw malformed("an alpn identifier is empty or runs past its value") }
                identifiers.append(String(decoding: value[(index + 1)...(index + length)], as: UTF8.self))
                index += 1 + length
            }
            return .alpn(identifiers)
        case 2:
            guard value.isEmpty else { throw malformed("no-default-alpn has a value") }
            return .noDefaultALPN
        case 3:
            guard value.count == 2 else { throw malformed("port is \(value.count) bytes, not 2") }
            return .port(UInt16(value[0]) << 8 | UInt16(value[1]))
        case 4, 6:
            let size = key == 4 ? 4 : 16
            guard !value.isEmpty, value.count % size == 0 else { throw malformed("\(name) is not a non-empty list of \(size)-byte addresses") }
            let addresses = stride(from: 0, to: value.count, by: size).compactMap { IPAddress(bytes: value[$0..<($0 + size)]) }
            return key == 4 ? .ipv4Hint(addresses) : .ipv6Hint(addresses)
        case 5:
            guard !value.isEmpty else { throw malformed("ech is empty") }
            return .ech(value)
        case 65535:
            throw malformed("key 65535 is reserved")
        default:
            return .unknown(key: key, value: value)
        }
    }

    /// The ALPN identifiers (empty without `alpn`).
    public var alpn: [String] {
        for case let .alpn(list) in parameters { return list }
        return []
    }

    /// The port, when the record sets one.
    public var port: UInt16? {
        for case let .port(port) in parameters { return port }
        return nil
    }

    public var ipv4Hints: [IPAddress] {
        for case let .ipv4Hint(list) in parameters { return list }
        return []
    }

    public var ipv6Hints: [IPAddress] {
        for case let .ipv6Hint(list) in parameters { return list }
        return []
    }

    /// The address hints that `trusted` (the trusted A/AAAA answers) does not hold: never to be dialled.
    public func hintsOutside(_ trusted: some Collection<IPAddress>) -> [IPAddress] {
        (ipv4Hints + ipv6Hints).filter { !trusted.contains($0) }
    }
}
