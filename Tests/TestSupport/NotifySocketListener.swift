import Foundation
import Glibc

/// A datagram socket standing in for systemd's `$NOTIFY_SOCKET`: what the daemon sends, message by
/// message.
public final class NotifySocketListener: @unchecked Sendable {
    // Safety: the descriptor is only read from one test at a time.
    public let path: String
    private let descriptor: Int32

    /// A socket at `path` (an abstract name when it starts with `@`, counted by its length, as
    /// `$NOTIFY_SOCKET` writes it), or at a new temporary path.
    public init(path: String? = nil) throws {
        self.path = path ?? FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID().uuidString.prefix(8))").path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(self.path.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        if abstract { bytes[0] = 0 }
        guard bytes.count <= MemoryLayout.size(ofValue: address.sun_path) else { throw POSIXError(.ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = abstract ? MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count : MemoryLayout<sockaddr_un>.size
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(length)) }
        }
        guard descriptor >= 0, bound == 0 else { throw POSIXError(.EADDRNOTAVAIL) }
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit {
        close(descriptor)
        if !path.hasPrefix("@") { unlink(path) }
    }

    /// ``receive(for:until:)`` on a thread of its own, so that the wait holds no thread of the
    /// concurrency pool (two on two cores), which the code under test needs.
    public func messages(for seconds: Double, until: @escaping @Sendable (String) -> Bool = { _ in false }) async -> [String] {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: self.receive(for: seconds, until: until)) }.start()
        }
    }

    /// The messages received within `seconds`, stopping early at the first one `until` accepts.
    public func receive(for seconds: Double, until: (String) -> Bool = { _ in false }) -> [String] {
        var messages: [String] = []
        let deadline = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while Date() < deadline {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            guard count > 0 else { continue }
            let message = String(decoding: buffer[0..<count], as: UTF8.self)
            messages.append(message)
            if until(message) { break }
        }
        return messages
    }
}
