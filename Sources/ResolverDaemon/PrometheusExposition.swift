import CoreMetrics
import Prometheus

/// Prometheus text exposition: a registry, the factory that records into it, and what `/metrics`
/// serves. The executable makes one and bootstraps the process's metrics with its factory.
package struct PrometheusExposition: Sendable {
    package let factory: any MetricsFactory
    package let render: @Sendable () -> [UInt8]

    package init() {
        let registry = PrometheusCollectorRegistry()
        factory = PrometheusMetricsFactory(registry: registry)
        render = {
            var buffer: [UInt8] = []
            registry.emit(into: &buffer)
            return buffer
        }
    }
}
