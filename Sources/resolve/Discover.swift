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

    /// Exit status: 0 when a designation was verified and every HOST resolved; 1 otherwise.
    static func run(_ server: String, hosts: [String], options: LookupOptions) async throws -> Never {
        guard let (address, _) = IPAddress.endpoint(server) else {
            throw ValidationError("--ddr takes the IP[:PORT] of a plain DNS resolver, not '\(server)'")
        }
        let settings = try options.makeSettings()
        let timeout = settings.options.timeout
        let plain: SystemResolver
        do { plain = try SystemResolver(servers: [server], attemptTimeout: timeout, tries: 1) } catch { throw ValidationError(error.message) }
        defer { plain.shutdown() }
        let records: [ServiceBinding]
        do {
            let message = try await plain.message(DNSMessage.Question(name: ResolverDiscovery.name, type: .svcb), timeout: timeout)
            records = message.answers.compactMap { record -> ServiceBinding? in
                guard record.type == .svcb, record.name == ResolverDiscovery.name, case let .opaque(rdata) = record.data else { return nil }
                return try? ServiceBinding(rdata: rdata)
            }
        } catch {
            report(server: server, records: [], checked: [], skipped: [], error: error.message, json: options.json)
            throw ExitCode(Exit.failed)
        }
        let (designations, skipped) = ResolverDiscovery.designations(records)
        var checked: [Checked] = []
        for designation in designations {
            checked.append(await verify(designation, designatedBy: address, settings: settings))
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
        var failed = false
        for (host, result) in zip(hosts, results) {
            switch result {
            case let .success(resolution):
                print(options.json ? LookupOutput.json(resolution) : LookupOutput.human(resolution))
            case let .failure(error):
                failed = true
                print(options.json ? LookupOutput.json(host: host, error: error) : LookupOutput.human(host: host, error: error))
            }
        }
        throw ExitCode(failed ? Exit.failed : Exit.ok)
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
