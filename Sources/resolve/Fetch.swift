import ArgumentParser
import DNSCore
import DNSInterceptor
import Foundation
import HTTPDNS
import ResultFormatting

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `resolve fetch`: one request through the interceptor (ARCHITECTURE.md's contract).
struct Fetch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fetch a URL through the interceptor: the host resolved by the trusted resolvers, SNI and certificate checks on the name.",
        discussion: """
            --type a connects over IPv4 only and --type aaaa over IPv6 only (curl's -4 and -6). With --json \
            the body is not written to stdout (give -o to keep it): stdout gets one JSON object describing \
            the exchange (url, status, http_version, remote_ip, resolution, redirects, headers, body_bytes) \
            or its failure ({"url":…,"error":{"code","message"}}), with the same exit status.
            Exit status: 0 a response arrived (with --fail: 22 when its status is 400 or more); 5 TLS or \
            certificate failure; 6 the host could not be resolved; 7 connection failure (refused, timed out, \
            closed early); 1 anything else (too many redirects, cannot write the output); 2 usage.
            """)

    @OptionGroup var options: LookupOptions

    @Option(name: .customShort("X"), help: ArgumentHelp("Request method (default GET, or POST with -d/--data-file).", valueName: "METHOD"))
    var method: String?

    @Option(name: .customShort("H"), help: ArgumentHelp("Request header; repeatable.", valueName: "Name: value"))
    var headers: [String] = []

    @Option(
        name: .customShort("d"),
        help: ArgumentHelp("Request body (sent as application/x-www-form-urlencoded unless -H sets a Content-Type).", valueName: "DATA"))
    var data: String?

    @Option(name: .customLong("data-file"), help: ArgumentHelp("Request body from a file ('-' for stdin).", valueName: "FILE"))
    var dataFile: String?

    @Option(
        name: .customShort("o"), help: ArgumentHelp("Write the body to FILE as it arrives (constant memory) instead of stdout.", valueName: "FILE"))
    var output: String?

    @Flag(name: .customShort("i"), help: "Print the status line and headers before the body.")
    var include = false

    @Flag(name: .customShort("v"), help: "Tell on stderr how the host was resolved and which IP was used.")
    var verbose = false

    @Flag(name: .customLong("fail"), help: "Exit 22 when the response status is 400 or more (the body is still written).")
    var fail = false

    @Option(name: .customLong("max-time"), help: ArgumentHelp("Budget of each request hop in seconds (default 60).", valueName: "SECONDS"))
    var maxTime: Double = 60

    @Option(name: .customLong("max-redirs"), help: ArgumentHelp("Redirects followed at most (default 20; 0 follows none).", valueName: "N"))
    var maxRedirects: Int = 20

    @Argument(help: "The http or https URL.")
    var url: String

    func validate() throws {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), scheme == "http" || scheme == "https",
            parsed.host?.isEmpty == false
        else {
            throw ValidationError("'\(url)' is not an http or https URL with a host")
        }
        if let port = parsed.port, !(1...65535).contains(port) {
            throw ValidationError("the port of '\(url)' must be in 1...65535, not \(port)")
        }
        if let method, !HTTPDNSClient.isValidMethod(method) {
            throw ValidationError("-X takes an HTTP method token (letters, digits, !#$%&'*+-.^_`|~), not '\(method)'")
        }
        _ = try options.addressQuery
        if data != nil, dataFile != nil { throw ValidationError("give -d or --data-file, not both") }
        guard maxTime > 0, maxTime <= 86_400, maxTime.isFinite else { throw ValidationError("--max-time must be between 0 and 86400 seconds") }
        guard (0...100).contains(maxRedirects) else { throw ValidationError("--max-redirs must be between 0 and 100") }
        for header in headers {
            let name = header.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)[0]
            guard header.contains(":"), !name.trimmingCharacters(in: .whitespaces).isEmpty,
                !header.utf8.contains(where: { $0 == 0x0d || $0 == 0x0a })
            else {
                throw ValidationError("-H takes 'Name: value' on one line, not '\(header)'")
            }
        }
    }

    func run() async throws {
        let resolver = try options.makeResolver()
        var clientOptions = HTTPDNSClient.Options()
        clientOptions.caFile = options.caFile ?? resolver.configuration.caFile
        clientOptions.timeout = .milliseconds(Int64(maxTime * 1000))
        clientOptions.followRedirects = maxRedirects > 0
        clientOptions.maxRedirects = maxRedirects
        clientOptions.addressFamilies = try options.addressQuery
        let client = HTTPDNSClient(resolver: resolver, options: clientOptions)

        var request = URLRequest(url: URL(string: url)!)
        // -d is sent as given; --data-file is streamed from disk (stdin as it is read), never held whole.
        let bodyFile = try bodyFileURL()
        let hasBody = data != nil || dataFile != nil
        request.httpMethod = method ?? (hasBody ? "POST" : "GET")
        if let data { request.httpBody = Data(data.utf8) }
        if dataFile == "-" { request.httpBodyStream = InputStream(fileAtPath: "/dev/stdin") }
        var hasContentType = false
        for header in headers {
            let parts = header.split(separator: ":", maxSplits: 1)
            let name = parts[0].trimmingCharacters(in: .whitespaces)
            let value = parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""
            if name.lowercased() == "content-type" { hasContentType = true }
            request.setValue(value, forHTTPHeaderField: name)
        }
        if hasBody, !hasContentType, data != nil {
            request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        }

        let started = ContinuousClock.now
        let exchange: HTTPDNSExchange
        do {
            if let bodyFile {
                exchange = try await client.upload(request, fromFile: bodyFile, downloadTo: output)
            } else if let output {
                exchange = try await client.download(request, to: output)
            } else {
                exchange = try await client.send(request)
            }
        } catch {
            let reason = HTTPDNSClientError.reason(of: error)
            FileHandle.standardError.write(Data("resolve fetch: \(reason?.message ?? "\(error)")\n".utf8))
            if options.json { print(Self.json(url: url, failure: error)) }
            throw ExitCode(Self.exitCode(for: error))
        }
        if verbose { describe(exchange) }
        if options.json {
            print(Self.json(url: url, exchange: exchange, output: output, elapsed: .now - started))
            throw ExitCode(fail && exchange.response.statusCode >= 400 ? 22 : Exit.ok)
        }
        if include {
            var head = "\(exchange.httpVersion == 20 ? "HTTP/2" : "HTTP/1.1") \(exchange.response.statusCode)\r\n"
            for (name, value) in exchange.response.allHeaderFields {
                head += "\(name): \(value)\r\n"
            }
            FileHandle.standardOutput.write(Data((head + "\r\n").utf8))
        }
        if output == nil { FileHandle.standardOutput.write(exchange.body) }
        throw ExitCode(fail && exchange.response.statusCode >= 400 ? 22 : Exit.ok)
    }

    private func bodyFileURL() throws -> URL? {
        guard let dataFile, dataFile != "-" else { return nil }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dataFile, isDirectory: &isDirectory), !isDirectory.boolValue,
            FileManager.default.isReadableFile(atPath: dataFile)
        else {
            throw ValidationError("cannot read --data-file '\(dataFile)'")
        }
        return URL(fileURLWithPath: dataFile)
    }

    private func describe(_ exchange: HTTPDNSExchange) {
        var lines: [String] = []
        for redirect in exchange.redirects { lines.append("* redirected from \(redirect.absoluteString)") }
        let host = exchange.response.url?.host ?? "?"
        if let resolution = exchange.resolution {
            let via = resolution.upstream.map { " (\($0))" } ?? ""
            lines.append(
                "* resolved \(host) via \(resolution.source.rawValue)\(via): "
                    + resolution.addresses.map(\.ip.description).joined(separator: ", "))
        }
        lines.append("* connected to \(exchange.remoteAddress ?? "?") for \(host) (SNI and Host: \(host))")
        lines.append("* \(exchange.httpVersion == 20 ? "HTTP/2" : "HTTP/1.1") \(exchange.response.statusCode)")
        FileHandle.standardError.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    }

    /// `--json`: the exchange as one object.
    static func json(url: String, exchange: HTTPDNSExchange, output: String?, elapsed: Duration) -> String {
        var object = JSONObject()
        object["url"] = .string(url)
        object["final_url"] = .string(exchange.response.url?.absoluteString ?? url)
        object["status"] = .int(exchange.response.statusCode)
        object["http_version"] = .string(exchange.httpVersion == 20 ? "2" : exchange.httpVersion == 10 ? "1.0" : "1.1")
        object["remote_ip"] = exchange.remoteAddress.map(JSONValue.string) ?? .null
        object["resolution"] = exchange.resolution.map(LookupOutput.jsonValue) ?? .null
        object["redirects"] = .array(exchange.redirects.map { .string($0.absoluteString) })
        var headers = JSONObject()
        for (name, value) in exchange.response.allHeaderFields.sorted(by: { "\($0.key)" < "\($1.key)" }) {
            headers["\(name)".lowercased()] = .string("\(value)")
        }
        object["headers"] = .object(headers)
        if let output {
            object["output"] = .string(output)
            object["body_bytes"] = .int(Int((try? FileManager.default.attributesOfItem(atPath: output)[.size] as? Int) ?? 0))
        } else {
            object["body_bytes"] = .int(exchange.body.count)
        }
        let (seconds, attoseconds) = elapsed.components
        object["elapsed_ms"] = .double(((Double(seconds) * 1000 + Double(attoseconds) / 1e15) * 10).rounded() / 10)
        return JSONValue.object(object).serialized
    }

    /// `--json`: a failed exchange, with the reason's stable code.
    static func json(url: String, failure: any Error) -> String {
        let reason = HTTPDNSClientError.reason(of: failure)
        var detail = JSONObject()
        detail["code"] = .string(reason?.reason.rawValue ?? "failed")
        detail["message"] = .string(reason?.message ?? "\(failure)")
        if let dnsCode = reason?.dnsCode { detail["dns_code"] = .string(dnsCode) }
        var object = JSONObject()
        object["url"] = .string(url)
        object["error"] = .object(detail)
        return JSONValue.object(object).serialized
    }

    static func exitCode(for error: any Error) -> Int32 {
        guard let code = (error as? URLError)?.code else { return Exit.failed }
        switch code {
        case .serverCertificateUntrusted, .serverCertificateHasUnknownRoot, .serverCertificateHasBadDate,
            .serverCertificateNotYetValid, .secureConnectionFailed, .clientCertificateRejected:
            return 5
        case .cannotFindHost, .dnsLookupFailed:
            return 6
        case .cannotConnectToHost, .timedOut, .networkConnectionLost, .notConnectedToInternet, .badServerResponse:
            return 7
        default:
            return Exit.failed
        }
    }
}
