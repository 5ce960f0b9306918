/// The on-disk form of the cache: positive and negative entries with their expiries.
///
/// Monotonic instants do not survive a restart, so each entry's remaining lifetimes are written
/// relative to the wall-clock time of the snapshot; on load, the wall-clock time since then is
/// subtracted (never negative, so a clock set backwards cannot extend an entry). Entries past their
/// stale window are dropped. Failures are not persisted.
///
/// Layout (big-endian): magic `HDNSC1\0\0`, saved-at (UInt64 Unix milliseconds), count (UInt32),
/// then per entry: name wire (UInt8 length + bytes), type (UInt16), kind (UInt8: 0 addresses,
/// 1 nxdomain, 2 nodata, 3 nxdomain and 4 nodata with the zone's SOA), source (UInt8), upstream
/// (UInt16 length + UTF-8), fresh and stale remaining milliseconds (UInt64 each), and for addresses:
/// canonical name (UInt8 length + wire, 0 for none), count (UInt16), each family (UInt8 4|6) +
/// bytes + TTL (UInt32); for kinds 3 and 4: the zone, the SOA's two names (each UInt8 length +
/// wire), its serial, refresh, retry, expire and minimum, and the TTL (UInt32 each). The zone must
/// be the entry's name or above it. Kinds 3 and 4 are newer than the format: a reader from before
/// them reports such a file corrupt and starts empty, as for any file it cannot use.
package enum CacheSnapshot {
    static let magic: [UInt8] = Array("HDNSC1".utf8) + [0, 0]
    /// Indices are the file's: new sources go at the end.
    static let sources: [Resolution.Source] = [.doh, .json, .cache, .stale, .system, .literal, .httpdns, .dot]

    package static func encode(
        _ entries: [(CacheKey, CacheEntry)], monotonicNow: ResolverInstant,
        wallMilliseconds: UInt64
    ) -> [UInt8] {
        var out = magic
        out.append64(wallMilliseconds)
        var body: [UInt8] = []
        var count: UInt32 = 0
        for (key, entry) in entries where entry.staleUntil > monotonicNow {
            let kind: UInt8
            switch entry.payload {
            case .addresses: kind = 0
            case .negative(.nxdomain, nil): kind = 1
            case .negative(_, nil): kind = 2
            case .negative(.nxdomain, _?): kind = 3
            case .negative(_, _?): kind = 4
            case .failure: continue
            }
            count += 1
            body.append(UInt8(key.name.wire.count))
            body.append(contentsOf: key.name.wire)
            body.append16(key.type.rawValue)
            body.append(kind)
            body.append(UInt8(sources.firstIndex(of: entry.source) ?? 0))
            let upstream = Array((entry.upstream ?? "").utf8.prefix(1024))
            body.append16(UInt16(upstream.count))
            body.append(contentsOf: upstream)
            body.append64(milliseconds(max(.zero, entry.expiresAt - monotonicNow)))
            body.append64(milliseconds(max(.zero, entry.staleUntil - monotonicNow)))
            if case let .addresses(addresses, canonicalName) = entry.payload {
                let canonical = canonicalName?.wire ?? []
                body.append(UInt8(canonical.count))
                body.append(contentsOf: canonical)
                body.append16(UInt16(min(addresses.count, Int(UInt16.max))))
                for address in addresses.prefix(Int(UInt16.max)) {
                    body.append(address.ip.family == .ipv4 ? 4 : 6)
                    body.append(contentsOf: address.ip.bytes)
                    body.append32(address.ttl)
                }
            } else if case let .negative(_, authority?) = entry.payload {
                for name in [authority.zone, authority.soa.primary, authority.soa.mailbox] {
                    body.append(UInt8(name.wire.count))
                    body.append(contentsOf: name.wire)
                }
                let soa = authority.soa
                for value in [soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum, authority.ttl] { body.append32(value) }
            }
        }
        out.append32(count)
        return out + body
    }

    /// Decodes a snapshot into entries anchored at `monotonicNow`.
    /// - Throws: ``DNSError`` with ``DNSError/Code/corruptCacheFile`` naming what is wrong.
    package static func decode(
        _ bytes: [UInt8], monotonicNow: ResolverInstant,
        wallMilliseconds: UInt64
    ) throws(DNSError) -> [(CacheKey, CacheEntry)] {
        var reader = SnapshotReader(bytes: bytes)
        guard try reader.take(magic.count) == magic else {
            throw DNSError(.corruptCacheFile, "not a swift-httpdns cache file (bad magic)")
        }
        let savedAt = try reader.u64()
        let age = Duration.milliseconds(Int64(wallMilliseconds > savedAt ? min(wallMilliseconds - savedAt, UInt64(Int64.max)) : 0))
        let count = try reader.u32()
        var entries: [(CacheKey, CacheEntry)] = []
        entries.reserveCapacity(Int(min(count, 1_000_000)))
        for _ in 0..<count {
            let name = try reader.name()
            let type = RecordType(rawValue: try reader.u16())
            let kind = try reader.u8()
            let sourceIndex = Int(try reader.u8())
            guard sourceIndex < sources.count else { throw DNSError(.corruptCacheFile, "cache file: bad source") }
            let upstreamBytes = try reader.take(Int(try reader.u16()))
            let fresh = Duration.milliseconds(Int64(min(try reader.u64(), UInt64(Int64.max) / 2)))
            let stale = Duration.milliseconds(Int64(min(try reader.u64(), UInt64(Int64.max) / 2)))
            let payload: CacheEntry.Payload
            switch kind {
            case 0:
                let canonicalLength = Int(try reader.u8())
                let canonical = canonicalLength == 0 ? nil : try reader.name(length: canonicalLength)
                var addresses: [ResolvedAddress] = []
                for _ in 0..<(try reader.u16()) {
                    let family = try reader.u8()
                    guard family == 4 || family == 6, let ip = IPAddress(bytes: try reader.take(family == 4 ? 4 : 16)) else {
                        throw DNSError(.corruptCacheFile, "cache file: bad address family")
                    }
                    addresses.append(ResolvedAddress(ip: ip, ttl: try reader.u32()))
                }
                payload = .addresses(addresses, canonicalName: canonical)
            case 1: payload = .negative(.nxdomain)
            case 2: payload = .negative(.nodata)
            case 3, 4:
                let zone = try reader.name()
                guard name.isWithin(zone) else { throw DNSError(.corruptCacheFile, "cache file: an SOA for a zone above none of its entry") }
                let primary = try reader.name()
                let mailbox = try reader.name()
                let soa = DNSMessage.SOA(
                    primary: primary, mailbox: mailbox, serial: try reader.u32(), refresh: try reader.u32(), retry: try reader.u32(),
                    expire: try reader.u32(), minimum: try reader.u32())
                let authority = NegativeAuthority(zone: zone, soa: soa, ttl: try reader.u32())
                payload = .negative(kind == 3 ? .nxdomain : .nodata, authority: authority)
            default: throw DNSError(.corruptCacheFile, "cache file: bad entry kind \(kind)")
            }
            guard stale > age else { continue }  // past its stale window: dropped
            let expiresAt = monotonicNow + (fresh > age ? fresh - age : .zero)
            entries.append(
                (
                    CacheKey(name, type),
                    CacheEntry(
                        payload: payload, source: sources[sourceIndex],
                        upstream: upstreamBytes.isEmpty ? nil : String(decoding: upstreamBytes, as: UTF8.self),
                        storedAt: monotonicNow, expiresAt: expiresAt, staleUntil: monotonicNow + (stale - age))
                ))
        }
        guard reader.remaining == 0 else {
            throw DNSError(.corruptCacheFile, "cache file: \(reader.remaining) bytes of trailing data")
        }
        return entries
    }

    static func milliseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds)) * 1000 + UInt64(max(0, attoseconds) / 1_000_000_000_000_000)
    }
}

private struct SnapshotReader {
    let bytes: [UInt8]
    var offset = 0
    var remaining: Int { bytes.count - offset }

    mutating func take(_ count: Int) throws(DNSError) -> [UInt8] {
        guard count >= 0, count <= remaining else {
            throw DNSError(.corruptCacheFile, "cache file truncated at offset \(offset)")
        }
        defer { offset += count }
        return Array(bytes[offset..<(offset + count)])
    }

    mutating func u8() throws(DNSError) -> UInt8 { try take(1)[0] }
    mutating func u16() throws(DNSError) -> UInt16 { try take(2).reduce(0) { $0 << 8 | UInt16($1) } }
    mutating func u32() throws(DNSError) -> UInt32 { try take(4).reduce(0) { $0 << 8 | UInt32($1) } }
    mutating func u64() throws(DNSError) -> UInt64 { try take(8).reduce(0) { $0 << 8 | UInt64($1) } }

    mutating func name(length: Int? = nil) throws(DNSError) -> DomainName {
        var count = length ?? 0
        if length == nil { count = Int(try u8()) }
        let wire = try take(count)
        // Re-validate through the wire decoder: a hostile file must not yield an invalid name.
        var probe: [UInt8] = [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0] + wire + [0, 1, 0, 1]
        probe[2] = 0x81
        guard let message = try? DNSMessage(decoding: probe), let name = message.questions.first?.name, name.wire == wire else {
            throw DNSError(.corruptCacheFile, "cache file: invalid name")
        }
        return name
    }
}

extension Array where Element == UInt8 {
    mutating func append64(_ value: UInt64) {
        append32(UInt32(value >> 32))
        append32(UInt32(truncatingIfNeeded: value))
    }
}
