import DNSCore

/// The decisions of one CONNECT, from its head to the end of its tunnel, without I/O: the phase,
/// which address to dial and when (RFC 8305 §5: in the ranked order, the next one when the last has
/// not connected within ``attemptDelay`` or has failed), and the deadlines (the head, the connect, the
/// tunnel's idle time). The splice relay drives it with its clock (monotonic nanoseconds) and its
/// sweep; ``PlannedDial`` drives the dialling part on NIO with timers (plain http:// forwarding, and
/// CONNECT where there is no relay). Every timing rule of a tunnel is here, once, and tested
/// without sockets.
struct TunnelPlan {
    enum Phase: Equatable {
        /// Reading the client's head.
        case head
        /// The head is accepted; the name's addresses are being looked up.
        case resolving
        /// Dialling the addresses.
        case connecting
        /// Relaying bytes.
        case tunnel
    }

    /// What the I/O side does next.
    enum Step: Equatable {
        /// Nothing yet.
        case wait
        /// Open a connection to this address (then ``attemptStarted(now:)``, or ``attemptFailed(_:now:)``).
        case dial(IPAddress)
        /// Answer with this refusal and close.
        case refuse(ProxyRefusal)
        /// Close without an answer, counting `outcome` when there is one.
        case close(outcome: String?)
    }

    /// RFC 8305 §5's "Connection Attempt Delay" (its recommended value).
    static let attemptDelay: UInt64 = 250_000_000

    private(set) var phase = Phase.head
    private let headDeadline: UInt64
    private var target = ""
    private var remaining: [IPAddress] = []
    /// Attempts started and not yet settled.
    private(set) var attemptsInFlight = 0
    private var nextAttempt: UInt64 = 0
    private var connectDeadline: UInt64 = 0
    private(set) var connectStarted: UInt64 = 0
    private var idle: UInt64 = 0
    private var lastActivity: UInt64 = 0
    private var lastError = "no address"

    /// A connection accepted at `now`, whose head must be complete within `headTimeout`.
    init(now: UInt64, headTimeout: UInt64) {
        headDeadline = now &+ headTimeout
    }

    /// The head is a CONNECT the policy allows; its addresses are being looked up.
    mutating func lookingUp() {
        guard phase == .head else { return }
        phase = .resolving
    }

    /// The dialable addresses of `target` (`host:port`, for the refusals' words), ranked: the first
    /// dial, or 502 when there is none.
    mutating func resolved(
        _ addresses: [IPAddress], target: String, now: UInt64, connectTimeout: UInt64, idleTimeout: UInt64
    ) -> Step {
        guard phase == .head || phase == .resolving else { return .wait }
        phase = .connecting
        self.target = target
        remaining = addresses
        connectStarted = now
        connectDeadline = now &+ connectTimeout
        idle = idleTimeout
        return nextDial(now: now)
    }

    /// An attempt is under way (its socket connecting): the next one is due after ``attemptDelay``.
    mutating func attemptStarted(now: UInt64) {
        guard phase == .connecting else { return }
        attemptsInFlight += 1
        nextAttempt = now &+ Self.attemptDelay
    }

    /// An attempt failed (at once, or once its socket reported the error): the next address at once,
    /// or 502 with the last error once none is left and none is under way.
    mutating func attemptFailed(_ error: String, now: UInt64, wasStarted: Bool) -> Step {
        guard phase == .connecting else { return .wait }
        if wasStarted { attemptsInFlight = max(0, attemptsInFlight - 1) }
        lastError = error
        return nextDial(now: now)
    }

    /// One attempt connected: the tunnel is up (the other attempts are abandoned).
    mutating func established(now: UInt64) {
        guard phase == .connecting else { return }
        phase = .tunnel
        attemptsInFlight = 0
        remaining = []
        lastActivity = now
    }

    /// Bytes moved through the tunnel at `now`.
    mutating func relayed(now: UInt64) {
        lastActivity = max(lastActivity, now)
    }

    /// What the clock makes due at `now`: the head's or the connect's deadline, the next staggered
    /// attempt, or the end of an idle tunnel.
    mutating func due(now: UInt64) -> Step {
        switch phase {
        case .head where now >= headDeadline:
            return .close(outcome: "head_timeout")
        case .connecting where now >= connectDeadline:
            return .refuse(ProxyRefusal(status: 504, reason: "connecting to \(target) timed out"))
        case .connecting where now >= nextAttempt && !remaining.isEmpty:
            return .dial(remaining.removeFirst())
        case .tunnel where now > lastActivity && now - lastActivity >= idle:
            return .close(outcome: nil)
        default:
            return .wait
        }
    }

    /// The next instant at which ``due(now:)`` may say something other than `.wait`: for an I/O
    /// side that sets a timer rather than sweeping. Nil while the lookup runs.
    var nextDue: UInt64? {
        switch phase {
        case .head: return headDeadline
        case .resolving: return nil
        case .connecting: return remaining.isEmpty ? connectDeadline : min(connectDeadline, nextAttempt)
        case .tunnel: return lastActivity &+ idle
        }
    }

    private mutating func nextDial(now: UInt64) -> Step {
        if !remaining.isEmpty { return .dial(remaining.removeFirst()) }
        guard attemptsInFlight == 0 else { return .wait }
        return .refuse(ProxyRefusal(status: 502, reason: "cannot connect to \(target) (\(lastError))"))
    }
}

extension TunnelPlan {
    /// A setting's duration on the plan's clock: negative as 0, too long for 64 bits as `.max`
    /// (never a trap on a configured value).
    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return .max }
        let (total, carried) = whole.addingReportingOverflow(UInt64(max(0, attoseconds) / 1_000_000_000))
        return carried ? .max : total
    }
}
