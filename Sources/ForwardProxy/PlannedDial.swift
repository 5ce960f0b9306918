import DNSCore
import NIOCore
import NIOPosix

/// NIO's side of a ``TunnelPlan``'s dialling: the ranked addresses opened on one event loop in the
/// plan's order and at its times (the next after 250 ms or at once on a failure, the connect
/// deadline, 502 with the last error once nothing is left), with a timer where the splice relay
/// sweeps. Plain http:// forwarding dials through it everywhere, and CONNECT does where there is
/// no relay, so both I/O paths keep one set of rules. (NIO's own Happy Eyeballs would re-sort the
/// addresses by family and lose HTTPDNS's ranking.)
///
/// Event-loop bound: made, started and finished on `loop`. It keeps itself alive through its
/// timer and its attempts' futures until the last of them has run.
final class PlannedDial {
    private var plan: TunnelPlan
    private let loop: any EventLoop
    private let bootstrap: ClientBootstrap
    private let port: Int
    private var timer: Scheduled<Void>?
    private var finished = false
    private let done: (Result<any Channel, ProxyRefusal>) -> Void

    /// - Parameters:
    ///   - bootstrap: the options of the connection (its connect timeout is the plan's too, as a backstop).
    ///   - port: the port every address is dialled on.
    ///   - loop: the event loop it runs on.
    ///   - done: called once, on `loop`, with the first connection or the refusal to answer.
    init(bootstrap: ClientBootstrap, port: Int, on loop: any EventLoop, done: @escaping (Result<any Channel, ProxyRefusal>) -> Void) {
        plan = TunnelPlan(now: Self.now(), headTimeout: 0)
        plan.lookingUp()
        self.bootstrap = bootstrap
        self.port = port
        self.loop = loop
        self.done = done
    }

    static func now() -> UInt64 { NIODeadline.now().uptimeNanoseconds }

    /// Dials `addresses` (ranked, dialable) of `target` (`host:port`, for the refusals' words).
    func start(_ addresses: [IPAddress], target: String, connectTimeout: Duration) {
        loop.preconditionInEventLoop()
        let timeout = TunnelPlan.nanoseconds(connectTimeout)
        perform(plan.resolved(addresses, target: target, now: Self.now(), connectTimeout: timeout, idleTimeout: .max))
    }

    private func perform(_ step: TunnelPlan.Step) {
        guard !finished else { return }
        switch step {
        case .wait:
            break
        case let .dial(address):
            attempt(address)
        case let .refuse(refusal):
            finish(.failure(refusal))
            return
        case .close:
            // Only a head or an idle tunnel closes; neither is dialling's.
            finish(.failure(ProxyRefusal(status: 502, reason: "the connection attempt ended")))
            return
        }
        schedule()
    }

    private func attempt(_ address: IPAddress) {
        guard let socketAddress = try? SocketAddress(ipAddress: address.description, port: port) else {
            return perform(plan.attemptFailed("\(address) is not a socket address", now: Self.now(), wasStarted: false))
        }
        plan.attemptStarted(now: Self.now())
        bootstrap.connect(to: socketAddress).assumeIsolated().whenComplete { result in
            switch result {
            case let .success(channel):
                guard !self.finished else {
                    channel.close(promise: nil)  // another attempt won
                    return
                }
                self.plan.established(now: Self.now())
                self.finish(.success(channel))
            case let .failure(error):
                self.perform(self.plan.attemptFailed("\(error)", now: Self.now(), wasStarted: true))
            }
        }
    }

    /// A timer for the plan's next due instant (the next staggered attempt or the deadline).
    private func schedule() {
        timer?.cancel()
        timer = nil
        guard !finished, let due = plan.nextDue else { return }
        timer = loop.assumeIsolated().scheduleTask(deadline: .uptimeNanoseconds(due)) {
            self.timer = nil
            self.perform(self.plan.due(now: Self.now()))
        }
    }

    private func finish(_ result: Result<any Channel, ProxyRefusal>) {
        finished = true
        timer?.cancel()
        timer = nil
        done(result)
    }
}
