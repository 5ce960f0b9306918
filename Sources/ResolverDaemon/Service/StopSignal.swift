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

/// SIGTERM: the lame-duck stop (``Daemon/stop()``); a second SIGTERM stops at once.
struct StopSignal: Service {
    let daemon: Daemon

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sigterm)
        await cancelWhenGracefulShutdown {
            for await _ in signals { await daemon.stop() }
        }
    }
}
