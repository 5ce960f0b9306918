import ArgumentParser
import DNSCore
import DNSSEC
import Foundation
import HTTPDNS
import ResolverConfig
import ResultFormatting
import SystemResolver

/// Exit codes of the contract (ARCHITECTURE.md).
enum Exit {
    static let ok: Int32 = 0
    static let failed: Int32 = 1
    static let usage: Int32 = 2
    /// `compare`: at least one host is hijacked.
    static let hijacked: Int32 = 3
}

@main
struct Resolve: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve",
        abstract: "Resolve host names through trusted DNS-over-HTTPS resolvers, immune to DNS hijacking.",
        version: Resolve.version,
        subcommands: [Lookup.self, Compare.self, Fetch.self, DaemonCommand.self, ProxyCommand.self],
        defaultSubcommand: Lookup.self)

    /// `resolve --version`, and the version of the Debian package (`Scripts/package.sh`).
    static let version = "0.9.0"

    /// Runs the command on the concurrency pool while the main thread waits, awake.
    ///
    /// Not `async` main: that parks the main thread for good inside `pthread_exit` (libdispatch's
    /// `dispatch_main`), where glibc's `setuid` broadcast skips it as an exiting thread, so after
    /// the daemon's switch to `user:` the process leader — what `ps` and `/proc/PID/status` show,
    /// and what `kill` permissions are checked against — would still be root.
    static func main() {
        let finished = DispatchSemaphore(value: 0)
        // Detached: main is the main actor's, whose queue nothing drains while the thread waits.
        Task.detached {
            await parseAndRun()
            finished.signal()
        }
        finished.wait()
        leave(Exit.ok)
    }

    /// Ends the process with `code` once standard output and error are flushed, without the exit
    /// handlers: OpenSSL's, registered with `atexit`, frees its tables while an upstream
    /// connection's worker thread may still be inside libcrypto (F60-5: the daemon exiting on a
    /// port in use crashed in 5 of 16 runs, its readiness probe's DoT worker mid-handshake). Nothing
    /// the process leaves behind needs them: files are written and closed before this.
    static func leave(_ code: Int32) -> Never {
        fflush(nil)
        _exit(code)
    }

    /// Parses and runs; maps every parse or validation error to exit 2, as the contract says.
    static func parseAndRun() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let exit as ExitCode {
            leave(exit.rawValue)
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                print(fullMessage(for: error))
                leave(Exit.ok)
            }
            FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
            leave(Exit.usage)
        }
    }
}

/// Options shared by every subcommand that resolves names.
struct LookupOptions: ParsableArguments {
    @Option(name: .customLong("doh"), help: ArgumentHelp("Trusted RFC 8484 resolver URL; repeatable, in order of preference.", valueName: "URL"))
    var doh: [String] = []

    @Option(
        name: .customLong("dot"),
        help: ArgumentHelp(
            "Trusted RFC 7858 DNS-over-TLS resolver, HOST[:PORT] (853 by default); #NAME checks the certificate against NAME "
                + "(127.0.0.1:853#dns.example); repeatable.", valueName: "HOST[:PORT][#NAME]"))
    var dot: [String] = []

    @Option(
        name: .customLong("json-api"),
        help: ArgumentHelp("Trusted resolver speaking the JSON API (application/dns-json); repeatable.", valueName: "URL"))
    var jsonAPI: [String] = []

    @Option(name: .customLong("bootstrap"), help: ArgumentHelp("Reach resolver NAME at IP (v4 or v6) without DNS; repeatable.", valueName: "NAME=IP"))
    var bootstrap: [String] = []

    @Option(
        name: .customLong("preset"),
        help: ArgumentHelp(
            "Built-in public resolver (\(ResolverPreset.allCases.map(\.rawValue).joined(separator: ", "))), or a vendor's service IPs "
                + "(alibaba-cn|hk|sg|de|us, tencent-cn|intl, baidu-cn) for the account in --config; repeatable.", valueName: "NAME"))
    var presets: [String] = []

    @Option(
        name: .customLong("pin"),
        help: ArgumentHelp(
            "SPKI pin for resolver NAME (sha256//BASE64), its host or the TLS name of a DoT IP:PORT#NAME; repeatable.", valueName: "NAME=PIN"))
    var pins: [String] = []

    @Option(
        name: .customLong("stamp"),
        help: ArgumentHelp("Trusted resolver as a DNS stamp (sdns://, DoH or DoT; certificate hashes checked); repeatable.", valueName: "STAMP"))
    var stamps: [String] = []

    @Option(name: .customLong("doh-method"), help: ArgumentHelp("RFC 8484 method: get or post (default get).", valueName: "METHOD"))
    var dohMethod: String = "get"

    @Option(name: .customLong("ca-file"), help: ArgumentHelp("Extra trust anchors for HTTPS (PEM), added to the system's.", valueName: "PEM"))
    var caFile: String?

    @Option(
        name: .customLong("type"),
        help: ArgumentHelp("a, aaaa or both (default both); lookup also takes https or svcb (RFC 9460 records, decoded).", valueName: "TYPE"))
    var type: String = "both"

    @Option(name: .customLong("timeout"), help: ArgumentHelp("Budget per host in seconds (default 3).", valueName: "SECONDS"))
    var timeout: Double?

    @Option(name: .customLong("config"), help: ArgumentHelp("Settings from the daemon's YAML config file; flags win.", valueName: "FILE"))
    var config: String?

    @Option(
        name: .customLong("fallback"),
        help: ArgumentHelp("none (strict, default) or system: ask the system DNS only when every trusted resolver failed.", valueName: "POLICY"))
    var fallback: String?

    @Option(
        name: .customLong("system-dns"),
        help: ArgumentHelp("Plain DNS server for the system side (default /etc/resolv.conf); repeatable.", valueName: "IP[:PORT]"))
    var systemDNS: [String] = []

    @Flag(name: .customLong("allow-private"), help: "Accept private/loopback/link-local answers (rejected by default: rebinding guard).")
    var allowPrivate = false

    @Flag(name: .customLong("json"), help: "JSON Lines: one object per host, in argument order.")
    var json = false

    @Option(
        name: .customLong("dnssec"),
        help: ArgumentHelp(
            "off (default, or the config's dnssec:), report (label each answer) or require (a bogus answer is an error).", valueName: "MODE"))
    var dnssec: String?

    @Option(
        name: .customLong("trust-anchors"),
        help: ArgumentHelp("DS or DNSKEY records (presentation format) replacing the built-in root anchors.", valueName: "FILE"))
    var trustAnchors: String?

    var dnssecPolicy: DNSSECPolicy {
        get throws {
            guard let dnssec else { return .off }
            return try DNSSECPolicy(rawValue: dnssec.lowercased()).orThrow(
                ValidationError("--dnssec must be off, report or require, not '\(dnssec)'"))
        }
    }

    /// The anchors: the file's, else the root's.
    func loadTrustAnchors() throws -> TrustAnchors {
        guard let trustAnchors else { return .root }
        let text: String
        do { text = try String(contentsOfFile: trustAnchors, encoding: .utf8) } catch {
            throw ValidationError("--trust-anchors \(trustAnchors): cannot read it (\(error.localizedDescription))")
        }
        do { return try TrustAnchors(presentation: text) } catch { throw ValidationError("--trust-anchors \(trustAnchors): \(error)") }
    }

    /// HTTPS or SVCB, when `--type` asks for service bindings (lookup only).
    var serviceBindingType: RecordType? {
        switch type.lowercased() {
        case "https": return .https
        case "svcb": return .svcb
        default: return nil
        }
    }

    var addressQuery: AddressQuery {
        get throws { try AddressQuery(rawValue: type.lowercased()).orThrow(ValidationError("--type must be a, aaaa or both, not '\(type)'")) }
    }

    /// The config file's lookup settings, when one was given (its daemon settings are the daemon's).
    func loadConfig() throws -> LookupSettings? {
        guard let config else { return nil }
        do { return try ConfigFile.load(config).lookup } catch { throw ValidationError(error.message) }
    }

    /// Builds the resolver's configuration and options from the config file and the flags (flags win).
    func makeResolver() throws -> HTTPDNSResolver {
        let settings = try makeSettings()
        do {
            var system: SystemResolver?
            if settings.options.fallback == .system { system = try makeSystemResolver(settings) }
            return try HTTPDNSResolver(
                configuration: settings.configuration, options: settings.options, fallback: system,
                plainDNS: { server throws(DNSError) in try SystemResolver(servers: [server]) })
        } catch {
            throw ValidationError(error.message)
        }
    }

    /// The lookup settings the config file and the flags make together (flags win).
    func makeSettings() throws -> LookupSettings {
        let file = try loadConfig()
        if let timeout {
            guard timeout > 0, timeout <= 300, timeout.isFinite else {
                throw ValidationError("--timeout must be a number of seconds between 0 and 300, not \(timeout)")
            }
        }
        guard let method = UpstreamEndpoint.DoHMethod(rawValue: dohMethod.lowercased()) else {
            throw ValidationError("--doh-method must be get or post, not '\(dohMethod)'")
        }
        var bootstrapByHost: [String: [IPAddress]] = [:]
        for entry in bootstrap {
            let parts = entry.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, !parts[0].isEmpty else {
                throw ValidationError("--bootstrap takes NAME=IP, not '\(entry)'")
            }
            guard let ip = IPAddress(parts[1]) else {
                throw ValidationError("--bootstrap \(entry): '\(parts[1])' is not an IP address")
            }
            bootstrapByHost[parts[0].lowercased(), default: []].append(ip)
        }
        var pinByHost: [String: String] = [:]
        for entry in pins {
            let parts = entry.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, parts[1].hasPrefix("sha256//") else {
                throw ValidationError("--pin takes NAME=sha256//BASE64, not '\(entry)'")
            }
            pinByHost[parts[0].lowercased()] = parts[1]
        }

        var upstreams: [UpstreamEndpoint] = []
        do {
            for url in doh { upstreams.append(try UpstreamEndpoint(.doh(method), url: url)) }
            for server in dot {
                let parts = server.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
                upstreams.append(try .dot(parts[0], tlsName: parts.count == 2 ? parts[1] : nil))
            }
            for stamp in stamps { upstreams.append(try UpstreamEndpoint(stamp: try DNSStamp(stamp))) }
            for url in jsonAPI { upstreams.append(try UpstreamEndpoint(.json, url: url)) }
        } catch {
            throw ValidationError(error.message)
        }
        for name in presets {
            if let vendor = try vendorPreset(name, from: file) {
                upstreams.append(vendor)
                continue
            }
            guard let preset = ResolverPreset(rawValue: name.lowercased()) else {
                let vendors = ["alibaba", "tencent", "baidu"].flatMap { vendor in VendorServiceIPs.regions(vendor: vendor).map { "\(vendor)-\($0)" } }
                throw ValidationError(
                    "unknown --preset '\(name)'; known: \((ResolverPreset.allCases.map(\.rawValue) + vendors).joined(separator: ", "))")
            }
            upstreams.append(preset.endpoint)
        }
        if upstreams.isEmpty { upstreams = file?.configuration.upstreams ?? HTTPDNSConfiguration.publicDefault.upstreams }
        for index in upstreams.indices {
            if let extra = bootstrapByHost[upstreams[index].host] {
                upstreams[index].bootstrap = extra + upstreams[index].bootstrap.filter { !extra.contains($0) }
            }
            // A DoT resolver given as IP#NAME is pinned under either.
            if let pin = pinByHost[upstreams[index].host] ?? upstreams[index].tlsName.flatMap({ pinByHost[$0.lowercased()] }) {
                upstreams[index].pinnedPublicKey = pin
            }
        }
        let known = Set(upstreams.map(\.host))
        for host in bootstrapByHost.keys.sorted() where !known.contains(host) {
            throw ValidationError("--bootstrap \(host)=… names no configured resolver")
        }
        // A pin that applies to no resolver would leave the connection unpinned: refused, not ignored.
        let pinnable = known.union(upstreams.compactMap { $0.tlsName?.lowercased() })
        for host in pinByHost.keys.sorted() where !pinnable.contains(host) {
            throw ValidationError("--pin \(host)=… names no configured resolver (its host, or the TLS name of IP#NAME)")
        }

        for upstream in upstreams where upstream.isPlainHTTP {
            warn(
                "\(upstream.url) is plain HTTP: the \(upstream.vendorDescription) hides the names asked but is weaker than TLS "
                    + "(no server authentication; see docs/commercial-apis.md)")
        }
        var dnssecSettings = file?.configuration.dnssec ?? DNSSECSettings()
        if dnssec != nil { dnssecSettings.policy = try dnssecPolicy }
        if trustAnchors != nil { dnssecSettings.anchors = try loadTrustAnchors() }
        let configuration = HTTPDNSConfiguration(
            upstreams: upstreams, caFile: caFile ?? file?.configuration.caFile, dnssec: dnssecSettings, localZone: file?.configuration.localZone,
            forwardZones: file?.configuration.forwardZones ?? [])
        var options = file?.options ?? HTTPDNSOptions()
        if file == nil {
            // A one-shot lookup shows the TTL the resolver served; clamping matters only for reuse.
            options.minTTL = .zero
        }
        if let timeout { options.timeout = .milliseconds(Int64(timeout * 1000)) }
        if allowPrivate { options.allowPrivate = true }
        if let fallback {
            guard let policy = ResolverOptions.Fallback(rawValue: fallback.lowercased()) else {
                throw ValidationError("--fallback must be none or system, not '\(fallback)'")
            }
            options.fallback = policy
        }
        var settings = file ?? LookupSettings(configuration: configuration, options: options)
        settings.configuration = configuration
        settings.options = options
        if !systemDNS.isEmpty { settings.systemDNS = systemDNS }
        return settings
    }

    /// `--preset VENDOR-REGION`: the vendor's published service IPs for the account that the config
    /// file's `VENDOR:` entry holds (the keys never come from the command line). nil for other presets.
    func vendorPreset(_ name: String, from file: LookupSettings?) throws -> UpstreamEndpoint? {
        let parts = name.lowercased().split(separator: "-", maxSplits: 1).map(String.init)
        guard parts.count == 2, ["alibaba", "tencent", "baidu"].contains(parts[0]) else { return nil }
        guard let preset = VendorServiceIPs.preset(vendor: parts[0], region: parts[1]) else {
            throw ValidationError(
                "unknown --preset '\(name)'; \(parts[0]) regions: \(VendorServiceIPs.regions(vendor: parts[0]).joined(separator: ", "))")
        }
        let account = file?.configuration.upstreams.first { upstream in
            if case let .vendor(api) = upstream.kind { return api.vendor == parts[0] }
            return false
        }
        guard let account, case let .vendor(api) = account.kind else {
            throw ValidationError("--preset \(name) needs an entry \(parts[0]): with the account's keys in the --config file")
        }
        do {
            return try .vendor(
                api, endpoint: preset.endpoint(for: api), bootstrap: preset.serviceIPs, tlsName: preset.tlsName,
                clientIP: account.clientIP?.description, batchSize: account.batchSize, allowPlainHTTP: account.isPlainHTTP)
        } catch {
            throw ValidationError(error.message)
        }
    }

    /// The plain-DNS side: --system-dns, else the config's system_dns, else /etc/resolv.conf.
    func makeSystemResolver(_ file: LookupSettings?) throws(DNSError) -> SystemResolver {
        try SystemResolver(servers: systemDNS.isEmpty ? (file?.systemDNS ?? []) : systemDNS)
    }
}

struct Lookup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Look up host names through the trusted resolvers (the default subcommand).",
        discussion: "Exit status: 0 all resolved, 1 any host failed, 2 usage or configuration error.")

    @OptionGroup var options: LookupOptions

    @Argument(help: "Host names (or IP literals, returned as they are).")
    var hosts: [String] = []

    @Option(
        name: .customLong("ddr"),
        help: ArgumentHelp(
            "Discover the encrypted resolvers the plain DNS resolver at IP designates (RFC 9462 DDR), verify them "
                + "(the certificate must name IP) and look HOSTs up through the verified ones only.", valueName: "IP[:PORT]"))
    var ddr: String?

    func validate() throws {
        if let ddr {
            guard IPAddress.endpoint(ddr) != nil else { throw ValidationError("--ddr takes the IP[:PORT] of a plain DNS resolver, not '\(ddr)'") }
            let given = [
                ("--doh", options.doh.isEmpty), ("--dot", options.dot.isEmpty), ("--json-api", options.jsonAPI.isEmpty),
                ("--stamp", options.stamps.isEmpty), ("--preset", options.presets.isEmpty),
            ].filter { !$0.1 }.map(\.0)
            if !given.isEmpty { throw ValidationError("--ddr discovers the resolvers to ask; drop \(given.joined(separator: ", "))") }
            if options.serviceBindingType != nil { throw ValidationError("--ddr looks up addresses (--type a, aaaa or both)") }
            if options.fallback != nil, options.fallback?.lowercased() != "none" {
                throw ValidationError("--ddr looks HOSTs up through the verified resolvers only; drop --fallback")
            }
        } else if hosts.isEmpty {
            throw ValidationError("give at least one HOST")
        }
        if options.serviceBindingType == nil { _ = try options.addressQuery }
        _ = try options.dnssecPolicy
        if options.trustAnchors != nil { _ = try options.loadTrustAnchors() }
    }

    func run() async throws {
        if let ddr { try await Discovery.run(ddr, hosts: hosts, options: options) }
        let resolver = try options.makeResolver()
        if let recordType = options.serviceBindingType {
            try await lookUpServiceBindings(recordType, with: resolver)
        }
        let type = try options.addressQuery
        let persist = try options.loadConfig()?.persistPath
        if let persist {
            do { try resolver.loadCache(from: persist) } catch {
                warn("ignoring the cache file: \(error.message)")
            }
        }
        defer {
            if let persist {
                do { try resolver.saveCache(to: persist) } catch { warn(error.message) }
            }
        }
        // Every host is resolved concurrently; output keeps argument order.
        let results = await resolver.warm(hosts, type: type).map(\.result)
        throw ExitCode(Lookup.printResults(hosts, results, json: options.json) ? Exit.ok : Exit.failed)
    }
}

extension Lookup {
    /// Prints each host's lookup in argument order (JSON Lines with `json`); whether all resolved.
    static func printResults(_ hosts: [String], _ results: [Result<Resolution, DNSError>], json: Bool) -> Bool {
        var resolved = true
        for (host, result) in zip(hosts, results) {
            switch result {
            case let .success(resolution):
                print(json ? LookupOutput.json(resolution) : LookupOutput.human(resolution))
            case let .failure(error):
                resolved = false
                print(json ? LookupOutput.json(host: host, error: error) : LookupOutput.human(host: host, error: error))
            }
        }
        return resolved
    }

    /// `--type https|svcb`: the records of every host, concurrently, printed in argument order.
    func lookUpServiceBindings(_ type: RecordType, with resolver: HTTPDNSResolver) async throws -> Never {
        let results = await withTaskGroup(of: (Int, Result<ServiceBindingAnswer, DNSError>).self) { group in
            for (index, host) in hosts.enumerated() {
                group.addTask {
                    do throws(DNSError) {
                        return (index, .success(try await resolver.serviceBindings(for: host, type: type)))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            var results = [Result<ServiceBindingAnswer, DNSError>?](repeating: nil, count: hosts.count)
            for await (index, result) in group { results[index] = result }
            return results.compactMap { $0 }
        }
        var failed = false
        for (host, result) in zip(hosts, results) {
            switch result {
            case let .success(answer):
                print(options.json ? ServiceBindingOutput.json(answer) : ServiceBindingOutput.human(answer))
            case let .failure(error):
                failed = true
                print(options.json ? LookupOutput.json(host: host, error: error) : LookupOutput.human(host: host, error: error))
            }
        }
        throw ExitCode(failed ? Exit.failed : Exit.ok)
    }
}

/// A one-line warning on stderr; the command goes on.
func warn(_ message: String) {
    FileHandle.standardError.write(Data("resolve: warning: \(message)\n".utf8))
}

extension Optional {
    func orThrow(_ error: @autoclosure () -> Error) throws -> Wrapped {
        guard let self else { throw error() }
        return self
    }
}
