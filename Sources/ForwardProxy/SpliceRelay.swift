#if os(Linux)
import DaemonListening
import CRelay
import DNSCore
import Foundation
import Glibc
import IOScheduling
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// The proxy's CONNECT path on Linux, outside NIO: one thread per core, each with its own listening
/// socket (SO_REUSEPORT) and epoll set, takes a connection from `accept` through the head, the
/// HTTPDNS answer, the dial and the `200` to a tunnel whose bytes move with splice(2) — socket to
/// pipe to socket, never copied into this process. Anything that is not a clean CONNECT (plain
/// `http://` requests, malformed or refused heads) is handed to the NIO handlers with the bytes read
/// so far, so their statuses and forwarding stay the one implementation.
///
/// Why: through NIO every relayed read was copied into a buffer and out again, and a new tunnel
/// cost a channel, a pipeline and a dozen epoll_ctl calls; on 2 cores beside curl and nginx that
/// was 0.7-0.8x of a direct download and 0.8x of tinyproxy's tunnels per second.
final class SpliceRelay: Sendable {
    /// Context the loops share: settings come from `context` per connection, so SIGHUP applies.
    struct Environment: Sendable {
        let context: any ProxyResolving
        let registry: ConnectionRegistry
        let logger: Logger
        /// Where a connection goes that is not a clean CONNECT: its descriptor and the bytes read.
        let handOff: @Sendable (CInt, [UInt8]) -> Void
    }

    private let loops: [RelayLoop]
    /// How many started loops have not ended, and who waits for the last.
    private let running: RunningLoops
    let port: Int

    /// Binds one listening socket per loop on `host:port` (port 0: the first socket's port for all).
    init(host: String, port: Int, loops count: Int, environment: Environment) throws {
        // splice(2) and write(2) to a socket whose peer is gone raise SIGPIPE (no MSG_NOSIGNAL there):
        // the relay wants the EPIPE instead.
        signal(SIGPIPE, SIG_IGN)
        // SO_REUSEPORT would let this relay join a group another process (a second daemon of the same
        // user) already listens with, the two sharing the connections silently: a probe bound without
        // it fails with EADDRINUSE on any listener, reuse-port or not, and it is closed at once.
        if port != 0 { try Self.probe(host: host, port: port) }
        var loops: [RelayLoop] = []
        let running = RunningLoops()
        var boundPort = port
        do {
            for _ in 0..<max(1, count) {
                let listener = try Self.listen(host: host, port: boundPort)
                boundPort = Self.localPort(listener) ?? boundPort
                do {
                    loops.append(try RelayLoop(listener: listener, environment: environment, running: running))
                } catch {
                    close(listener)
                    throw error
                }
            }
        } catch {
            for loop in loops { loop.discard() }
            throw error
        }
        self.loops = loops
        self.running = running
        self.port = boundPort
    }

    func start() {
        running.started(loops.count)
        for loop in loops { loop.start() }
    }

    /// Stops accepting and closes the connections that have not become tunnels; tunnels go on (the
    /// connection registry's drain waits for them, within its grace).
    func quiesce() {
        for loop in loops { loop.post(.quiesce) }
    }

    /// Closes what is still open and returns once every loop has ended.
    func stop() async {
        for loop in loops { loop.post(.stop) }
        await running.allEnded()
    }

    private static func listen(host: String, port: Int) throws -> CInt {
        try bound(host: host, port: port, reusePort: true, listening: true)
    }

    private static func probe(host: String, port: Int) throws {
        close(try bound(host: host, port: port, reusePort: false, listening: false))
    }

    private static func bound(host: String, port: Int, reusePort: Bool, listening: Bool) throws -> CInt {
        let address = try SocketAddress.makeAddressResolvingHost(host, port: port)
        let fd = socket(address.protocol.rawValue, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw RelayError.system("socket", errno) }
        var one: CInt = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<CInt>.size))
        if reusePort { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<CInt>.size)) }
        let bound = address.withSockAddr { bind(fd, $0, socklen_t($1)) }
        guard bound == 0, !listening || Glibc.listen(fd, 256) == 0 else {
            let code = errno
            close(fd)
            throw RelayError.system("bind \(host):\(port)", code)
        }
        return fd
    }

    private static func localPort(_ fd: CInt) -> Int? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let got = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard got == 0 else { return nil }
        return withUnsafePointer(to: &storage) { pointer -> Int? in
            switch CInt(pointer.pointee.ss_family) {
            case AF_INET: pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            case AF_INET6: pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            default: nil
            }
        }
    }
}

/// The relay's loops that have started and not ended; ``allEnded()`` returns when the last ends
/// (woken by it, not polled).
private final class RunningLoops: Sendable {
    private let state = Mutex<(count: Int, waiters: [CheckedContinuation<Void, Never>])>((0, []))

    func started(_ count: Int) {
        state.withLock { $0.count += count }
    }

    func ended() {
        let waiters = state.withLock { state in
            state.count -= 1
            guard state.count == 0 else { return [CheckedContinuation<Void, Never>]() }
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func allEnded() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state in
                guard state.count > 0 else { return true }
                state.waiters.append(waiter)
                return false
            }
            if now { waiter.resume() }
        }
    }
}

enum RelayError: Error, CustomStringConvertible {
    case system(String, CInt)

    var description: String {
        switch self {
        case let .system(call, code): "\(call): \(String(cString: strerror(code)))"
        }
    }
}

/// Monotonic nanoseconds (CLOCK_MONOTONIC: a wall-clock jump moves no deadline).
private func monotonicNow() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

/// One relay thread: its listening socket, its epoll set and every connection it accepted.
/// `@unchecked Sendable`: everything but `inbox` is touched only on the loop's own thread; it is
/// behind a Mutex.
private final class RelayLoop: @unchecked Sendable {
    enum Message {
        case resolved(id: UInt64, Result<[IPAddress], DNSError>)
        case quiesce
        case stop
    }

    /// A pipe holds up to this much of one direction in flight (the kernel's default is 64 KiB).
    static let pipeCapacity: CInt = 256 * 1024
    /// After this many rounds without blocking, a tunnel lets the loop's other connections go first.
    static let roundsPerTurn = 16
    /// Spliced between two sweeps (50 ms), this much makes the loop a bulk mover: 20 MB/s.
    static let batchBytes = 1 << 20

    private let environment: SpliceRelay.Environment
    private var listener: CInt
    private let epoll: CInt
    private let wake: CInt
    /// Every connection this loop holds, by id; and by descriptor (client, dial attempts, upstream)
    /// for the events.
    private var open: [UInt64: ProxyTunnel] = [:]
    private var connections: [CInt: ProxyTunnel] = [:]
    /// Tunnels (or the listener, as nil) that stopped only because their turn ended: no edge will
    /// come for them, so they go again before the loop waits.
    private var again: [ProxyTunnel?] = []
    private var nextID: UInt64 = 0
    private var nextSweep: UInt64 = 0
    /// When the loop last woke (monotonic ns): the clock of everything it does until it waits again.
    private var now: UInt64 = 0
    /// Bytes relayed since the last sweep, each way.
    private var relayed = (up: 0, down: 0)
    private var stopping = false
    /// `accept` ran out of descriptors: the sweep accepts again.
    private var acceptDeferred = false
    /// The thread runs as SCHED_BATCH while its tunnels splice at least `batchBytes` between two
    /// sweeps (`splicedSinceSweep`).
    private var scheduling: BatchScheduling?
    private var splicedSinceSweep = 0
    /// The copy buffer of small relayed reads, shared by the loop's tunnels (one thread).
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 16)
    private let inbox = Mutex<[Message]>([])
    private let running: RunningLoops

    init(listener: CInt, environment: SpliceRelay.Environment, running: RunningLoops) throws {
        self.listener = listener
        self.environment = environment
        self.running = running
        epoll = epoll_create1(CInt(EPOLL_CLOEXEC))
        wake = eventfd(0, CInt(EFD_NONBLOCK | EFD_CLOEXEC))
        guard epoll >= 0, wake >= 0 else {
            let code = errno
            if epoll >= 0 { close(epoll) }
            if wake >= 0 { close(wake) }
            throw RelayError.system("epoll/eventfd", code)
        }
        watch(listener, events: EPOLLIN.rawValue | EPOLLET.rawValue)
        watch(wake, events: EPOLLIN.rawValue)
    }

    /// Closes what `init` opened, for a relay whose other loops failed to start.
    func discard() {
        scratch.deallocate()
        close(listener)
        close(epoll)
        close(wake)
    }

    func start() {
        let thread = Thread { [self] in
            httpdns_name_thread("httpdns-relay")
            self.run()
        }
        thread.start()
    }

    func post(_ message: Message) {
        inbox.withLock { $0.append(message) }
        var one: UInt64 = 1
        _ = write(wake, &one, 8)
    }

    private func watch(_ fd: CInt, events: UInt32) {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event)
    }

    // MARK: The loop

    private func run() {
        scheduling = BatchScheduling()  // the policy of this thread, read by this thread
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer {
            events.deallocate()
            scratch.deallocate()
            close(epoll)
            close(wake)
            running.ended()
        }
        while !stopping {
            // Sleeps without a deadline only when the sweep has nothing to do: no connection, no
            // deferred accept, no relayed bytes left to report.
            let idle = open.isEmpty && !acceptDeferred && relayed == (0, 0) && !(scheduling?.isBatch ?? false)
            let timeout: CInt = !again.isEmpty ? 0 : idle ? -1 : 50
            let count = epoll_wait(epoll, events, CInt(capacity), timeout)
            now = monotonicNow()
            if count < 0 && errno != EINTR { break }
            for index in 0..<Int(max(count, 0)) {
                let fd = events[index].data.fd
                if fd == listener {
                    acceptAll()
                } else if fd == wake {
                    drainInbox()
                } else if let tunnel = connections[fd] {
                    handle(tunnel, fd: fd, events: events[index].events)
                }
            }
            let retry = again
            again = []
            for entry in retry {
                if let tunnel = entry {
                    if !tunnel.closed { pump(tunnel) }
                } else if listener >= 0 {
                    acceptAll()
                }
            }
            if now >= nextSweep {
                nextSweep = now + 50_000_000
                sweep(now: now)
            }
        }
        // Stopping: whatever is still open is closed.
        for tunnel in open.values { finish(tunnel) }
        sweep(now: monotonicNow())
        if listener >= 0 { close(listener) }
    }

    private func drainInbox() {
        var value: UInt64 = 0
        _ = read(wake, &value, 8)
        let messages = inbox.withLock { messages in
            defer { messages = [] }
            return messages
        }
        for message in messages {
            switch message {
            case let .resolved(id, result):
                guard let tunnel = open[id], tunnel.plan.phase == .resolving else { continue }
                resolved(tunnel, result)
            case .quiesce:
                if listener >= 0 {
                    close(listener)
                    listener = -1
                }
                // Connections that are not tunnels yet have nothing to finish.
                for tunnel in open.values where tunnel.plan.phase != .tunnel { finish(tunnel) }
            case .stop:
                stopping = true
            }
        }
    }

    private func acceptAll() {
        for _ in 0..<64 {
            let fd = httpdns_accept4(listener, CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue))
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                // Out of descriptors: the sweep tries again in 50 ms (the waiting connections make
                // no new edge, and retrying at once would spin).
                if errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM { acceptDeferred = true }
                return
            }
            guard environment.registry.reserve() else {
                environment.context.count(.outcome("connection_limit"))
                close(fd)
                continue
            }
            var one: CInt = 1
            setsockopt(fd, CInt(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<CInt>.size))
            nextID &+= 1
            let tunnel = ProxyTunnel(
                id: nextID, client: fd, plan: TunnelPlan(now: monotonicNow(), headTimeout: TunnelPlan.nanoseconds(environment.context.headTimeout)))
            open[tunnel.id] = tunnel
            connections[fd] = tunnel
            watch(fd, events: EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue)
            readHead(tunnel)
        }
        again.append(nil)  // more may wait: the listener is edge-triggered
    }

    private func handle(_ tunnel: ProxyTunnel, fd: CInt, events: UInt32) {
        switch tunnel.plan.phase {
        case .head:
            if fd == tunnel.client { readHead(tunnel) }
        case .resolving:
            break  // the client's bytes wait in its socket until the tunnel is up
        case .connecting:
            if fd != tunnel.client { attemptSettled(tunnel, fd: fd) }
        case .tunnel:
            // Readable: the direction this side feeds; writable: the one it drains (both on errors).
            let readable = events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            let writable = events & (EPOLLOUT.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            // A writable side matters only to a direction holding bytes for it; one that is waiting
            // for its source gets that source's own edge (an EPOLLOUT after every ACK would otherwise
            // cost a read that finds nothing).
            let fromClient = fd == tunnel.client
            let up = fromClient ? readable : writable && tunnel.up.holdsBytes
            let down = fromClient ? writable && tunnel.down.holdsBytes : readable
            // An edge without the peer's FIN (or an error): a short read from this side empties it,
            // and whatever comes later makes a new edge — no read to find EAGAIN.
            let ended = events & (EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            let drained = readable && !ended ? fd : -1
            if up || down { pump(tunnel, up: up, down: down, shortReadDrains: drained) }
        }
    }

    // MARK: The head

    private func readHead(_ tunnel: ProxyTunnel) {
        let limit = environment.context.settings.maxHeaderBytes
        while true {
            let count = read(tunnel.client, scratch.baseAddress, scratch.count)
            if count > 0 {
                precondition(count <= scratch.count, "read(2) past the buffer")  // raw slices are unchecked in release
                let scanned = tunnel.head.count
                tunnel.head.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[..<count]))
                switch ConnectHead.scan(tunnel.head, searchFrom: scanned) {
                case let .connect(authority, authorization, length) where length <= limit:
                    return begin(tunnel, authority: authority, authorization: authorization, headLength: length)
                case .incomplete where tunnel.head.count <= limit:
                    continue
                case .connect, .incomplete, .other:
                    // Another request, or a head past `max_header_bytes` (the full parser answers 431).
                    return handOff(tunnel)
                }
            }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            // The client closed (or failed) before its head was complete.
            return finish(tunnel)
        }
    }

    private func begin(_ tunnel: ProxyTunnel, authority: String, authorization: String?, headLength: Int) {
        let context = environment.context
        let policy = ProxyPolicy(settings: context.settings)
        // Unauthorized, malformed or refused targets: the full handler answers (407, 400, 403).
        guard policy.authorizes(authorization), let target = ProxyTarget(authority: authority),
            policy.refusal(for: target, plainHTTP: false) == nil
        else { return handOff(tunnel) }
        // Bytes the client sent after its head, before the `200`: the upstream's first.
        tunnel.send(Array(tunnel.head[headLength...]), toUpstream: true)
        tunnel.head = []
        tunnel.target = target
        if let literal = IPAddress(target.host) {
            resolved(tunnel, .success([literal]))
        } else if let cached = context.addressesWithoutWaiting(target.host) {
            resolved(tunnel, .success(cached))
        } else {
            tunnel.plan.lookingUp()
            let id = tunnel.id
            Task { [self] in
                do throws(DNSError) {
                    post(.resolved(id: id, .success(try await context.addresses(target.host))))
                } catch {
                    post(.resolved(id: id, .failure(error)))
                }
            }
        }
    }

    private func resolved(_ tunnel: ProxyTunnel, _ result: Result<[IPAddress], DNSError>) {
        guard let target = tunnel.target else { return finish(tunnel) }
        switch result {
        case let .success(addresses):
            let context = environment.context, settings = context.settings
            let dialable: [IPAddress]
            switch ProxyPolicy(settings: settings).destinations(addresses, host: target.host, advice: context.advice(for: target.host)) {
            case let .success(addresses): dialable = addresses
            case let .failure(refusal): return refuse(tunnel, refusal)
            }
            let step = tunnel.plan.resolved(
                dialable, target: "\(target.host):\(target.port)", now: monotonicNow(),
                connectTimeout: TunnelPlan.nanoseconds(settings.connectTimeout),
                idleTimeout: TunnelPlan.nanoseconds(settings.idleTimeout))
            perform(step, for: tunnel)
        case let .failure(error):
            refuse(tunnel, .resolution(of: target.host, failed: error))
        }
    }

    // MARK: Dialling (RFC 8305: when and what the plan says)

    /// Does what the tunnel's plan says.
    private func perform(_ step: TunnelPlan.Step, for tunnel: ProxyTunnel) {
        switch step {
        case .wait:
            break
        case let .dial(address):
            dial(tunnel, address)
        case let .refuse(refusal):
            refuse(tunnel, refusal)
        case let .close(outcome):
            if let outcome { environment.context.count(.outcome(outcome)) }
            finish(tunnel)
        }
    }

    private func dial(_ tunnel: ProxyTunnel, _ address: IPAddress) {
        guard let target = tunnel.target, let socketAddress = try? SocketAddress(ipAddress: address.description, port: target.port) else {
            return perform(tunnel.plan.attemptFailed("not a socket address", now: now, wasStarted: false), for: tunnel)
        }
        let fd = socket(
            socketAddress.protocol.rawValue, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            return perform(tunnel.plan.attemptFailed(String(cString: strerror(errno)), now: now, wasStarted: false), for: tunnel)
        }
        var one: CInt = 1
        setsockopt(fd, CInt(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<CInt>.size))
        let result = socketAddress.withSockAddr { connect(fd, $0, socklen_t($1)) }
        guard result == 0 || errno == EINPROGRESS else {
            let error = String(cString: strerror(errno))
            close(fd)
            return perform(tunnel.plan.attemptFailed(error, now: now, wasStarted: false), for: tunnel)
        }
        tunnel.attempts.append(fd)
        connections[fd] = tunnel
        watch(fd, events: EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue)
        tunnel.plan.attemptStarted(now: monotonicNow())
        if result == 0 { attemptSettled(tunnel, fd: fd) }
    }

    private func attemptSettled(_ tunnel: ProxyTunnel, fd: CInt) {
        guard tunnel.plan.phase == .connecting, tunnel.attempts.contains(fd) else { return }
        var error: CInt = 0
        var length = socklen_t(MemoryLayout<CInt>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
        if error == EINPROGRESS || error == EALREADY { return }
        // The socket's first event after a non-blocking connect: with no error, it is connected.
        if error == 0 { return established(tunnel, upstream: fd) }
        tunnel.attempts.removeAll { $0 == fd }
        connections[fd] = nil
        close(fd)
        perform(tunnel.plan.attemptFailed(String(cString: strerror(error)), now: monotonicNow(), wasStarted: true), for: tunnel)
    }

    private func established(_ tunnel: ProxyTunnel, upstream: CInt) {
        for other in tunnel.attempts where other != upstream {
            connections[other] = nil
            close(other)
        }
        tunnel.attempts = []
        tunnel.upstream = upstream
        tunnel.plan.established(now: now)
        environment.context.count(.outcome("tunnel"))
        environment.context.count(.tunnels(delta: +1))
        tunnel.counted = true
        if environment.logger.logLevel <= .debug, let target = tunnel.target {
            environment.logger.debug(
                "upstream connected",
                metadata: [
                    "target": "\(target.host):\(target.port)",
                    "connect_ms": "\((monotonicNow() - tunnel.plan.connectStarted) / 1_000_000)",
                ], source: DaemonLog.source)
        }
        // RFC 9110 §9.3.6: a 2xx answer to CONNECT has no Content-Length or Transfer-Encoding.
        tunnel.send(Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8), toUpstream: false)
        pump(tunnel)
    }

    // MARK: The relay

    /// Moves what each side has sent to the other until it would block (or the turn ends), in the
    /// directions named.
    /// `shortReadDrains`: the side whose edge brought no FIN (-1: none; then a short read is
    /// followed by another, which sees a FIN that came with the data).
    private func pump(_ tunnel: ProxyTunnel, up: Bool = true, down: Bool = true, shortReadDrains: CInt = -1) {
        guard tunnel.plan.phase == .tunnel, !tunnel.closed else { return }
        var moved = (up: 0, down: 0)
        var finishedTurn = true
        for upstreamward in [true, false] where upstreamward ? up : down {
            let source = upstreamward ? tunnel.client : tunnel.upstream
            switch tunnel.pump(
                upstreamward: upstreamward, rounds: Self.roundsPerTurn, scratch: scratch, pipeCapacity: Self.pipeCapacity,
                shortReadDrains: source == shortReadDrains)
            {
            case let .blocked(bytes):
                if upstreamward { moved.up = bytes } else { moved.down = bytes }
            case let .turnEnded(bytes):
                if upstreamward { moved.up = bytes } else { moved.down = bytes }
                finishedTurn = false
            case .failed:
                return finish(tunnel)
            }
        }
        // Counted here, reported by the sweep: nothing but the relay itself between a write and the
        // loop's next wait (a peer woken onto this core runs only once the loop sleeps).
        relayed.up += moved.up
        relayed.down += moved.down
        if tunnel.spliced > 0 {
            splicedSinceSweep += tunnel.spliced
            tunnel.spliced = 0
            if splicedSinceSweep >= Self.batchBytes { scheduling?.set(batch: true) }
        }
        if moved.up > 0 || moved.down > 0 { tunnel.plan.relayed(now: now) }
        if tunnel.bothDirectionsDone { return finish(tunnel) }
        if !finishedTurn { again.append(tunnel) }
    }

    // MARK: Timers (a sweep every 50 ms while anything is open)

    private func sweep(now: UInt64) {
        let context = environment.context
        if relayed.up > 0 { context.count(.bytes(upstream: true, relayed.up)) }
        if relayed.down > 0 { context.count(.bytes(upstream: false, relayed.down)) }
        relayed = (0, 0)
        if splicedSinceSweep < Self.batchBytes { scheduling?.set(batch: false) }
        splicedSinceSweep = 0
        if acceptDeferred && listener >= 0 {
            acceptDeferred = false
            acceptAll()
        }
        // The head's and the connect's deadlines, the next staggered attempt, idle tunnels: the plan's.
        for tunnel in open.values where !tunnel.closed {
            perform(tunnel.plan.due(now: now), for: tunnel)
        }
    }

    // MARK: Endings

    private func refuse(_ tunnel: ProxyTunnel, _ refusal: ProxyRefusal) {
        environment.context.count(.outcome(String(refusal.status)))
        environment.logger.info(
            "proxy request refused", metadata: ["status": "\(refusal.status)", "reason": "\(refusal.reason)"], source: DaemonLog.source)
        let response = Array(refusal.response(reasonPhrase: HTTPResponseStatus(statusCode: refusal.status).reasonPhrase).utf8)
        _ = response.withUnsafeBytes { write(tunnel.client, $0.baseAddress, $0.count) }
        finish(tunnel)
    }

    /// Gives the connection to the NIO handlers with what was read of it; this loop forgets it.
    private func handOff(_ tunnel: ProxyTunnel) {
        epoll_ctl(epoll, EPOLL_CTL_DEL, tunnel.client, nil)
        connections[tunnel.client] = nil
        open[tunnel.id] = nil
        tunnel.closed = true
        environment.registry.release()
        environment.handOff(tunnel.client, tunnel.head)
    }

    private func finish(_ tunnel: ProxyTunnel) {
        guard !tunnel.closed else { return }
        tunnel.closed = true
        connections[tunnel.client] = nil
        if tunnel.upstream >= 0 { connections[tunnel.upstream] = nil }
        for fd in tunnel.attempts { connections[fd] = nil }
        open[tunnel.id] = nil
        if tunnel.counted { environment.context.count(.tunnels(delta: -1)) }
        tunnel.closeAll()
        environment.registry.release()
    }
}
#endif
