import ArgumentParser
import DNSCore
import Foundation
import HTTPDNS
import ResolverConfig
import ResultFormatting
import SystemResolver

/// `resolve lookup --ddr SERVER [HOST…]`: Discovery of Designated Resolvers (RFC 9462). Asks the
/// plain-DNS resolver at SERVER for `_dns.resolver.arpa` SVCB, verifies each encrypted resolver it
/// designates as §4.2 says — a TLS connection to it whose certificate is valid for the record's
/// target name (the test CA or the system's) **and** names SERVER's IP address — by asking it the
/// same question over that connection, and prints what it found. HOSTs given are then looked up
/// through the verified resolvers only, in priority order, each connection checked again.
enum Discovery {
    /// What was found for one designation.
    struct Checked {
        var designation: ResolverDiscovery.Designation
        var endpoint: UpstreamEndpoint?
        var error: String?
        var verified: Bool { error == nil && endpoint != nil }
    }

    /// The most designations checked: a forged answer of 65 KiB holds 2,910 (F62-1).
    static let maxChecked = 8

    /// Exit status: 0 when a designation was verified and every HOST resolved; 1 otherwise.
    static func run(_ server: String, hosts: [String], options: LookupOptions) async throws -> Never {
        guard let (asked, _) = IPAddress.endpoint(server) else {
            throw ValidationError("--ddr takes the IP[:PORT] of a plain DNS resolver, not '\(server)'")
        }
        // An IPv4 address written as IPv6 (::ffff:a.b.c.d) is the IPv4 address a certificate names.
        let address = asked.unmappedIPv4 ?? asked
        var settings = try options.makeSettings()
        // Only the verified resolvers answer: no local data, forward zone or system DNS of a --config.
        settings.configuration.forwardZones = []
        settings.configuration.localZone = nil
        settings.options.fallback = .none
        let timeout = settings.options.timeout
        let plain: SystemResolver
        do { plain = try SystemResolver(servers: [server], attemptTimeout: timeout, tries: 1) } catch { throw ValidationError(error.message) }
        defer { plain.shutdown() }
        var records: [ServiceBinding] = []
        var undecodable: [String] = []
        do {
            let message = try await plain.message(DNSMessage.Question(name: ResolverDiscovery.name, type: .svcb), timeout: timeout)
            for record in message.answers where record.type == .svcb && record.name == ResolverDiscovery.name {
                guard case let .opaque(rdata) = record.data else { continue }
                do { records.append(try ServiceBinding(rdata: rdata)) } catch { undecodable.append(error.message) }
            }
        } catch {
            report(server: server, records: [], checked: [], skipped: [], error: error.message, json: options.json)
            throw ExitCode(Exit.failed)
        }
        var (designations, skipped) = ResolverDiscovery.designations(records)
        for reason in undecodable { skipped.append(.init(record: ServiceBinding(priority: 0, target: .root, parameters: []), reason: reason)) }
        for designation in designations.dropFirst(maxChecked) {
            let record = ServiceBinding(priority: designation.priority, target: designation.target, parameters: [])
            skipped.append(.init(record: record, reason: "not checked: only the first \(maxChecked) designations are"))
        }
        designations = Array(designations.prefix(maxChecked))
        // All at once, each within the budget of one lookup: the whole check takes one --timeout.
        let toCheck = designations, fixed = settings
        let checked = await withTaskGroup(of: (Int, Checked).self) { group in
            for (index, designation) in toCheck.enumerated() {
                group.addTask { (index, await verify(designation, designatedBy: address, settings: fixed)) }
            }
            var results = [Checked?](repeating: nil, count: toCheck.count)
            for await (index, result) in group { results[index] = result }
            return results.compactMap { $0 }
        }
        report(server: server, records: records, checked: checked, skipped: skipped, error: nil, json: options.json)
        let verified = checked.filter(\.verified).compactMap(\.endpoint)
        guard !verified.isEmpty else { throw ExitCode(Exit.failed) }
        guard !hosts.isEmpty else { throw ExitCode(Exit.ok) }
        var configuration = settings.configuration
        configuration.upstreams = verified
        let resolver: HTTPDNSResolver
        do { resolver = try HTTPDNSResolver(configuration: configuration, options: settings.options) } catch { throw ValidationError(error.message) }
        let results = await resolver.warm(hosts, type: try options.addressQuery).map(\.result)
        throw ExitCode(Lookup.printResults(hosts, results, json: options.json) ? Exit.ok : Exit.failed)
    }

    /// The upstream a designation describes — reached at the address that was asked, its
    /// certificate checked for the target name and for that address (RFC 9462 §4.2) — and whether
    /// it answers `_dns.resolver.arpa` SVCB over that connection. The record's address hints are
    /// not dialled: they came over plain DNS, where a forger writes them, and a forged address is
    /// never dialled in this project (as dnspython's `try_ddr`, which uses the asked address too).
    static func verify(_ designation: ResolverDiscovery.Designation, designatedBy address: IPAddress, settings: LookupSettings) async -> Checked {
        var checked = Checked(designation: designation)
        let host = designation.target.description
        var endpoint: UpstreamEndpoint
        do {
            switch designation.transport {
            case let .doh(path):
                endpoint = try UpstreamEndpoint(.doh(.get), url: "https://\(host):\(designation.port)\(path)")
            case .dot:
                endpoint = try .dot("\(host):\(designation.port)")
            }
        } catch {
            checked.error = error.message
            return checked
        }
        // What was built is what the record says (ResolverDiscovery checked the name and path;
        // this is the second lock): the target as host and TLS name, the port (F62-2).
        guard endpoint.host == host, endpoint.port == Int(designation.port), endpoint.tlsName == nil || endpoint.tlsName == host else {
            checked.error = "the target and port do not make an endpoint of that name and port"
            return checked
        }
        endpoint.bootstrap = [address]
        endpoint.designatingResolver = address
        checked.endpoint = endpoint
        var configuration = settings.configuration
        configuration.upstreams = [endpoint]
        configuration.forwardZones = []
        var options = settings.options
        options.hedging = false
        do {
            let resolver = try HTTPDNSResolver(configuration: configuration, options: options)
            let response = try await resolver.forward(DNSMessage.query(name: ResolverDiscovery.name, type: .svcb, id: 0x5dd2))
            let message = try DNSMessage(decoding: response)
            guard message.flags & 0x000f != 2 else { throw DNSError(.serverFailure, "it answered the question with SERVFAIL") }
        } catch let error as DNSError {
            checked.error = error.message
        } catch {
            checked.error = "\(error)"
        }
        return checked
    }

    static func describe(_ designation: ResolverDiscovery.Designation) -> String {
        switch designation.transport {
        case let .doh(path): return "doh https://\(designation.target):\(designation.port)\(path)"
        case .dot: return "dot \(designation.target):\(designation.port)"
        }
    }

    static func report(
        server: String, records: [ServiceBinding], checked: [Checked], skipped: [ResolverDiscovery.Skipped], error: String?, json: Bool
    ) {
        if json {
            var object = JSONObject()
            object["server"] = .string(server)
            object["name"] = .string(ResolverDiscovery.name.description)
            if let error { object["error"] = .string(error) }
            object["designations"] = .array(
                checked.map { item in
                    var entry = JSONObject()
                    switch item.designation.transport {
                    case let .doh(path):
                        entry["transport"] = .string("doh")
                        entry["url"] = .string("https://\(item.designation.target):\(item.designation.port)\(path)")
                    case .dot:
                        entry["transport"] = .string("dot")
                    }
                    entry["target"] = .string(item.designation.target.description)
                    entry["port"] = .int(Int(item.designation.port))
                    entry["priority"] = .int(Int(item.designation.priority))
                    entry["addresses"] = .array((item.endpoint?.bootstrap ?? []).map { .string($0.description) })
                    entry["hints"] = .array(item.designation.hints.map { .string($0.description) })
                    entry["verified"] = .bool(item.verified)
                    if let error = item.error { entry["error"] = .string(error) }
                    return .object(entry)
                })
            object["skipped"] = .array(
                skipped.map { item in
                    var entry = JSONObject()
                    entry["priority"] = .int(Int(item.record.priority))
                    entry["target"] = .string(item.record.target.description)
                    entry["reason"] = .string(item.reason)
                    return .object(entry)
                })
            print(JSONValue.object(object).serialized)
            return
        }
        if let error {
            print("\(ResolverDiscovery.name) at \(server): \(error)")
            return
        }
        let count = checked.count
        print(
            "\(ResolverDiscovery.name) at \(server): \(count) designated resolver\(count == 1 ? "" : "s")\(count == 0 && records.isEmpty ? " (no SVCB records)" : "")"
        )
        for item in checked {
            let via = (item.endpoint?.bootstrap ?? []).map(\.description).joined(separator: ",")
            let verdict = item.error.map { "not verified: \($0)" } ?? "verified"
            print("  \(describe(item.designation)) via \(via) (priority \(item.designation.priority)): \(verdict)")
        }
        for item in skipped {
            print("  skipped priority \(item.record.priority) \(item.record.target): \(item.reason)")
        }
    }
}

extension IPAddress {
    /// The IPv4 address of an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`); nil for any other.
    var unmappedIPv4: IPAddress? {
        let bytes = self.bytes
        guard bytes.count == 16, bytes.prefix(10).allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff else { return nil }
        return IPAddress(bytes: bytes.suffix(4))
    }
}
