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

/// Writes the cache to `cache.persist` every `cache.persist_interval` (it is also written on
/// shutdown), so a crash or a power cut loses at most one interval of answers.
struct CachePersister: Service {
    let state: DaemonState

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: state.current.config.daemon.persistInterval)
                let runtime = state.current
                guard !Task.isCancelled, let path = runtime.config.lookup.persistPath else { continue }
                do throws(DNSError) { try runtime.resolver.saveCache(to: path) } catch {
                    state.logger.error("cache not saved, retrying at the next interval", metadata: ["error": "\(error.message)"])
                }
            }
        }
    }
}
