import NIOCore
import ServiceLifecycle

/// How every listener of the daemon ends, the same way for the stub, DoT, HTTP and the proxy: it
/// serves until the graceful shutdown (SIGTERM's lame duck) or until its listening sockets close
/// by themselves; then the sockets close, so no connection is accepted, and the open connections
/// are asked to finish (``ConnectionRegistry/drain(grace:)``) and given one grace before they are
/// closed.
package enum ListenerLifetime {
    /// The time open connections get to finish at shutdown, on every listener.
    package static let drainGrace: Duration = .seconds(5)

    /// Serves until shutdown, then closes `listening` and drains `registry` for `grace`.
    package static func serve(_ listening: [any Channel], registry: ConnectionRegistry, grace: Duration = drainGrace) async {
        await withGracefulShutdownHandler {
            for channel in listening { try? await channel.closeFuture.get() }
        } onGracefulShutdown: {
            for channel in listening { channel.close(promise: nil) }
        }
        await registry.drain(grace: grace)
    }
}
