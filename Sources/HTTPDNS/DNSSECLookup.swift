import DNSCore
import DNSSEC
import Foundation

/// DNSSEC policy for lookups (config `dnssec:`, CLI `--dnssec`).
public enum DNSSECPolicy: String, Sendable, CaseIterable {
    /// No validation (the default).
    case off
    /// Validate and label each answer; never refuse one.
    case report
    /// Validate; a bogus answer is the error `dnssec_bogus`.
    case require
}

extension HTTPDNSResolver {
    /// The DNSSEC status of `resolution`'s addresses: each address type it holds is asked again of
    /// the trusted DoH upstreams with DO and CD, its RRset validated from `anchors`, and the
    /// validated addresses must be the ones the resolution holds (otherwise bogus: the answer used
    /// is not the one that was signed).
    ///
    /// Secure only when every type is; bogus when any is; otherwise the first other status.
    public func dnssecStatus(of resolution: Resolution, anchors: TrustAnchors, now: Date = .now) async -> DNSSECStatus {
        guard resolution.source != .literal else { return .indeterminate("an IP literal") }
        guard resolution.canonicalName == nil else { return .indeterminate("CNAME chains are not validated yet") }
        guard let name = try? DomainName(resolution.host) else { return .indeterminate("not a DNS name") }
        let validator = DNSSECValidator(anchors: anchors) { name, type in
            let opt = DNSMessage.Record(name: .root, type: .opt, recordClass: 4096, ttl: 0x0000_8000, data: .opaque([]))
            let query = DNSMessage(id: 0, flags: 0x0110, questions: [.init(name: name, type: type)], additionals: [opt])
            return try DNSMessage(decoding: try await self.forward(query.encode()))
        }
        let seconds = UInt32(clamping: Int64(now.timeIntervalSince1970))
        var statuses: [DNSSECStatus] = []
        for (type, family) in [(RecordType.a, IPAddress.Family.ipv4), (.aaaa, .ipv6)] {
            let held = Set(resolution.addresses.map(\.ip).filter { $0.family == family })
            guard !held.isEmpty else { continue }
            let response: DNSMessage
            do {
                response = try await validator.fetch(name, type)
            } catch {
                statuses.append(.indeterminate("asking \(name) \(type) with DO failed: \(error)"))
                continue
            }
            let status = await validator.validate(response, name: name, type: type, now: seconds)
            let signed = Set(
                response.answers.compactMap { record -> IPAddress? in
                    guard record.name == name, record.type == type, case .address(let ip) = record.data else { return nil }
                    return ip
                })
            if status == .secure, signed != held {
                statuses.append(.bogus("the \(type) addresses used are not the signed ones"))
            } else {
                statuses.append(status)
            }
        }
        if let bogus = statuses.first(where: { $0.name == "bogus" }) { return bogus }
        if statuses.allSatisfy({ $0 == .secure }), !statuses.isEmpty { return .secure }
        return statuses.first { $0 != .secure } ?? .indeterminate("no addresses to validate")
    }
}
