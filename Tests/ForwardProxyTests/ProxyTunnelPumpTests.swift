#if os(Linux)
import Glibc
import Testing

@testable import ForwardProxy

/// The relay's pump in process, over two socket pairs standing in for the client's and the
/// upstream's connections: copies, splices, early bytes, a sink that stops taking, half-closes.
@Suite struct ProxyTunnelPumpTests {
    /// A tunnel between `client.tunnel` and `upstream.tunnel`; the test holds the far ends.
    final class Pair {
        let tunnel: ProxyTunnel
        let client: CInt  // the client's end
        private(set) var upstream: CInt  // the origin's end
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 16)

        init() throws {
            func pair() throws -> (CInt, CInt) {
                var fds: [CInt] = [-1, -1]
                guard socketpair(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0, &fds) == 0
                else { throw PumpError.system(errno) }
                return (fds[0], fds[1])
            }
            let (clientEnd, tunnelClient) = try pair()
            let (tunnelUpstream, upstreamEnd) = try pair()
            client = clientEnd
            upstream = upstreamEnd
            tunnel = ProxyTunnel(id: 1, client: tunnelClient, plan: TunnelPlan(now: 0, headTimeout: 1))
            tunnel.upstream = tunnelUpstream
        }

        deinit {
            tunnel.closeAll()
            close(client)
            if upstream >= 0 { close(upstream) }
            scratch.deallocate()
        }

        /// The origin goes away.
        func closeUpstream() {
            close(upstream)
            upstream = -1
        }

        @discardableResult
        func pump(upstreamward: Bool, shortReadDrains: Bool = false) -> ProxyTunnel.PumpResult {
            tunnel.pump(upstreamward: upstreamward, rounds: 16, scratch: scratch, pipeCapacity: 256 * 1024, shortReadDrains: shortReadDrains)
        }
    }

    enum PumpError: Error { case system(CInt) }

    static func send(_ fd: CInt, _ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBytes { max(0, write(fd, $0.baseAddress, $0.count)) }
    }

    /// What `fd` has now (nil: its peer shut down and nothing is left).
    static func receive(_ fd: CInt) -> [UInt8]? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                bytes += buffer[..<count]
                continue
            }
            return count == 0 && bytes.isEmpty ? nil : bytes
        }
    }

    static func moved(_ result: ProxyTunnel.PumpResult) -> Int? {
        switch result {
        case let .blocked(bytes), let .turnEnded(bytes): bytes
        case .failed: nil
        }
    }

    @Test func smallMessagesAreCopiedBothWays() throws {
        let pair = try Pair()
        #expect(Self.send(pair.client, Array("GET / HTTP/1.1\r\n\r\n".utf8)) == 18)
        #expect(Self.moved(pair.pump(upstreamward: true)) == 18)
        #expect(Self.receive(pair.upstream) == Array("GET / HTTP/1.1\r\n\r\n".utf8))
        #expect(Self.send(pair.upstream, Array("HTTP/1.1 204 No Content\r\n\r\n".utf8)) == 27)
        #expect(Self.moved(pair.pump(upstreamward: false)) == 27)
        #expect(Self.receive(pair.client) == Array("HTTP/1.1 204 No Content\r\n\r\n".utf8))
        #expect(pair.tunnel.spliced == 0, "small reads are copied, never spliced")
    }

    @Test func bytesQueuedBeforeTheTunnelGoFirst() throws {
        let pair = try Pair()
        pair.tunnel.send(Array("early ".utf8), toUpstream: true)
        #expect(Self.send(pair.client, Array("later".utf8)) == 5)
        pair.pump(upstreamward: true)
        #expect(Self.receive(pair.upstream) == Array("early later".utf8))
    }

    @Test func bulkDataIsSplicedAndArrivesWholeAndInOrder() throws {
        let pair = try Pair()
        let data = (0..<2_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) }
        var sent = 0
        var received: [UInt8] = []
        var rounds = 0
        while received.count < data.count, rounds < 10_000 {
            rounds += 1
            if sent < data.count {
                sent += data[sent..<min(data.count, sent + 65_536)].withUnsafeBytes { max(0, write(pair.client, $0.baseAddress, $0.count)) }
            }
            #expect(Self.moved(pair.pump(upstreamward: true)) != nil)
            received += Self.receive(pair.upstream) ?? []
        }
        #expect(received.count == data.count)
        #expect(received == data, "every byte, in order")
        #expect(pair.tunnel.spliced > 0, "large reads went through the pipe")
    }

    @Test func aSinkThatStopsTakingKeepsTheRestInOrder() throws {
        let pair = try Pair()
        let data = (0..<600_000).map { UInt8(truncatingIfNeeded: $0 % 251) }
        var sent = 0
        // The origin does not read: the pump fills its socket, then holds what it read.
        for _ in 0..<200 where sent < data.count {
            sent += data[sent..<min(data.count, sent + 16_384)].withUnsafeBytes { max(0, write(pair.client, $0.baseAddress, $0.count)) }
            #expect(Self.moved(pair.pump(upstreamward: true)) != nil)
        }
        #expect(pair.tunnel.up.holdsBytes || sent < data.count, "the sink filled up")
        // It reads again: everything arrives, in order.
        var received: [UInt8] = []
        for _ in 0..<10_000 where received.count < data.count {
            received += Self.receive(pair.upstream) ?? []
            if sent < data.count {
                sent += data[sent...].withUnsafeBytes { max(0, write(pair.client, $0.baseAddress, $0.count)) }
            }
            #expect(Self.moved(pair.pump(upstreamward: true)) != nil)
        }
        #expect(received == data)
    }

    @Test func aHalfCloseCrossesTheTunnelAndBothEndingsFinishIt() throws {
        let pair = try Pair()
        #expect(Self.send(pair.client, Array("last words".utf8)) == 10)
        shutdown(pair.client, CInt(SHUT_WR))
        pair.pump(upstreamward: true)
        #expect(Self.receive(pair.upstream) == Array("last words".utf8))
        #expect(Self.receive(pair.upstream) == nil, "the FIN followed the bytes")
        #expect(!pair.tunnel.bothDirectionsDone, "the origin may still answer")
        #expect(Self.send(pair.upstream, Array("reply".utf8)) == 5)
        shutdown(pair.upstream, CInt(SHUT_WR))
        pair.pump(upstreamward: false)
        #expect(Self.receive(pair.client) == Array("reply".utf8))
        #expect(pair.tunnel.bothDirectionsDone)
    }

    @Test func aSinkThatIsGoneFailsThePump() throws {
        let pair = try Pair()
        signal(SIGPIPE, SIG_IGN)
        pair.closeUpstream()
        #expect(Self.send(pair.client, Array("to nobody".utf8)) == 9)
        var result = pair.pump(upstreamward: true)
        if Self.moved(result) != nil { result = pair.pump(upstreamward: true) }
        #expect(Self.moved(result) == nil, "EPIPE ends the tunnel")
    }
}
#endif
