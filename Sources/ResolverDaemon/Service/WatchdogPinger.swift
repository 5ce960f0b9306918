import AddressProbing
import CoreMetrics
import Crypto
import DNSCore
import DNSStubServer
import DNSWire
import DaemonHTTP
import DaemonListening
import ForwardProxy
import Foundation
import HTTPDNS
import HijackDetection
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import RedisCache
import ResolverConfig
import ServiceLifecycle
import Synchronization
import SystemResolver
import UnixSignals

/// `WATCHDOG=1` every half `WatchdogSec=` while every event loop turns (``EventLoopWatchdog``).
struct WatchdogPinger: Service {
    let notifier: SystemdNotifier
    let interval: Duration
    let logger: Logger
    var group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton

    func run() async throws {
        let loops = Array(group.makeIterator())
        let watchdog = EventLoopWatchdog(loops: loops.count, window: interval)
        let beats = loops.enumerated().map { index, loop in
            loop.scheduleRepeatedTask(initialDelay: .zero, delay: TimeAmount(setting: interval / 4)) { _ in
                watchdog.beat(index)
            }
        }
        defer { for beat in beats { beat.cancel() } }
        await cancelWhenGracefulShutdown {
            var stalled = false
            while !Task.isCancelled {
                if watchdog.allAlive() {
                    notifier.watchdog()
                    stalled = false
                } else if !stalled {
                    stalled = true
                    logger.critical("an event loop has not turned for \(interval): no watchdog ping (systemd restarts the daemon)")
                }
                try? await Task.sleep(for: interval)
            }
        }
    }
}
