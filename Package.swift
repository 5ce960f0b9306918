// swift-tools-version: 6.1
// Swift 6 language mode (the default for tools 6.x) gives complete concurrency checking.
import PackageDescription

let package = Package(
    name: "swift-httpdns",
    products: [
        .library(name: "HTTPDNS", targets: ["HTTPDNS"]),
        .library(name: "DNSCore", targets: ["DNSCore"]),
        .library(name: "DNSSEC", targets: ["DNSSEC"]),
        .library(name: "DNSInterceptor", targets: ["DNSInterceptor"]),
        .library(name: "SystemResolver", targets: ["SystemResolver"]),
        .library(name: "AddressProbing", targets: ["AddressProbing"]),
        .library(name: "HijackDetection", targets: ["HijackDetection"]),
        .library(name: "HTTPDNSNIO", targets: ["HTTPDNSNIO"]),
        .executable(name: "resolve", targets: ["resolve"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        // The daemon only (ResolverDaemon): lifecycle, Prometheus exposition, HTTP/1.1 and HTTP/2.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
        // The commercial HTTPDNS APIs' signing and encryption (MD5, HMAC-SHA256, AES-CBC/GCM).
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        // Tests only: the README's AsyncHTTPClient recipe (its `dnsOverride`) is run against the origins.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // `swift package generate-documentation`: the DocC catalogs of the library products (Scripts/test.sh).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // System libraries. shim.h holds only static inline wrappers for variadic C calls.
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        .systemLibrary(
            // Not by pkg-config: hiredis.pc adds -D_FILE_OFFSET_BITS=64, which SwiftPM refuses.
            name: "CHiredis",
            providers: [.apt(["libhiredis-dev"])]
        ),
        // The shared second-level cache of `cache.shared` on Redis (hiredis), authenticated by HMAC.
        .target(
            name: "RedisCache",
            dependencies: [
                "CHiredis", "DNSCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]),
        .systemLibrary(
            name: "CCares",
            pkgConfig: "libcares",
            providers: [.apt(["libc-ares-dev"])]
        ),
        // Linux's epoll, eventfd, splice, pipe2 and accept4 for the proxy's relay (headers only).
        .systemLibrary(name: "CRelay"),

        // Pure Swift: wire codec, names, addresses, errors, the engine. No C, no Foundation.
        // swift-log and swift-metrics are API packages only: the application picks the backends.
        .target(
            name: "DNSCore",
            dependencies: [
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]),

        // One libcurl multi handle driven on its own thread.
        .target(name: "CurlSupport", dependencies: ["CCurl", "IOScheduling"]),
        // The one SCHED_BATCH switch of the I/O threads (the pipelines, libcurl's engine, the relay).
        .target(name: "IOScheduling"),
        // HTTP/2's frames and HPACK as bytes, no NIO: the DoH client and the daemon's server share it.
        .target(name: "HTTP2Wire"),

        // DNSSEC: RRSIG/DS verification (swift-crypto); the validator builds on it.
        .target(
            name: "DNSSEC",
            dependencies: [
                "DNSCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ]),

        // Plain DNS via c-ares: the system's view, for fallback and comparison.
        .target(name: "SystemResolver", dependencies: ["CCares", "DNSCore"]),

        // Public façade: trusted DoH / JSON / vendor-API upstreams, bootstrap, presets, system fallback.
        .target(
            name: "HTTPDNS",
            dependencies: [
                "DNSCore", "DNSSEC", "CurlSupport", "IOScheduling", "HTTP2Wire",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]),

        // Probes of an address (TCP, TLS with the host's name, plain HTTP with a marker) and the
        // ranking of a host's addresses by them.
        .target(name: "AddressProbing", dependencies: ["DNSCore", "CurlSupport"]),

        // The interceptor: HTTP client, URLProtocol and request rewriter, all on CurlSupport.
        // The only target that links FoundationNetworking.
        .target(name: "DNSInterceptor", dependencies: ["HTTPDNS", "DNSCore", "AddressProbing", "CurlSupport"]),

        // A SwiftNIO `Resolver` over HTTPDNS: the only library product besides the daemon that links NIO.
        .target(
            name: "HTTPDNSNIO",
            dependencies: [
                "HTTPDNS", "DNSCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]),

        // Hijack detection: verdicts from trusted vs system answers and TLS probes.
        .target(name: "HijackDetection", dependencies: ["DNSCore", "HTTPDNS", "AddressProbing", "SystemResolver"]),

        // What every listener of the daemon shares: the connection guard (deadline to speak, prompt
        // ACKs), the registry (limit, drain), ticking handlers, an event loop as a task executor.
        .target(
            name: "DaemonListening",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]),

        // The daemon's HTTP server: HTTP/1.1 and its own HTTP/2 layer (frame layer, request state
        // machine, NIO handler) behind a TLS + ALPN listener. Serves an `HTTPRequestHandling`; knows
        // nothing of DNS or of the daemon's state.
        .target(
            name: "DaemonHTTP",
            dependencies: [
                "DaemonListening", "HTTP2Wire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]),

        // The DNS wire code every DNS transport shares: the query parser, the response writer and
        // the answers built from the engine's results. Pure (DNSCore only) and fuzzed.
        .target(name: "DNSWire", dependencies: ["DNSCore"]),

        // The daemon's DNS listeners: the stub over UDP and TCP and DNS over TLS. Serves a
        // `StubAnswering`; no daemon state.
        .target(
            name: "DNSStubServer",
            dependencies: [
                "DNSCore", "DNSWire", "DaemonListening",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]),

        // The forward proxy: CONNECT tunnels (the splice relay on Linux), plain http:// forwarding,
        // the pure policy and head scan. Serves a `ProxyResolving`; no daemon state.
        .target(
            name: "ForwardProxy",
            dependencies: [
                "DNSCore", "DaemonHTTP", "DaemonListening", "IOScheduling",
                .target(name: "CRelay", condition: .when(platforms: [.linux])),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]),

        // The daemon: composition (config, reload, readiness, watcher, routes, metrics, the answers
        // of /dns-query, the stub and the proxy). Its servers are DaemonHTTP, DNSStubServer and
        // ForwardProxy.
        .target(
            name: "ResolverDaemon",
            dependencies: [
                "HTTPDNS", "HijackDetection", "AddressProbing", "SystemResolver", "ResolverConfig", "DNSCore", "ResultFormatting",
                "RedisCache", "DaemonListening", "DaemonHTTP", "DNSWire", "DNSStubServer", "ForwardProxy",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]),

        // Lookup results as JSON Lines and as text: the CLI's output and the daemon's /v1/resolve.
        .target(name: "ResultFormatting", dependencies: ["DNSCore"]),

        // The YAML configuration file of `resolve --config` and `resolve daemon`.
        .target(name: "ResolverConfig", dependencies: ["HTTPDNS", "DNSSEC", .product(name: "Yams", package: "Yams")]),

        // The CLI: argument parsing and printing only.
        .executableTarget(
            name: "resolve",
            dependencies: [
                "HTTPDNS", "DNSSEC",
                "DNSInterceptor",
                "HijackDetection",
                "AddressProbing",
                "ResultFormatting",
                "ResolverDaemon",
                "ResolverConfig",
                "SystemResolver",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

        // Benchmarks live apart from tests; Scripts/bench/bench-*.sh run them against named peers.
        .executableTarget(name: "DoHBenchmark", dependencies: ["HTTPDNS"], path: "Benchmarks/DoHBenchmark"),
        .executableTarget(name: "VendorBenchmark", dependencies: ["HTTPDNS", "DNSCore", "CurlSupport"], path: "Benchmarks/VendorBenchmark"),
        .executableTarget(name: "CacheBenchmark", dependencies: ["DNSCore", "HTTPDNS", "CCares"], path: "Benchmarks/CacheBenchmark"),
        // The DNSSEC validator's structure-aware forgery fuzzer (Scripts/fuzz-validator.sh).
        .executableTarget(
            name: "ValidatorForgeryFuzzer", dependencies: ["HTTPDNS", "DNSSEC", "DNSCore", "TestSupport"], path: "Fuzz/ValidatorForgery"),
        .executableTarget(name: "DNSSECBenchmark", dependencies: ["HTTPDNS", "DNSSEC", "DNSCore"], path: "Benchmarks/DNSSECBenchmark"),
        .executableTarget(
            name: "InterceptorBenchmark", dependencies: ["DNSInterceptor", "HTTPDNS", "CCurl"],
            path: "Benchmarks/InterceptorBenchmark"),
        .executableTarget(
            name: "CompareBenchmark", dependencies: ["HijackDetection", "AddressProbing", "HTTPDNS", "SystemResolver", "CurlSupport"],
            path: "Benchmarks/CompareBenchmark"),

        // Helpers shared by the test targets: the loopback environment's endpoints, fake servers.
        .target(
            name: "TestSupport",
            dependencies: [
                "DNSCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ], path: "Tests/TestSupport"),
        .testTarget(name: "HijackDetectionTests", dependencies: ["HijackDetection", "AddressProbing", "HTTPDNS", "DNSCore", "TestSupport"]),
        .testTarget(
            name: "DNSCoreTests",
            dependencies: [
                "DNSCore", "TestSupport", .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]),
        .testTarget(name: "CurlSupportTests", dependencies: ["CurlSupport", "TestSupport"]),
        .testTarget(name: "IOSchedulingTests", dependencies: ["IOScheduling", "TestSupport"]),
        .testTarget(name: "HTTP2WireTests", dependencies: ["HTTP2Wire"]),
        .testTarget(
            name: "RedisCacheTests",
            dependencies: [
                "RedisCache", "DNSCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]),
        .testTarget(name: "SystemResolverTests", dependencies: ["SystemResolver", "TestSupport"]),
        .testTarget(
            name: "DNSSECTests",
            dependencies: ["DNSSEC", "DNSCore", "HTTPDNS", "TestSupport", .product(name: "Crypto", package: "swift-crypto")],
            resources: [.copy("Vectors")]),
        .testTarget(name: "ResolverConfigTests", dependencies: ["ResolverConfig"]),
        .testTarget(
            name: "HTTPDNSTests",
            dependencies: [
                "HTTPDNS", "HTTP2Wire", "CurlSupport", "DNSCore", "SystemResolver", "TestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]),
        .testTarget(
            name: "HTTPDNSNIOTests",
            dependencies: [
                "HTTPDNSNIO", "HTTPDNS", "DNSCore", "TestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]),
        .testTarget(name: "DNSInterceptorTests", dependencies: ["DNSInterceptor", "AddressProbing", "HTTPDNS", "DNSCore", "TestSupport"]),
        .testTarget(
            name: "ResolverDaemonTests",
            dependencies: [
                "ResolverDaemon", "DaemonHTTP", "DaemonListening", "DNSWire", "DNSStubServer", "ForwardProxy", "HTTPDNS", "DNSCore", "ResolverConfig",
                "SystemResolver",
                "TestSupport",
                "CurlSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]),
        .testTarget(
            name: "DaemonHTTPTests",
            dependencies: [
                "DaemonHTTP", "DaemonListening", "HTTP2Wire", "TestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ]),
        .testTarget(
            name: "DaemonListeningTests",
            dependencies: [
                "DaemonListening", "TestSupport", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]),
        .testTarget(
            name: "ForwardProxyTests",
            dependencies: [
                "ForwardProxy", "DaemonHTTP", "DNSCore", "ResolverConfig", "TestSupport", .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "DNSStubServerTests",
            dependencies: [
                "DNSStubServer", "DNSWire", "DNSCore", "TestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]),
        .testTarget(name: "ResolveCLITests", dependencies: ["resolve", "TestSupport", "CurlSupport", "DNSCore"]),
    ]
)
