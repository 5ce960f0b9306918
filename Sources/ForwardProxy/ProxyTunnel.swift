#if os(Linux)
import CRelay
import Glibc

/// One client connection on its way to being a tunnel, and then the tunnel: its descriptors and
/// the state of each direction. Owned by one relay loop.
final class ProxyTunnel {
    /// One direction: bytes spliced from its source into `pipe`, then from the pipe to its sink.
    struct Direction {
        var pipe: (read: CInt, write: CInt) = (-1, -1)
        var pipeSize = 0
        var inPipe = 0
        /// Copied bytes the sink has not taken yet.
        var pending: [UInt8] = []
        /// The last read was not small: bulk data, spliced.
        var bulk = false
        var sourceDone = false
        var sinkShut = false

        /// Bytes read from the source wait for the sink (copied or in the pipe).
        var holdsBytes: Bool { inPipe > 0 || !pending.isEmpty }

        /// A larger pipe means fewer splices per megabyte; the kernel refuses past the user's pipe
        /// quota, and the default (64 KiB, or less past the quota) stays.
        mutating func openPipe(capacity: CInt) -> Bool {
            var fds: [CInt] = [-1, -1]
            guard httpdns_pipe2(&fds, O_NONBLOCK | O_CLOEXEC) == 0 else { return false }
            pipe = (fds[0], fds[1])
            let size = fcntl(fds[1], httpdns_f_setpipe_sz, capacity)
            pipeSize = Int(size > 0 ? size : fcntl(fds[1], httpdns_f_getpipe_sz))
            return pipeSize > 0
        }
    }

    enum PumpResult {
        case blocked(Int)
        case turnEnded(Int)
        case failed
    }

    let id: UInt64
    let client: CInt
    /// Phase, dial order and deadlines: every timing decision of this connection.
    var plan: TunnelPlan
    var closed = false
    var head: [UInt8] = []
    var target: ProxyTarget?
    var attempts: [CInt] = []
    var upstream: CInt = -1
    var up = Direction()
    var down = Direction()
    /// Counted in the open-tunnels gauge.
    var counted = false
    /// Bulk bytes spliced in since the loop last looked.
    var spliced = 0

    init(id: UInt64, client: CInt, plan: TunnelPlan) {
        self.id = id
        self.client = client
        self.plan = plan
    }

    var bothDirectionsDone: Bool {
        up.sourceDone && up.inPipe == 0 && up.pending.isEmpty && down.sourceDone && down.inPipe == 0 && down.pending.isEmpty
    }

    /// Queues `bytes` toward one side (the `200`, the client's early bytes); once the tunnel is up,
    /// ``pump`` writes them before anything else of that direction.
    func send(_ bytes: [UInt8], toUpstream: Bool) {
        if toUpstream { up.pending += bytes } else { down.pending += bytes }
    }

    /// A read below this is interactive traffic (a TLS handshake message, a request, a small
    /// response): copied, since a read and a write cost less than two splices for it.
    static let smallRead = 4096

    /// Moves bytes in one direction until its source has nothing (or its sink takes nothing more),
    /// or `rounds` reads have been made. Reads below ``smallRead`` are copied through `scratch`;
    /// a larger one makes the direction bulk, spliced through its pipe (opened then: a tunnel that
    /// only ever carries small messages never has one) until a read comes back small again.
    /// `shortReadDrains`: the source's edge came without a FIN, so a copied read shorter than the
    /// buffer, once written, ends the turn (the socket is empty; more data or a FIN makes a new edge).
    func pump(
        upstreamward: Bool, rounds: Int, scratch: UnsafeMutableRawBufferPointer, pipeCapacity: CInt, shortReadDrains: Bool = false
    ) -> PumpResult {
        var direction = upstreamward ? up : down
        defer { if upstreamward { up = direction } else { down = direction } }
        let source = upstreamward ? client : upstream
        let sink = upstreamward ? upstream : client
        var moved = 0
        for _ in 0..<rounds {
            if !direction.pending.isEmpty {
                let count = direction.pending.withUnsafeBytes { write(sink, $0.baseAddress, $0.count) }
                if count > 0 {
                    direction.pending.removeFirst(count)
                    moved += count
                    continue
                }
                if count < 0 && (errno == EAGAIN || errno == EINTR) { return .blocked(moved) }
                return .failed  // the sink is gone (EPIPE, ECONNRESET)
            }
            if direction.inPipe > 0 {
                let count = httpdns_splice(direction.pipe.read, sink, direction.inPipe)
                if count > 0 {
                    direction.inPipe -= count
                    moved += count
                    continue
                }
                if count < 0 && (errno == EAGAIN || errno == EINTR) { return .blocked(moved) }
                return .failed
            }
            if direction.sourceDone {
                if !direction.sinkShut {
                    direction.sinkShut = true
                    // The source finished sending: so does this side, toward the sink (TLS close_notify
                    // and HTTP/1.0 bodies rely on the half-close).
                    shutdown(sink, CInt(SHUT_WR))
                }
                return .blocked(moved)
            }
            let spliced = direction.bulk
            if spliced && direction.pipe.read < 0 && !direction.openPipe(capacity: pipeCapacity) { return .failed }
            let count = spliced ? httpdns_splice(source, direction.pipe.write, direction.pipeSize) : read(source, scratch.baseAddress, scratch.count)
            if count == 0 {
                direction.sourceDone = true
                continue
            }
            if count < 0 {
                if errno == EAGAIN || errno == EINTR { return .blocked(moved) }
                return .failed
            }
            direction.bulk = count >= Self.smallRead
            if spliced {
                direction.inPipe = count
                self.spliced += count
                continue
            }
            let written = write(sink, scratch.baseAddress, count)
            if written == count {
                moved += count
                // A short read emptied the socket. Read again all the same unless its edge said
                // no FIN: a FIN that came with the data makes no new edge, only the next read (0)
                // sees it.
                if shortReadDrains && count < scratch.count { return .blocked(moved) }
                continue
            }
            if written < 0 && errno != EAGAIN && errno != EINTR { return .failed }
            moved += max(written, 0)
            // What the sink did not take waits, ahead of anything read later. The kernel's counts
            // bound the slice (read(2) at most scratch.count, write(2) at most what was read): checked
            // here all the same, as slices of a raw buffer are not checked in release builds.
            precondition(count <= scratch.count && written <= count, "a read or write count past the buffer")
            direction.pending = Array(UnsafeRawBufferPointer(rebasing: scratch[max(written, 0)..<count]))
        }
        return .turnEnded(moved)
    }

    func closeAll() {
        for fd in [client, upstream, up.pipe.read, up.pipe.write, down.pipe.read, down.pipe.write] + attempts where fd >= 0 {
            close(fd)
        }
        attempts = []
    }
}
#endif
