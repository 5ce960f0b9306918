import DNSCore
import Testing

@testable import ForwardProxy

/// A tunnel's phases, dial order and deadlines, on a clock the test moves.
@Suite struct TunnelPlanTests {
    static let ms: UInt64 = 1_000_000
    static let start: UInt64 = 5_000 * ms
    static let addresses = ["198.18.0.1", "198.18.0.2", "2001:db8::3"].map { IPAddress($0)! }

    private func connecting(_ addresses: [IPAddress] = addresses) -> (TunnelPlan, TunnelPlan.Step) {
        var plan = TunnelPlan(now: Self.start, headTimeout: 10_000 * Self.ms)
        plan.lookingUp()
        #expect(plan.phase == .resolving)
        let step = plan.resolved(addresses, target: "a.test:443", now: Self.start, connectTimeout: 5_000 * Self.ms, idleTimeout: 60_000 * Self.ms)
        return (plan, step)
    }

    @Test func aHeadThatDoesNotCompleteInTimeIsClosed() {
        var plan = TunnelPlan(now: Self.start, headTimeout: 10_000 * Self.ms)
        let step1 = plan.due(now: Self.start + 9_999 * Self.ms)
        #expect(step1 == .wait)
        let step2 = plan.due(now: Self.start + 10_000 * Self.ms)
        #expect(step2 == .close(outcome: "head_timeout"))
        plan.lookingUp()
        let step3 = plan.due(now: Self.start + 20_000 * Self.ms)
        #expect(step3 == .wait, "the lookup has its own timeouts")
    }

    @Test func addressesAreDialledInOrderEveryQuarterSecondUntilOneConnects() {
        var (plan, first) = connecting()
        #expect(first == .dial(Self.addresses[0]))
        plan.attemptStarted(now: Self.start)
        let step1 = plan.due(now: Self.start + 249 * Self.ms)
        #expect(step1 == .wait)
        let step2 = plan.due(now: Self.start + 250 * Self.ms)
        #expect(step2 == .dial(Self.addresses[1]), "RFC 8305: the next after 250 ms")
        plan.attemptStarted(now: Self.start + 250 * Self.ms)
        #expect(plan.attemptsInFlight == 2)
        let step3 = plan.due(now: Self.start + 300 * Self.ms)
        #expect(step3 == .wait)
        plan.established(now: Self.start + 320 * Self.ms)
        #expect(plan.phase == .tunnel)
        let step4 = plan.due(now: Self.start + 600 * Self.ms)
        #expect(step4 == .wait, "no third attempt once one connected")
    }

    @Test func aFailedAttemptStartsTheNextAtOnceAndTheLastFailureIsA502() {
        var (plan, first) = connecting()
        #expect(first == .dial(Self.addresses[0]))
        plan.attemptStarted(now: Self.start)
        let step1 = plan.attemptFailed("Connection refused", now: Self.start + 1 * Self.ms, wasStarted: true)
        #expect(step1 == .dial(Self.addresses[1]))
        // One that cannot even start (no socket) goes straight to the next.
        let step2 = plan.attemptFailed("Address family not supported", now: Self.start + 1 * Self.ms, wasStarted: false)
        #expect(step2 == .dial(Self.addresses[2]))
        plan.attemptStarted(now: Self.start + 1 * Self.ms)
        let step3 = plan.attemptFailed("Network is unreachable", now: Self.start + 2 * Self.ms, wasStarted: true)
        #expect(step3 == .refuse(ProxyRefusal(status: 502, reason: "cannot connect to a.test:443 (Network is unreachable)")))
    }

    @Test func aFailureWaitsForAttemptsStillUnderWay() {
        var (plan, _) = connecting(Array(Self.addresses.prefix(2)))
        plan.attemptStarted(now: Self.start)
        let step1 = plan.due(now: Self.start + 250 * Self.ms)
        #expect(step1 == .dial(Self.addresses[1]))
        plan.attemptStarted(now: Self.start + 250 * Self.ms)
        let step2 = plan.attemptFailed("Connection refused", now: Self.start + 260 * Self.ms, wasStarted: true)
        #expect(step2 == .wait, "the first is still connecting")
        plan.established(now: Self.start + 270 * Self.ms)
        #expect(plan.phase == .tunnel)
    }

    @Test func noAddressIsA502AndASlowConnectA504() {
        var (empty, step) = connecting([])
        #expect(step == .refuse(ProxyRefusal(status: 502, reason: "cannot connect to a.test:443 (no address)")))
        let step1 = empty.due(now: Self.start)
        #expect(step1 == .wait)
        var (plan, _) = connecting(Array(Self.addresses.prefix(1)))
        plan.attemptStarted(now: Self.start)
        let step2 = plan.due(now: Self.start + 4_999 * Self.ms)
        #expect(step2 == .wait)
        let step3 = plan.due(now: Self.start + 5_000 * Self.ms)
        #expect(step3 == .refuse(ProxyRefusal(status: 504, reason: "connecting to a.test:443 timed out")))
    }

    @Test func aTunnelIdleForItsTimeoutIsClosedAndTrafficKeepsItOpen() {
        var (plan, _) = connecting()
        plan.attemptStarted(now: Self.start)
        plan.established(now: Self.start + 10 * Self.ms)
        let up = Self.start + 10 * Self.ms
        let step1 = plan.due(now: up + 59_999 * Self.ms)
        #expect(step1 == .wait)
        plan.relayed(now: up + 59_999 * Self.ms)
        let step2 = plan.due(now: up + 60_000 * Self.ms)
        #expect(step2 == .wait, "bytes just moved")
        let step3 = plan.due(now: up + 119_999 * Self.ms)
        #expect(step3 == .close(outcome: nil), "a minute after the last byte")
        plan.relayed(now: up)  // an older time does not move the last activity back
        let step4 = plan.due(now: up + 119_999 * Self.ms)
        #expect(step4 == .close(outcome: nil))
    }

    @Test func stepsOutOfTurnChangeNothing() {
        var plan = TunnelPlan(now: Self.start, headTimeout: 10_000 * Self.ms)
        plan.attemptStarted(now: Self.start)
        let step1 = plan.attemptFailed("x", now: Self.start, wasStarted: true)
        #expect(step1 == .wait)
        plan.established(now: Self.start)
        #expect(plan.phase == .head)
        var (tunnel, _) = connecting()
        tunnel.attemptStarted(now: Self.start)
        tunnel.established(now: Self.start)
        let step2 = tunnel.resolved(Self.addresses, target: "b.test:1", now: Self.start, connectTimeout: 1, idleTimeout: 1)
        #expect(step2 == .wait)
        tunnel.lookingUp()
        #expect(tunnel.phase == .tunnel)
    }

    /// The instant a timer-driven I/O side (PlannedDial) wakes at: the head's deadline, nothing
    /// while the lookup runs, the next staggered attempt, then the connect deadline.
    @Test func nextDueIsTheNextInstantThePlanActsAt() {
        var plan = TunnelPlan(now: Self.start, headTimeout: 10_000 * Self.ms)
        #expect(plan.nextDue == Self.start + 10_000 * Self.ms)
        plan.lookingUp()
        #expect(plan.nextDue == nil)
        _ = plan.resolved(Self.addresses, target: "a.test:443", now: Self.start, connectTimeout: 5_000 * Self.ms, idleTimeout: 60_000 * Self.ms)
        plan.attemptStarted(now: Self.start)
        #expect(plan.nextDue == Self.start + 250 * Self.ms)
        for step in 1...2 {
            _ = plan.due(now: Self.start + UInt64(step) * 250 * Self.ms)
            plan.attemptStarted(now: Self.start + UInt64(step) * 250 * Self.ms)
        }
        #expect(plan.nextDue == Self.start + 5_000 * Self.ms, "every address dialled: only the deadline is left")
        plan.established(now: Self.start + 600 * Self.ms)
        #expect(plan.nextDue == Self.start + 60_600 * Self.ms)
    }

    @Test func settingsBecomeNanosecondsWithoutATrap() {
        #expect(TunnelPlan.nanoseconds(.milliseconds(1_500)) == 1_500_000_000)
        #expect(TunnelPlan.nanoseconds(.seconds(-3)) == 0)
        #expect(TunnelPlan.nanoseconds(.seconds(Int64.max)) == .max)
        #expect(TunnelPlan.nanoseconds(.seconds(18_446_744_073)) == 18_446_744_073_000_000_000)
    }
}
