import NIOCore

/// A connection handler that keeps time: deadlines are checked once a second on its event loop,
/// with the loop's clock (which a test's embedded loop moves by hand). The handler keeps its
/// context and timer; ``startTicking(_:every:)`` and ``stopTicking()`` manage both.
package protocol TickingHandler: AnyObject {
    var context: ChannelHandlerContext? { get set }
    var timer: RepeatedTask? { get set }
    func tick(now: NIODeadline)
}

package extension TickingHandler {
    /// The event loop's clock.
    var now: NIODeadline { context?.eventLoop.now ?? .now() }

    /// From `handlerAdded`: keeps `context` and calls ``tick(now:)`` every `interval` on its loop
    /// until ``stopTicking()``.
    func startTicking(_ context: ChannelHandlerContext, every interval: TimeAmount = .seconds(1)) {
        self.context = context
        let handler = NIOLoopBound<any TickingHandler>(self, eventLoop: context.eventLoop)
        let loop = context.eventLoop
        timer = loop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in handler.value.tick(now: loop.now) }
    }

    /// From `handlerRemoved`: no more ticks, and the context is let go.
    func stopTicking() {
        timer?.cancel()
        timer = nil
        context = nil
    }
}
