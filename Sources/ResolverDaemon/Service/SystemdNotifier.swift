import Foundation
import Glibc
import Synchronization

/// The service manager's notification protocol (sd_notify(3)): newline-separated `KEY=value`
/// assignments, one datagram each, to the `AF_UNIX` socket named by `$NOTIFY_SOCKET` (a path, or an
/// abstract name written with a leading `@`).
///
/// Written here rather than linked from libsystemd: the protocol is one `sendto` of a few bytes,
/// documented as stable, and the daemon then runs — and its package installs — where libsystemd is
/// absent (containers, other init systems) without a build flag. Without `$NOTIFY_SOCKET` there is
/// no notifier and the daemon sends nothing.
package final class SystemdNotifier: Sendable {
    /// Where the datagrams go, as `$NOTIFY_SOCKET` names it.
    let socketPath: String
    /// How often systemd expects `WATCHDOG=1` (half of `WatchdogSec=`), or nil without a watchdog.
    let watchdogInterval: Duration?
    private let descriptor: Int32
    private let address: sockaddr_un
    private let addressLength: socklen_t

    /// The notifier of this process, or nil when the service manager does not listen.
    /// - Parameter environment: the process's environment (`NOTIFY_SOCKET`, `WATCHDOG_USEC`,
    ///   `WATCHDOG_PID`).
    package convenience init?(environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty else { return nil }
        var watchdog: Duration?
        // WATCHDOG_PID, when set, names the process the watchdog is for (a child must not ping).
        if let usec = environment["WATCHDOG_USEC"].flatMap(Int64.init), usec > 0,
            environment["WATCHDOG_PID"].flatMap(Int32.init).map({ $0 == getpid() }) ?? true
        {
            watchdog = .microseconds(usec) / 2
        }
        self.init(socketPath: path, watchdogInterval: watchdog)
    }

    /// A notifier for `socketPath` (tests name a socket of their own); nil when the name does not
    /// fit a socket address or no socket can be made.
    init?(socketPath: String, watchdogInterval: Duration? = nil) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(socketPath.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        if abstract { bytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        // A path needs its terminating NUL; an abstract name is counted by the length instead.
        guard !bytes.isEmpty, bytes.count < capacity || (abstract && bytes.count <= capacity) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count + (abstract ? 0 : 1)
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        self.socketPath = socketPath
        self.watchdogInterval = watchdogInterval
        self.descriptor = descriptor
        self.address = address
        self.addressLength = socklen_t(length)
    }

    deinit { close(descriptor) }

    /// Sends one message; false when the service manager did not take it (the daemon goes on).
    @discardableResult
    func notify(_ assignments: KeyValuePairs<String, String>) -> Bool {
        let message = assignments.map { "\($0.key)=\(Self.oneLine($0.value))" }.joined(separator: "\n")
        var address = self.address
        let sent = message.utf8CString.withUnsafeBufferPointer { text in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(descriptor, text.baseAddress, text.count - 1, Int32(MSG_NOSIGNAL), $0, addressLength)
                }
            }
        }
        return sent == message.utf8.count
    }

    /// `READY=1` with a status line.
    func ready(status: String) { notify(["READY": "1", "STATUS": status]) }

    /// `RELOADING=1` with the monotonic time the reload began (what `Type=notify-reload` checks).
    func reloading() { notify(["RELOADING": "1", "MONOTONIC_USEC": "\(Self.monotonicMicroseconds())", "STATUS": "reloading the configuration"]) }

    func stopping(status: String) { notify(["STOPPING": "1", "STATUS": status]) }

    func status(_ line: String) { notify(["STATUS": line]) }

    func watchdog() { notify(["WATCHDOG": "1"]) }

    /// CLOCK_MONOTONIC in microseconds, the clock systemd's `MONOTONIC_USEC` is read on.
    static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
    }

    /// A value on one line: a newline would start another assignment.
    private static func oneLine(_ value: String) -> String {
        String(value.map { $0.isNewline ? " " : $0 })
    }
}

/// Sends `WATCHDOG=1` only while the event loops turn: each loop stamps a heartbeat from a task
/// scheduled on it, and a ping goes out when every loop stamped within the last interval. A loop
/// stuck in a handler (or a blocked concurrency pool, where the pinging task runs) stops the pings,
/// and systemd restarts the daemon after `WatchdogSec=`.
final class EventLoopWatchdog: Sendable {
    private let beats: Mutex<[UInt64]>
    /// How recent every heartbeat must be for a ping.
    let window: Duration

    init(loops: Int, window: Duration) {
        beats = Mutex(Array(repeating: SystemdNotifier.monotonicMicroseconds(), count: loops))
        self.window = window
    }

    func beat(_ loop: Int, now: UInt64 = SystemdNotifier.monotonicMicroseconds()) { beats.withLock { $0[loop] = now } }

    /// Whether every loop stamped within ``window`` of `now`.
    func allAlive(now: UInt64 = SystemdNotifier.monotonicMicroseconds()) -> Bool {
        let window = UInt64(self.window.components.seconds) * 1_000_000 + UInt64(self.window.components.attoseconds / 1_000_000_000_000)
        return beats.withLock { $0.allSatisfy { now &- $0 <= window } }
    }
}
