/// Names answered locally, never asked upstream: records of the operator's own (`records:`, hosts
/// files) and names blocked by lists, with exceptions (`block:`).
///
/// A name with local records is answered from them alone (a CNAME chain is followed through the
/// local records and, where it leaves them, looked up as usual); every other name is looked up as
/// usual unless a block list covers it and no allow entry does. Addresses get PTR records at their
/// reverse names unless those names have PTR records of their own (dnsmasq's rule for hosts files).
///
/// ```swift
/// var builder = LocalZone.Builder()
/// try builder.addRecord("nas.home.test A 192.168.1.10")
/// builder.addBlockList(Array("ads.example.test\n".utf8), source: "inline")
/// let zone = try builder.build()
/// zone.answer(try DomainName("x.ads.example.test"), type: .a)   // .blocked(.nxdomain)
/// ```
public final class LocalZone: Sendable, Hashable {
    /// What a blocked name is answered with.
    public enum BlockAnswer: String, Sendable, Hashable, CaseIterable {
        /// NXDOMAIN: the name does not exist (the default; what dnscrypt-proxy and Blocky answer).
        case nxdomain
        /// `0.0.0.0` for A, `::` for AAAA, no data for other types (Pi-hole's default).
        case nullIP = "null-ip"
        /// REFUSED.
        case refused
    }

    /// One local record.
    public struct Record: Sendable, Hashable {
        public enum Data: Sendable, Hashable {
            /// A or AAAA.
            case address(IPAddress)
            /// CNAME or PTR.
            case name(DomainName)
            /// TXT: its character-strings (each at most 255 bytes).
            case text([[UInt8]])
        }

        public var owner: DomainName
        public var type: RecordType
        public var ttl: UInt32
        public var data: Data

        public init(owner: DomainName, type: RecordType, ttl: UInt32, data: Data) {
            self.owner = owner
            self.type = type
            self.ttl = ttl
            self.data = data
        }

        /// The record's RDATA in wire form (names uncompressed).
        public var rdata: [UInt8] {
            switch data {
            case let .address(ip): return ip.bytes
            case let .name(name): return name.wire
            case let .text(strings): return strings.flatMap { [UInt8(truncatingIfNeeded: $0.count)] + $0 }
            }
        }
    }

    /// What the local data says about a question.
    public enum Answer: Sendable, Hashable {
        /// The name is local: these records answer it (a CNAME chain first, each CNAME owned by the
        /// previous one's target), and `continueAt` is the name where the chain leaves the local
        /// data (to be looked up as usual), or nil. No records and no `continueAt`: NODATA.
        case records([Record], continueAt: DomainName?)
        /// A block list covers the name.
        case blocked(BlockAnswer)
    }

    /// The longest CNAME chain followed through local records (as BIND's 16-link limit, halved).
    static let maxChain = 8

    private let records: [DomainName: [Record]]
    private let blocked: NameSet
    private let allowed: NameSet
    public let blockAnswer: BlockAnswer
    /// The TTL of blocked answers (and of the NXDOMAIN's negative caching).
    public let blockTTL: UInt32

    /// Local records, PTR records made from addresses included.
    public var recordCount: Int { records.values.reduce(0) { $0 + $1.count } }
    /// Entries of the block lists.
    public var blockedCount: Int { blocked.count }
    /// Entries of the allow lists.
    public var allowedCount: Int { allowed.count }
    /// What each list file gave, in the order read (for the log).
    public let lists: [ListReport]
    /// What the block and allow lists hold in memory, in bytes.
    public var listMemoryBytes: Int { blocked.memoryBytes + allowed.memoryBytes }

    /// What one list file gave.
    public struct ListReport: Sendable, Hashable, CustomStringConvertible {
        public var source: String
        /// Whether it was an allow list.
        public var allow: Bool
        public var count: Builder.ListCount

        public var description: String {
            var text = "\(allow ? "allow" : "block") list \(source): \(count.names) names"
            if count.skipped > 0 { text += ", \(count.skipped) lines skipped (the first is line \(count.firstSkippedLine ?? 0))" }
            return text
        }
    }

    fileprivate init(
        records: [DomainName: [Record]], blocked: NameSet, allowed: NameSet, blockAnswer: BlockAnswer, blockTTL: UInt32, lists: [ListReport]
    ) {
        self.lists = lists
        self.records = records
        self.blocked = blocked
        self.allowed = allowed
        self.blockAnswer = blockAnswer
        self.blockTTL = blockTTL
    }

    /// What the local data answers for `name` and `type`, or nil when the name is not local and
    /// not blocked (look it up as usual).
    public func answer(_ name: DomainName, type: RecordType) -> Answer? {
        guard let first = records[name] else { return isBlocked(name) ? .blocked(blockAnswer) : nil }
        var chain: [Record] = []
        var current = first
        for _ in 0..<Self.maxChain {
            guard type != .cname, let alias = current.first(where: { $0.type == .cname }), case let .name(target) = alias.data else {
                chain.append(contentsOf: current.filter { $0.type == type })
                return .records(chain, continueAt: nil)
            }
            chain.append(alias)
            guard let next = records[target] else { return .records(chain, continueAt: target) }
            current = next
        }
        return .records(chain, continueAt: nil)
    }

    /// Whether a block list covers `name` and no allow entry does.
    public func isBlocked(_ name: DomainName) -> Bool {
        blocked.covers(name) && !allowed.covers(name)
    }

    /// Whether `name` has local records of its own.
    public func hasRecords(_ name: DomainName) -> Bool { records[name] != nil }

    public static func == (lhs: LocalZone, rhs: LocalZone) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    /// The name under `in-addr.arpa` or `ip6.arpa` that PTR records for `ip` are owned by.
    public static func reverseName(of ip: IPAddress) -> DomainName {
        var wire: [UInt8] = []
        let digits = Array("0123456789abcdef".utf8)
        switch ip {
        case .v4:
            for byte in ip.bytes.reversed() {
                let text = Array(String(byte).utf8)
                wire.append(UInt8(text.count))
                wire.append(contentsOf: text)
            }
            wire.append(contentsOf: [7] + Array("in-addr".utf8) + [4] + Array("arpa".utf8) + [0])
        case .v6:
            for byte in ip.bytes.reversed() {
                wire.append(contentsOf: [1, digits[Int(byte & 0x0f)], 1, digits[Int(byte >> 4)]])
            }
            wire.append(contentsOf: [3] + Array("ip6".utf8) + [4] + Array("arpa".utf8) + [0])
        }
        return DomainName(uncheckedWire: wire)
    }
}

extension LocalZone {
    /// Collects records, hosts files and lists, then checks them and builds the zone.
    public struct Builder: Sendable {
        /// The TTL of records given without one and of hosts-file entries. Default 300 s.
        public var defaultTTL: UInt32 = 300
        public var blockAnswer: BlockAnswer = .nxdomain
        /// The TTL of blocked answers. Default 300 s.
        public var blockTTL: UInt32 = 300
        private var records: [DomainName: [Record]] = [:]
        private var blocked = NameSet()
        private var allowed = NameSet()
        private var reports: [ListReport] = []

        public init() {}

        /// How much of a list was taken.
        public struct ListCount: Sendable, Hashable {
            /// Entries taken.
            public var names = 0
            /// Lines that held something but no entry this reader understands (regular
            /// expressions, cosmetic filters, invalid names).
            public var skipped = 0
            /// The first such line's number.
            public var firstSkippedLine: Int?
        }

        /// Adds one record in presentation form: `NAME [TTL] [IN] TYPE DATA`, TYPE one of A, AAAA,
        /// CNAME, PTR, TXT (`"quoted strings"` or bare words).
        /// - Throws: ``DNSError`` with ``DNSError/Code/invalidConfiguration`` saying what is wrong.
        public mutating func addRecord(_ line: String) throws(DNSError) {
            try add(Self.parseRecord(line, defaultTTL: defaultTTL))
        }

        /// Adds a record.
        public mutating func add(_ record: Record) throws(DNSError) {
            var list = records[record.owner] ?? []
            if list.contains(record) { return }
            if record.type == .cname, !list.isEmpty {
                throw DNSError(.invalidConfiguration, "\(record.owner): a CNAME cannot stand beside other records (RFC 1034 §3.6.2)")
            }
            if list.contains(where: { $0.type == .cname }) {
                throw DNSError(.invalidConfiguration, "\(record.owner): has a CNAME, so it cannot have other records (RFC 1034 §3.6.2)")
            }
            list.append(record)
            records[record.owner] = list
        }

        /// Adds the entries of a hosts file (`IP name [alias ...]`, `#` comments), each name an A
        /// or AAAA record with ``defaultTTL``.
        /// - Throws: ``DNSError`` naming `source` and the line of an entry that is not an address
        ///   and names.
        @discardableResult
        public mutating func addHosts(_ text: String, source: String) throws(DNSError) -> Int {
            var count = 0
            for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let line = raw.prefix { $0 != "#" }
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
                guard let first = fields.first else { continue }
                guard let ip = IPAddress(first), fields.count > 1 else {
                    throw DNSError(.invalidConfiguration, "\(source):\(number + 1): expected 'IP name [alias ...]'")
                }
                for field in fields.dropFirst() {
                    let name: DomainName
                    do { name = try DomainName(String(field)) } catch {
                        throw DNSError(.invalidConfiguration, "\(source):\(number + 1): \(error.message)")
                    }
                    try add(Record(owner: name, type: ip.bytes.count == 4 ? .a : .aaaa, ttl: defaultTTL, data: .address(ip)))
                    count += 1
                }
            }
            return count
        }

        /// Adds a block list: one entry a line, in any of the usual forms —
        /// `ads.test` (the name and every name under it), `*.ads.test` (names under it only),
        /// `0.0.0.0 ads.test [more names]` (hosts form: those names only), `||ads.test^` (adblock
        /// form: the name and every name under it), and `@@||ads.test^` (an exception, as the allow
        /// list). `#` and `!` start comments; anything else is counted as skipped.
        @discardableResult
        public mutating func addBlockList(_ bytes: [UInt8], source: String) -> ListCount {
            let count = Self.read(bytes, into: &blocked, exceptions: &allowed)
            reports.append(ListReport(source: source, allow: false, count: count))
            return count
        }

        /// Adds an allow list (the same forms): names it covers are never blocked.
        @discardableResult
        public mutating func addAllowList(_ bytes: [UInt8], source: String) -> ListCount {
            var ignored = NameSet()
            let count = Self.read(bytes, into: &allowed, exceptions: &ignored)
            reports.append(ListReport(source: source, allow: true, count: count))
            return count
        }

        /// Checks the records and builds the zone; addresses get PTR records at their reverse names
        /// where no PTR was given for those names.
        public func build() throws(DNSError) -> LocalZone {
            var all = records
            var explicitPTR = Set<DomainName>()
            for (owner, list) in records where list.contains(where: { $0.type == .ptr }) { explicitPTR.insert(owner) }
            for owner in records.keys.sorted(by: { $0.wire.lexicographicallyPrecedes($1.wire) }) {
                for record in records[owner] ?? [] {
                    guard case let .address(ip) = record.data else { continue }
                    let reverse = LocalZone.reverseName(of: ip)
                    guard !explicitPTR.contains(reverse) else { continue }
                    let ptr = Record(owner: reverse, type: .ptr, ttl: record.ttl, data: .name(owner))
                    if all[reverse]?.contains(ptr) != true { all[reverse, default: []].append(ptr) }
                }
            }
            return LocalZone(records: all, blocked: blocked, allowed: allowed, blockAnswer: blockAnswer, blockTTL: blockTTL, lists: reports)
        }

        // MARK: Parsing

        static func parseRecord(_ line: String, defaultTTL: UInt32) throws(DNSError) -> Record {
            var fields = Self.fields(line)
            func fail(_ problem: String) -> DNSError {
                DNSError(.invalidConfiguration, "'\(line)': \(problem) (expected 'NAME [TTL] [IN] TYPE DATA')")
            }
            guard fields.count >= 3 else { throw fail("too few fields") }
            let owner: DomainName
            do { owner = try DomainName(fields.removeFirst()) } catch { throw fail(error.message) }
            var ttl = defaultTTL
            if let value = UInt32(fields[0]) {
                guard value <= Int32.max else { throw fail("TTL \(value) is over 2147483647 (RFC 2181 §8)") }
                ttl = value
                fields.removeFirst()
            }
            if fields.first?.uppercased() == "IN" { fields.removeFirst() }
            guard fields.count >= 2 else { throw fail("no data") }
            let type = fields.removeFirst().uppercased()
            switch type {
            case "A", "AAAA":
                guard fields.count == 1, let ip = IPAddress(fields[0]), (ip.bytes.count == 4) == (type == "A") else {
                    throw fail("'\(fields.joined(separator: " "))' is not an \(type == "A" ? "IPv4" : "IPv6") address")
                }
                return Record(owner: owner, type: type == "A" ? .a : .aaaa, ttl: ttl, data: .address(ip))
            case "CNAME", "PTR":
                guard fields.count == 1 else { throw fail("\(type) takes one name") }
                do {
                    return Record(owner: owner, type: type == "CNAME" ? .cname : .ptr, ttl: ttl, data: .name(try DomainName(fields[0])))
                } catch {
                    throw fail(error.message)
                }
            case "TXT":
                let strings = try Self.characterStrings(fields, fail: fail)
                return Record(owner: owner, type: .txt, ttl: ttl, data: .text(strings))
            default:
                throw fail("type \(type) is not one of A, AAAA, CNAME, PTR, TXT")
            }
        }

        /// Whitespace-separated fields; a `"quoted string"` (with `\"` and `\\`) is one field, kept
        /// with its quotes so that TXT can tell it from a bare word.
        private static func fields(_ line: String) -> [String] {
            var fields: [String] = []
            var current = ""
            var quoted = false, escaped = false, started = false
            for character in line {
                if quoted {
                    current.append(character)
                    if escaped {
                        escaped = false
                    } else if character == "\\" {
                        escaped = true
                    } else if character == "\"" {
                        quoted = false
                    }
                } else if character == " " || character == "\t" {
                    if started { fields.append(current) }
                    current = ""
                    started = false
                } else {
                    if character == "\"" { quoted = true }
                    current.append(character)
                    started = true
                }
            }
            if started { fields.append(current) }
            return fields
        }

        private static func characterStrings(_ fields: [String], fail: (String) -> DNSError) throws(DNSError) -> [[UInt8]] {
            var strings: [[UInt8]] = []
            for field in fields {
                var bytes: [UInt8] = []
                if field.hasPrefix("\"") {
                    guard field.count >= 2, field.hasSuffix("\"") else { throw fail("an unterminated quoted string") }
                    var escaped = false
                    for byte in field.utf8.dropFirst().dropLast() {
                        if escaped {
                            bytes.append(byte)
                            escaped = false
                        } else if byte == UInt8(ascii: "\\") {
                            escaped = true
                        } else {
                            bytes.append(byte)
                        }
                    }
                } else {
                    bytes = Array(field.utf8)
                }
                guard bytes.count <= 255 else { throw fail("a TXT string of \(bytes.count) bytes (255 at most)") }
                strings.append(bytes)
            }
            guard !strings.isEmpty else { throw fail("TXT needs at least one string") }
            return strings
        }

        /// Names in hosts files that are the host's own, not something to block.
        private static let hostsOwnNames: Set<[UInt8]> = Set(
            [
                "localhost", "localhost.localdomain", "local", "broadcasthost", "ip6-localhost", "ip6-loopback", "ip6-localnet",
                "ip6-mcastprefix", "ip6-allnodes", "ip6-allrouters", "ip6-allhosts",
            ].map { Array($0.utf8) })

        /// Reads a list line by line on its bytes (no string per line): a million entries load in
        /// well under a second in a release build.
        private static func read(_ bytes: [UInt8], into set: inout NameSet, exceptions: inout NameSet) -> ListCount {
            var count = ListCount()
            var wire: [UInt8] = []
            wire.reserveCapacity(256)
            var lineStart = 0
            var lineNumber = 0
            var tokens: [Range<Int>] = []
            tokens.reserveCapacity(8)
            // A name a line, give or take: the table is sized once rather than rehashed as it fills.
            set.reserve(bytes.reduce(0) { $0 + ($1 == 0x0a ? 1 : 0) } + 1)
            bytes.withUnsafeBufferPointer { buffer in
                while lineStart < buffer.count {
                    lineNumber += 1
                    var lineEnd = lineStart
                    while lineEnd < buffer.count, buffer[lineEnd] != 0x0a { lineEnd += 1 }
                    defer { lineStart = lineEnd + 1 }
                    tokens.removeAll(keepingCapacity: true)
                    var index = lineStart
                    while index < lineEnd {
                        let byte = buffer[index]
                        if byte == UInt8(ascii: "#") { break }
                        if byte == 0x20 || byte == 0x09 || byte == 0x0d {
                            index += 1
                            continue
                        }
                        let start = index
                        while index < lineEnd, buffer[index] != 0x20, buffer[index] != 0x09, buffer[index] != 0x0d, buffer[index] != UInt8(ascii: "#")
                        {
                            index += 1
                        }
                        tokens.append(start..<index)
                    }
                    guard let first = tokens.first else { continue }
                    if buffer[first.lowerBound] == UInt8(ascii: "!") { continue }
                    var taken = 0, bad = false
                    if tokens.count > 1, Self.isAddress(buffer[first]) {
                        // Hosts form: every name after the address, each on its own.
                        for token in tokens.dropFirst() {
                            let text = Array(buffer[token])
                            if hostsOwnNames.contains(text.map(DomainName.lowercase)) || Self.isAddress(buffer[token]) { continue }
                            if Self.wireForm(buffer[token], into: &wire), set.insert(wire: wire, .apex) { taken += 1 } else { bad = true }
                        }
                    } else if tokens.count == 1 {
                        var token = buffer[first]
                        var coverage = NameSet.Coverage.subtree
                        var exception = false, adblock = false
                        let lead = token[token.startIndex]
                        if lead == UInt8(ascii: "@"), token.starts(with: "@@||".utf8) {
                            token = token.dropFirst(4)
                            exception = true
                            adblock = true
                        } else if lead == UInt8(ascii: "|"), token.starts(with: "||".utf8) {
                            token = token.dropFirst(2)
                            adblock = true
                        } else if lead == UInt8(ascii: "*"), token.starts(with: "*.".utf8) {
                            token = token.dropFirst(2)
                            coverage = .below
                        }
                        if adblock {
                            // Adblock form: `name^`, with no options (`$third-party`…) this reader
                            // could honour.
                            if token.last == UInt8(ascii: "^") {
                                token = token.dropLast()
                            } else {
                                token = token[token.startIndex..<token.startIndex]
                            }
                        }
                        if !token.isEmpty, Self.wireForm(token, into: &wire),
                            exception ? exceptions.insert(wire: wire, coverage) : set.insert(wire: wire, coverage)
                        {
                            taken += 1
                        } else {
                            bad = true
                        }
                    } else {
                        bad = true
                    }
                    count.names += taken
                    if bad {
                        count.skipped += 1
                        if count.firstSkippedLine == nil { count.firstSkippedLine = lineNumber }
                    }
                }
            }
            return count
        }

        /// Whether `token` is an IPv4 or IPv6 address (the first field of a hosts line).
        private static func isAddress(_ token: Slice<UnsafeBufferPointer<UInt8>>) -> Bool {
            guard token.contains(where: { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: ":") }),
                token.allSatisfy({ Self.hexDigits.contains($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: ":") })
            else { return false }
            return IPAddress(String(decoding: token, as: UTF8.self)) != nil
        }

        private static let hexDigits = Set("0123456789abcdefABCDEF".utf8)

        /// Writes the lower-cased wire form of the host name `text` (letters, digits, `-`, `_`; an
        /// optional trailing dot) into `wire`; false when it is not one.
        private static func wireForm(_ text: Slice<UnsafeBufferPointer<UInt8>>, into wire: inout [UInt8]) -> Bool {
            wire.removeAll(keepingCapacity: true)
            var text = text
            if text.last == UInt8(ascii: ".") { text = text.dropLast() }
            guard !text.isEmpty, text.count <= 253 else { return false }
            var lengthAt = 0
            wire.append(0)
            for byte in text {
                if byte == UInt8(ascii: ".") {
                    let length = wire.count - lengthAt - 1
                    guard length > 0, wire[wire.count - 1] != UInt8(ascii: "-"), wire[lengthAt + 1] != UInt8(ascii: "-") else { return false }
                    wire[lengthAt] = UInt8(length)
                    lengthAt = wire.count
                    wire.append(0)
                    continue
                }
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                    wire.append(byte)
                case UInt8(ascii: "A")...UInt8(ascii: "Z"):
                    wire.append(byte | 0x20)
                default:
                    return false
                }
                guard wire.count - lengthAt - 1 <= DomainName.maxLabelLength else { return false }
            }
            let length = wire.count - lengthAt - 1
            guard length > 0, wire[wire.count - 1] != UInt8(ascii: "-"), wire[lengthAt + 1] != UInt8(ascii: "-") else { return false }
            wire[lengthAt] = UInt8(length)
            wire.append(0)
            return true
        }
    }
}
