import DaemonListening
import NIOCore
import Synchronization
import Testing

/// The registry's count and its drain, with reservations (connections outside NIO) as connections.
@Suite struct ConnectionRegistryTests {
    @Test func theLimitHoldsAndReleasesReportTheCount() {
        let reported = ReportedCounts()
        let registry = ConnectionRegistry(limit: 2) { reported.append($0) }
        #expect(registry.reserve())
        #expect(registry.reserve())
        #expect(!registry.reserve(), "over the limit")
        registry.release()
        #expect(registry.count == 1)
        #expect(reported.values == [1, 2, 1])
    }

    @Test func aDrainEndsWhenTheLastConnectionGoesNotAtItsGrace() async {
        let registry = ConnectionRegistry(limit: 4)
        #expect(registry.reserve())
        #expect(registry.reserve())
        let clock = ContinuousClock()
        let started = clock.now
        async let drained: Void = registry.drain(grace: .seconds(30))
        try? await Task.sleep(for: .milliseconds(50))
        registry.release()
        registry.release()
        await drained
        let took = clock.now - started
        #expect(took < .seconds(5), "woken by the last release, not the 30 s grace: \(took)")
    }

    @Test func aDrainGivesUpAtItsGrace() async {
        let registry = ConnectionRegistry(limit: 4)
        #expect(registry.reserve())
        let clock = ContinuousClock()
        let started = clock.now
        await registry.drain(grace: .milliseconds(200))
        let took = clock.now - started
        #expect(took >= .milliseconds(200) && took < .seconds(10), "\(took)")
        #expect(registry.count == 1, "a reservation is its owner's to end")
    }

    @Test func aDrainOfAnEmptyRegistryReturnsAtOnce() async {
        let registry = ConnectionRegistry(limit: 4)
        let clock = ContinuousClock()
        let started = clock.now
        await registry.drain(grace: .seconds(30))
        #expect(clock.now - started < .seconds(5))
    }
}

private final class ReportedCounts: Sendable {
    private let reported = Mutex<[Int]>([])
    var values: [Int] { reported.withLock { $0 } }
    func append(_ value: Int) { reported.withLock { $0.append(value) } }
}

/// Every listener's one conversion of a configured `Duration` to NIO's clock: exact in range,
/// clamped, never a trap, outside it.
@Suite struct TimeAmountSettingTests {
    @Test func durationsConvertExactlyAndClampAtTheBounds() {
        #expect(TimeAmount(setting: .seconds(10)) == .seconds(10))
        #expect(TimeAmount(setting: .milliseconds(1_500)) == .milliseconds(1_500))
        #expect(TimeAmount(setting: .nanoseconds(1)) == .nanoseconds(1))
        #expect(TimeAmount(setting: .zero) == .zero)
        #expect(TimeAmount(setting: .seconds(-5)) == .zero)
        #expect(TimeAmount(setting: .seconds(9_223_372_036)) == .nanoseconds(9_223_372_036_000_000_000))
        #expect(TimeAmount(setting: .seconds(9_223_372_037)) == .nanoseconds(.max))
        #expect(TimeAmount(setting: .seconds(Int64.max)) == .nanoseconds(.max))
        #expect(TimeAmount(setting: .seconds(9_223_372_036) + .nanoseconds(854_775_807)) == .nanoseconds(.max))
        #expect(TimeAmount(setting: .seconds(9_223_372_036) + .nanoseconds(854_775_808)) == .nanoseconds(.max))
    }
}
