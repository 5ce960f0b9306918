import DNSCore
import Foundation
import Glibc
import Logging
import NIOCore
import Synchronization
import Testing

@testable import ForwardProxy

/// The proxy's listener on loopback against a recording `ProxyResolving` (no daemon): a CONNECT is
/// resolved through it and relayed to a loopback origin; a name it does not know and a port not
/// allowed get their statuses, and nothing is dialled for them.
@Suite(.serialized) struct ProxyListenerTests {
    /// A loopback TCP origin that answers each connection's first read with `echo:` and the bytes.
    final class EchoOrigin: Sendable {
        let fd: Int32
        let port: Int
        let accepted = Atomic<Int>(0)

        init() throws {
            let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listening, $0, length) }
            }
            guard bound == 0, listen(listening, 8) == 0 else {
                close(listening)
                throw POSIXError(.EADDRINUSE)
            }
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listening, $0, &length) }
            }
            fd = listening
            port = Int(UInt16(bigEndian: address.sin_port))
        }

        /// Accepts on a thread of its own until ``stop()``.
        func start() {
            Thread { [self] in
                while true {
                    let client = accept(fd, nil, nil)
                    guard client >= 0 else { return }
                    accepted.add(1, ordering: .relaxed)
                    var buffer = [UInt8](repeating: 0, count: 1024)
                    let count = read(client, &buffer, buffer.count)
                    if count > 0 {
                        let reply = Array("echo:".utf8) + buffer[0..<count]
                        _ = reply.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
                    }
                    close(client)
                }
            }.start()
        }

        func stop() {
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
        }
    }

    /// Opens a connection to 127.0.0.1:`port`, writes `text`, reads until the peer closes or 2 s.
    static func exchange(port: Int, _ text: String, then more: String? = nil) -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return "" }
        var received: [UInt8] = []
        func send(_ text: String) { _ = Array(text.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
        func readSome() -> Bool {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = read(fd, &buffer, buffer.count)
            guard count > 0 else { return false }
            received += buffer[0..<count]
            return true
        }
        send(text)
        if let more {
            // The tunnel's 200 first, then the bytes for the origin.
            while !String(decoding: received, as: UTF8.self).contains("\r\n\r\n"), readSome() {}
            send(more)
        }
        while readSome() {}
        return String(decoding: received, as: UTF8.self)
    }

    @Test func aConnectIsResolvedThroughTheResolverAndRelayed() async throws {
        let origin = try EchoOrigin()
        origin.start()
        defer { origin.stop() }
        var settings = ProxySettings()
        settings.connectPorts = [origin.port]
        settings.allowPrivateDestinations = true
        let resolver = RecordingProxyResolver(settings: settings, hosts: ["origin.test": [IPAddress("127.0.0.1")!]])
        let bound = Mutex<Int?>(nil)
        var listener = ProxyListener(
            context: resolver, host: "127.0.0.1", port: 0, maxConnections: 16, drainTimeout: .seconds(1), logger: Logger(label: "test"))
        listener.onBound = { address in bound.withLock { $0 = address?.port } }
        let running = Task { try await listener.run() }
        defer { running.cancel() }
        var port: Int?
        for _ in 0..<100 where port == nil {
            try await Task.sleep(for: .milliseconds(20))
            port = bound.withLock { $0 }
        }
        let proxy = try #require(port)

        let tunnel = Self.exchange(
            port: proxy, "CONNECT origin.test:\(origin.port) HTTP/1.1\r\nHost: origin.test:\(origin.port)\r\n\r\n", then: "hello")
        #expect(tunnel.hasPrefix("HTTP/1.1 200"), "\(tunnel)")
        #expect(tunnel.hasSuffix("echo:hello"), "\(tunnel)")
        #expect(resolver.lookups.first == "origin.test")
        #expect(origin.accepted.load(ordering: .relaxed) == 1)

        let unknown = Self.exchange(port: proxy, "CONNECT nowhere.test:\(origin.port) HTTP/1.1\r\nHost: nowhere.test\r\n\r\n")
        #expect(unknown.hasPrefix("HTTP/1.1 502") && unknown.contains("X-HTTPDNS-Error: nxdomain"), "\(unknown)")
        let port25 = Self.exchange(port: proxy, "CONNECT origin.test:25 HTTP/1.1\r\nHost: origin.test:25\r\n\r\n")
        #expect(port25.hasPrefix("HTTP/1.1 403"), "\(port25)")
        #expect(origin.accepted.load(ordering: .relaxed) == 1, "nothing dialled for the refused ones")
        #expect(resolver.outcomes == ["tunnel", "502", "403"])
    }
}
