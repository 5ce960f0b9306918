import DNSCore

/// Names counted and cut by labels as DNSSEC counts them (RFC 4034 §3.1.3: neither the root nor a
/// leading `*` label counts). Apart from ``DNSSECVerifier`` (which forwards to it) so that the
/// record parsers, fuzzed without swift-crypto, need no more than this.
enum NameLabels {
    /// The labels of `name` that count for an RRSIG's Labels field.
    static func count(_ name: DomainName) -> Int {
        var labels = 0
        var index = 0
        var first = true
        while index < name.wire.count, name.wire[index] != 0 {
            let length = Int(name.wire[index])
            if !(first && length == 1 && name.wire[index + 1] == UInt8(ascii: "*")) { labels += 1 }
            first = false
            index += 1 + length
        }
        return labels
    }

    /// The last `labels` labels of a wire name (with the root).
    static func suffix(of wire: [UInt8], labels: Int) -> [UInt8] {
        var starts: [Int] = []
        var index = 0
        while index < wire.count, wire[index] != 0 {
            starts.append(index)
            index += 1 + Int(wire[index])
        }
        guard labels > 0 else { return [0] }
        guard labels < starts.count else { return wire }
        return Array(wire[starts[starts.count - labels]...])
    }

    /// Whether `name` is `zone` or below it.
    static func isSubdomain(_ name: DomainName, of zone: DomainName) -> Bool {
        let zoneLabels = count(zone)
        return suffix(of: name.wire, labels: zoneLabels) == zone.wire && count(name) >= zoneLabels
    }
}
