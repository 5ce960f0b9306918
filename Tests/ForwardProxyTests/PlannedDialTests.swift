import DNSCore
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import ForwardProxy

#if canImport(Glibc)
import Glibc
#endif

/// NIO's dialling driven by a `TunnelPlan` against real loopback sockets: the ranked order kept
/// (NIO's own Happy Eyeballs would re-sort by family), the next address at once on a refusal and
/// after 250 ms on silence, 502 with the last error, 504 at the deadline.
@Suite(.serialized) struct PlannedDialTests {
    /// A listening TCP socket on `address`:`port` (0: any port); `backlog` 0 with connections left
    /// unaccepted makes the next SYN go unanswered (a silent server).
    final class Listener {
        let fd: Int32
        let port: Int

        init(_ address: String, port: Int = 0, backlog: Int32 = 16) throws {
            let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var one: Int32 = 1
            setsockopt(socketFD, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = in_port_t(UInt16(port).bigEndian)
            sin.sin_addr.s_addr = inet_addr(address)
            let bound = withUnsafePointer(to: &sin) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socketFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0, listen(socketFD, backlog) == 0 else {
                close(socketFD)
                throw POSIXError(.EADDRINUSE)
            }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &sin) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socketFD, $0, &length) } }
            fd = socketFD
            self.port = Int(UInt16(bigEndian: sin.sin_port))
        }

        deinit { close(fd) }
    }

    /// Fills `listener`'s accept queue so that a further connection attempt gets no SYN-ACK.
    static func silence(_ listener: Listener, at address: String) -> [Int32] {
        (0..<4).map { _ in
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue), 0)
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = in_port_t(UInt16(listener.port).bigEndian)
            sin.sin_addr.s_addr = inet_addr(address)
            _ = withUnsafePointer(to: &sin) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            return fd
        }
    }

    /// Dials `addresses` on `port` and returns what the dial ended with and after how long.
    func dial(
        _ addresses: [String], port: Int, connectTimeout: Duration = .seconds(3)
    ) async throws
        -> (result: Result<String, ProxyRefusal>, elapsed: Duration)
    {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        // Timed on the loop itself, from the start of the dial to its end, so a busy machine's
        // scheduling of the test task is not counted.
        return try await loop.submit { () -> EventLoopFuture<(Result<String, ProxyRefusal>, Duration)> in
            let promise = loop.makePromise(of: (Result<String, ProxyRefusal>, Duration).self)
            let started = ContinuousClock.now
            let dialling = PlannedDial(bootstrap: ClientBootstrap(group: loop).connectTimeout(.seconds(10)), port: port, on: loop) { result in
                let elapsed = ContinuousClock.now - started
                promise.succeed(
                    (
                        result.map { channel in
                            defer { channel.close(promise: nil) }
                            return channel.remoteAddress?.ipAddress ?? "?"
                        }, elapsed
                    ))
            }
            dialling.start(addresses.compactMap(IPAddress.init), target: "a.test:\(port)", connectTimeout: connectTimeout)
            return promise.futureResult
        }.flatMap { $0 }.get()
    }

    @Test func theRankedOrderIsKeptAndARefusalMovesOnAtOnce() async throws {
        let live = try Listener("127.0.0.3")
        let second = try Listener("127.0.0.2", port: live.port)
        _ = second
        // 127.0.0.4 refuses (nothing listens on the port there); 127.0.0.3 comes before 127.0.0.2.
        let (result, elapsed) = try await dial(["127.0.0.4", "127.0.0.3", "127.0.0.2"], port: live.port)
        #expect(try result.get() == "127.0.0.3")
        #expect(elapsed < .milliseconds(250), "a refused address must not wait out the 250 ms stagger: \(elapsed)")
    }

    @Test func nothingReachableIs502WithTheLastError() async throws {
        let port = try Listener("127.0.0.3").port  // closed again at once: nothing listens there
        let (result, _) = try await dial(["127.0.0.4", "127.0.0.5"], port: port)
        guard case let .failure(refusal) = result else {
            Issue.record("connected to \(result)")
            return
        }
        #expect(refusal.status == 502)
        #expect(refusal.reason.hasPrefix("cannot connect to a.test:\(port) ("), "\(refusal.reason)")
    }

    @Test func aSilentAddressGetsItsQuarterSecondThenTheNextIsDialled() async throws {
        let silent = try Listener("127.0.0.6", backlog: 0)
        let live = try Listener("127.0.0.7", port: silent.port)
        let held = Self.silence(silent, at: "127.0.0.6")
        defer { held.forEach { close($0) } }
        try await Task.sleep(for: .milliseconds(50))
        let (result, elapsed) = try await dial(["127.0.0.6", "127.0.0.7"], port: live.port)
        #expect(try result.get() == "127.0.0.7")
        #expect(elapsed >= .milliseconds(250), "RFC 8305: the next address after 250 ms, \(elapsed)")
    }

    @Test func aSilentServerIs504AtTheDeadline() async throws {
        let silent = try Listener("127.0.0.8", backlog: 0)
        let held = Self.silence(silent, at: "127.0.0.8")
        defer { held.forEach { close($0) } }
        try await Task.sleep(for: .milliseconds(50))
        let (result, elapsed) = try await dial(["127.0.0.8"], port: silent.port, connectTimeout: .milliseconds(400))
        guard case let .failure(refusal) = result else {
            Issue.record("connected to \(result)")
            return
        }
        #expect(refusal.status == 504, "\(refusal)")
        #expect(elapsed >= .milliseconds(400) && elapsed < .seconds(5), "\(elapsed)")
    }
}
