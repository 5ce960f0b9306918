import CurlSupport
import DNSCore
import Foundation
import HTTPDNS

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A response whose body is read as it arrives: `for try await chunk in stream`.
///
/// The transfer pauses while the reader is behind by the buffer limit, so memory stays bounded.
/// Releasing the stream, or cancelling the reading task, stops the transfer. One reader at a time.
public final class HTTPDNSResponseStream: AsyncSequence, Sendable {
    public typealias Element = Data

    /// The final response (after any redirects).
    public let response: HTTPURLResponse
    /// The address the final request was sent to.
    public let remoteAddress: String?
    /// How the final host was resolved; nil for an IP-literal URL.
    public let resolution: Resolution?
    /// 10, 11, 20 or 30.
    public let httpVersion: Int
    /// The URLs that redirected, in order.
    public let redirects: [URL]

    private let stream: CurlStream
    private let source: StreamBodySource?
    private let host: String

    init(
        response: HTTPURLResponse, remoteAddress: String?, resolution: Resolution?, httpVersion: Int,
        redirects: [URL], stream: CurlStream, source: StreamBodySource?, host: String
    ) {
        self.response = response
        self.remoteAddress = remoteAddress
        self.resolution = resolution
        self.httpVersion = httpVersion
        self.redirects = redirects
        self.stream = stream
        self.source = source
        self.host = host
    }

    deinit { cancel() }

    /// Stops the transfer; a reader gets `URLError.cancelled`.
    public func cancel() {
        stream.cancel()
        source?.cancel()
    }

    /// The rest of the body, read whole (use the chunks for large bodies).
    public func collect(upTo limit: Int = 100 * 1024 * 1024) async throws -> Data {
        var data = Data()
        for try await chunk in self {
            guard data.count + chunk.count <= limit else {
                cancel()
                throw HTTPDNSClient.error(
                    .dataLengthExceedsMaximum, response.url ?? URL(fileURLWithPath: "/"),
                    HTTPDNSClientError(.protocolError, "\(host): response body exceeds \(limit) bytes"))
            }
            data.append(chunk)
        }
        return data
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate let owner: HTTPDNSResponseStream

        /// The next chunk, or nil at the end of the body.
        /// - Throws: `URLError` (`networkConnectionLost`, `timedOut`, `cancelled`, …).
        public mutating func next() async throws -> Data? {
            do {
                guard let bytes = try await owner.stream.next() else {
                    owner.source?.cancel()
                    return nil
                }
                return Data(bytes)
            } catch {
                owner.source?.cancel()
                throw HTTPDNSClient.error(for: error, url: owner.response.url ?? URL(fileURLWithPath: "/"), host: owner.host)
            }
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(owner: self) }
}
