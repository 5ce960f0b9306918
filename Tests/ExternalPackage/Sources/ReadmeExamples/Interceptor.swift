// docs/interceptor.md "Three ways": the client, the rewriter and URLSession.
import DNSInterceptor
import Foundation
import HTTPDNS

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

func interceptor(_ resolver: HTTPDNSResolver, bigFileURL: URL, handle: FileHandle, request: URLRequest) async throws {
    var options = HTTPDNSClient.Options()
    options.cookieStorage = .shared  // optional; no cookies by default
    let client = HTTPDNSClient(resolver: resolver, options: options)

    let (data, response) = try await client.data(for: URLRequest(url: URL(string: "https://api.example.com/v1")!))
    let exchange = try await client.download(URLRequest(url: bigFileURL), to: "/tmp/file.bin")  // constant memory
    print(exchange.remoteAddress ?? "-", exchange.resolution?.source ?? .literal, exchange.redirects)

    // The head first, then the body as it arrives; the transfer pauses while you are 1 MiB behind.
    let stream = try await client.stream(for: URLRequest(url: bigFileURL))
    print(stream.response.statusCode)
    for try await chunk in stream { try handle.write(contentsOf: chunk) }

    var upload = URLRequest(url: URL(string: "https://api.example.com/upload")!)
    upload.httpMethod = "PUT"
    _ = try await client.upload(upload, fromFile: URL(fileURLWithPath: "/var/backups/db.tar"))

    let target = try await resolver.rewrite(URL(string: "https://api.example.com:8443/v1?x=1")!)
    _ = target.ipURL  // https://192.0.2.7:8443/v1?x=1   (IPv6 in brackets)
    _ = target.hostHeader  // "api.example.com:8443"
    _ = target.serverName  // "api.example.com"  (SNI, and the name the certificate must be valid for)
    _ = target.connectTo  // "api.example.com:8443:192.0.2.7:8443"  (curl --connect-to)
    _ = target.curlResolve  // "api.example.com:8443:192.0.2.7,2001:db8::7"  (curl --resolve)
    let ipRequest = target.applied(to: request)  // URLRequest to ipURL with Host set (`rewrite(request)` works too)

    let configuration = URLSessionConfiguration.default
    configuration.useHTTPDNS(client, policy: HTTPDNSInterceptionPolicy(allow: ["example.com"], deny: ["static.example.com"]))
    let session = URLSession(configuration: configuration)
    let (sessionData, sessionResponse) = try await session.data(from: URL(string: "https://api.example.com/v1")!)
    _ = (data, response, ipRequest, sessionData, sessionResponse)
}
